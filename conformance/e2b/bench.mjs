// Create to first command through the unmodified E2B JS SDK, the shape of
// ComputeSDK's TTI (Sandbox.create, then commands.run('node -v')), and
// creates per second at 20 at once (cube-bench's create-only shape).
// Against any server: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY as for
// sdk.mjs; SDK_BENCH_N sequential rounds (default 100), SDK_BENCH_CONC
// workers (20) making SDK_BENCH_CREATES sandboxes (200). Prints one JSON line.
import { Sandbox } from 'e2b'

const n = +(process.env.SDK_BENCH_N || 100)
const conc = +(process.env.SDK_BENCH_CONC || 20)
const creates = +(process.env.SDK_BENCH_CREATES || 200)
const template = process.env.SDK_BENCH_TEMPLATE || 'base'

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

// Warm the connection pool and the server's paths once.
await (await Sandbox.create(template)).kill()

const tti = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create(template)
  const r = await sbx.commands.run('node -v')
  tti.push(performance.now() - t0)
  if (r.exitCode !== 0) throw new Error(`node -v: ${JSON.stringify(r)}`)
  await sbx.kill()
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
}))
