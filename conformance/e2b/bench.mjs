// Create to first command through the unmodified E2B JS SDK, the shape of
// ComputeSDK's TTI (Sandbox.create, then commands.run('node -v')), and
// creates per second at 20 at once (cube-bench's create-only shape).
// Against any server: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY as for
// sdk.mjs; SDK_BENCH_N sequential rounds (default 100), SDK_BENCH_CONC
// workers (20) making SDK_BENCH_CREATES sandboxes (200). Prints one JSON line.
// SDK_BENCH_CMD is the first command (default `node -v`; `true` for a root
// without node). With SANDCELL_URL (sandcell's origin, e.g. the same server)
// each round also does the same steps through sandcell's own API
// (POST /v1/sandboxes, POST .../processes?wait=true, DELETE), alternating
// with the SDK's so that both see the same load: the api_* fields.
// SDK_BENCH_API_LANGUAGE is the language of the API's sandboxes, the one
// the E2B template maps to (e.g. workbench for base; default: the server's
// default root).
import { Sandbox } from 'e2b'

const n = +(process.env.SDK_BENCH_N || 100)
const conc = +(process.env.SDK_BENCH_CONC || 20)
const creates = +(process.env.SDK_BENCH_CREATES || 200)
const template = process.env.SDK_BENCH_TEMPLATE || 'base'
const first = process.env.SDK_BENCH_CMD || 'node -v'
const own = process.env.SANDCELL_URL
const apiSpec = JSON.stringify(process.env.SDK_BENCH_API_LANGUAGE ? { language: process.env.SDK_BENCH_API_LANGUAGE } : {})

// apiRound: create, run first to its end, through sandcell's own API; the
// time to the command's end, then the kill (not timed, as the SDK's).
async function apiRound() {
  const t0 = performance.now()
  const c = await fetch(`${own}/v1/sandboxes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: apiSpec })
  const sb = await c.json()
  if (c.status !== 201) throw new Error(`create: ${c.status} ${JSON.stringify(sb)}`)
  const r = await fetch(`${own}/v1/sandboxes/${sb.sandbox_id}/processes?wait=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ shell: first }) })
  const p = await r.json()
  const ms = performance.now() - t0
  if (r.status !== 200 || !p.exit || p.exit.exit_code !== 0) throw new Error(`${first}: ${r.status} ${JSON.stringify(p)}`)
  await (await fetch(`${own}/v1/sandboxes/${sb.sandbox_id}`, { method: 'DELETE' })).arrayBuffer()
  return ms
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

// Warm the connection pool and the server's paths once.
await (await Sandbox.create(template)).kill()

if (own) await apiRound()

const tti = [], api = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create(template)
  const r = await sbx.commands.run(first)
  tti.push(performance.now() - t0)
  if (r.exitCode !== 0) throw new Error(`${first}: ${JSON.stringify(r)}`)
  await sbx.kill()
  if (own) api.push(await apiRound())
}

const made = []
let next = 0
const t0 = performance.now()
await Promise.all(Array.from({ length: conc }, async () => {
  while (next < creates) {
    next++
    made.push(await Sandbox.create(template))
  }
}))
const secs = (performance.now() - t0) / 1000
await Promise.all(made.map((s) => s.kill()))

console.log(JSON.stringify({
  n, tti_p50_ms: +pct(tti, 50).toFixed(2), tti_p99_ms: +pct(tti, 99).toFixed(2),
  concurrency: conc, creates, creates_per_s: +(creates / secs).toFixed(1),
  ...(own ? { api_tti_p50_ms: +pct(api, 50).toFixed(2), api_tti_p99_ms: +pct(api, 99).toFixed(2) } : {}),
}))
