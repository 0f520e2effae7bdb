// The unmodified E2B SDKs (e2b 2.51.0, @e2b/code-interpreter 2.8.0) against
// a sandcell serving E2B at E2B_API_URL = E2B_SANDBOX_URL. Driven by
// e2b/sdk_test.go (over a fake service) and rerun against real sandboxes:
//   E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080 \
//   E2B_API_KEY=e2b_... node sdk.mjs
// Prints one JSON line a scenario: {"name", "ok", "error"?}; exits 1 if one
// failed. SDK_PORT_TEXT, when set, is what the server on port 3000 of a
// sandbox answers (the getHost scenario needs a server there); SDK_PORT_CMD,
// when set, is the command that starts that server in the sandbox.
import http from 'node:http'
import { Sandbox, CommandExitError, NotFoundError, TimeoutError } from 'e2b'
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter'

const only = process.env.SDK_ONLY ? process.env.SDK_ONLY.split(',') : null
let failed = 0

function check(cond, what) {
  if (!cond) throw new Error(what)
}

async function scenario(name, fn) {
  if (only && !only.includes(name)) return
  try {
    await fn()
    console.log(JSON.stringify({ name, ok: true }))
  } catch (err) {
    failed++
    console.log(JSON.stringify({ name, ok: false, error: String(err && err.stack || err) }))
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// get fetches path from the API origin with the given Host and headers:
// what a client of getHost(port) does once DNS sends PORT-ID.DOMAIN here.
function get(host, headers) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: u.hostname, port: u.port, path: '/', headers: { ...headers, host } }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

const sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { suite: 'sdk' } })

await scenario('create', async () => {
  check(/^[a-z0-9]+$/.test(sbx.sandboxId), `sandbox id ${sbx.sandboxId}`)
  check(await sbx.isRunning(), 'not running after create')
})

await scenario('commands.run wait', async () => {
  const r = await sbx.commands.run('echo hello')
  check(r.exitCode === 0 && r.stdout === 'hello\n' && r.stderr === '', JSON.stringify(r))
  const env = await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })
  check(env.stdout === 'bar\n', `envs: ${env.stdout}`)
  const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
  check(cwd.stdout === '/tmp\n', `cwd: ${cwd.stdout}`)
  try {
    await sbx.commands.run('exit 3')
    throw new Error('exit 3 did not throw')
  } catch (err) {
    check(err instanceof CommandExitError && err.exitCode === 3, `exit 3: ${err}`)
  }
})

await scenario('whoami', async () => {
  const who = await sbx.commands.run('whoami')
  check(who.stdout === 'user\n', `whoami: ${who.stdout}`)
  const root = await sbx.commands.run('whoami', { user: 'root' })
  check(root.stdout === 'root\n', `whoami as root: ${root.stdout}`)
})

await scenario('commands stream', async () => {
  const out = [], errs = []
  const r = await sbx.commands.run('echo streamed', { onStdout: (d) => out.push(d) })
  check(out.join('') === 'streamed\n' && r.stdout === 'streamed\n', `onStdout: ${JSON.stringify(out)}`)
  await sbx.commands.run('echo oops >&2', { onStderr: (d) => errs.push(d) })
  check(errs.join('') === 'oops\n', `onStderr: ${JSON.stringify(errs)}`)
})

await scenario('commands background and kill', async () => {
  const h = await sbx.commands.run('sleep 1000', { background: true })
  const list = await sbx.commands.list()
  check(list.some((p) => p.pid === h.pid && p.args.includes('sleep 1000')), `list: ${JSON.stringify(list)}`)
  check(await h.kill(), 'kill returned false')
  try {
    await h.wait()
    throw new Error('a killed command did not throw')
  } catch (err) {
    check(err instanceof CommandExitError, `wait after kill: ${err}`)
  }
  check(!(await sbx.commands.kill(h.pid)), 'kill of an ended process returned true')
})

await scenario('commands timeout', async () => {
  // E2B ends a command at its timeoutMs; the SDK reports a TimeoutError.
  const h = await sbx.commands.run('sleep 10', { timeoutMs: 1000, background: true })
  try {
    await h.wait()
    throw new Error('a command past its timeout did not throw')
  } catch (err) {
    check(err instanceof TimeoutError, `past its timeout: ${err}`)
  }
  // The client gives up at its deadline; the server ends the command at the same one.
  let alive = true
  for (let i = 0; i < 30 && alive; i++) {
    alive = (await sbx.commands.list()).some((p) => p.pid === h.pid)
    if (alive) await sleep(100)
  }
  check(!alive, 'the command outlived its timeout')
})

await scenario('commands stdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'ping\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  check(r.stdout === 'ping\n', `cat: ${JSON.stringify(r)}`)
})

await scenario('files', async () => {
  const info = await sbx.files.write('/home/user/dir/a.txt', 'content')
  check(info.path === '/home/user/dir/a.txt', `write: ${JSON.stringify(info)}`)
  check((await sbx.files.read('/home/user/dir/a.txt')) === 'content', 'read')
  await sbx.files.write([{ path: 'dir/b.txt', data: 'bee' }, { path: '/home/user/dir/c.bin', data: new Uint8Array([1, 2, 3]) }])
  const bytes = await sbx.files.read('dir/c.bin', { format: 'bytes' })
  check(bytes.length === 3 && bytes[2] === 3, `bytes: ${bytes}`)
  const list = await sbx.files.list('/home/user/dir')
  check(JSON.stringify(list.map((e) => e.name).sort()) === '["a.txt","b.txt","c.bin"]', `list: ${JSON.stringify(list)}`)
  check(list.every((e) => e.type === 'file'), `types: ${JSON.stringify(list)}`)
  check(await sbx.files.exists('dir/b.txt'), 'exists')
  check(!(await sbx.files.exists('dir/nope')), 'exists of nothing')
  const st = await sbx.files.getInfo('dir/a.txt')
  check(st.size === 7 && st.type === 'file', `getInfo: ${JSON.stringify(st)}`)
  check(await sbx.files.makeDir('dir/sub'), 'makeDir')
  check(!(await sbx.files.makeDir('dir/sub')), 'makeDir again')
  await sbx.files.rename('dir/b.txt', 'dir/sub/b.txt')
  check((await sbx.files.read('dir/sub/b.txt')) === 'bee', 'rename')
  // Signed URLs, fetched with no header (as a browser or curl would).
  const down = await fetch(await sbx.downloadUrl('/home/user/dir/sub/b.txt'))
  check(down.status === 200 && (await down.text()) === 'bee', `downloadUrl: ${down.status}`)
  const form = new FormData()
  form.append('file', new Blob(['uploaded']), 'up.txt')
  const up = await fetch(await sbx.uploadUrl('/home/user/dir/up.txt', { useSignatureExpiration: 60 }), { method: 'POST', body: form })
  check(up.status === 200 && (await sbx.files.read('dir/up.txt')) === 'uploaded', `uploadUrl: ${up.status}`)
  await sbx.files.remove('dir/a.txt')
  check(!(await sbx.files.exists('dir/a.txt')), 'remove')
  await sbx.files.remove('dir/a.txt') // nothing there: done, as E2B's envd says
  try {
    await sbx.files.read('dir/nope')
    throw new Error('read of nothing did not throw')
  } catch (err) {
    check(err instanceof NotFoundError, `read of nothing: ${err}`)
  }
})

await scenario('files watch', async () => {
  await sbx.files.makeDir('w')
  const seen = []
  const w = await sbx.files.watchDir('w', (ev) => seen.push(`${ev.type} ${ev.name}`))
  await sbx.files.write('w/x.txt', 'x')
  for (let i = 0; i < 50 && !seen.length; i++) await sleep(100)
  await w.stop()
  check(seen.includes('create x.txt'), `events: ${JSON.stringify(seen)}`)
})

await scenario('getHost', async () => {
  const host = sbx.getHost(3000)
  check(host === `3000-${sbx.sandboxId}.${process.env.E2B_DOMAIN || 'e2b.app'}`, `host ${host}`)
  if (!process.env.SDK_PORT_TEXT) return
  if (process.env.SDK_PORT_CMD) {
    // A real sandbox: start the dev server there (it must answer / with SDK_PORT_TEXT).
    await sbx.commands.run(process.env.SDK_PORT_CMD, { background: true })
  }
  let r
  for (let i = 0; i < 50; i++) {
    r = await get(host, { 'e2b-traffic-access-token': sbx.trafficAccessToken })
    if (r.status === 200) break
    await sleep(100)
  }
  check(r.status === 200 && r.body === process.env.SDK_PORT_TEXT, `GET ${host}: ${r.status} ${r.body}`)
  const anon = await get(host, {})
  check(anon.status === 401, `without a token: ${anon.status}`)
})

await scenario('setTimeout and info', async () => {
  await sbx.setTimeout(300_000)
  const info = await sbx.getInfo()
  check(info.sandboxId === sbx.sandboxId && info.templateId === 'base' && info.state === 'running', JSON.stringify(info))
  const left = info.endAt.getTime() - Date.now()
  check(left > 250_000 && left <= 300_000, `endAt ${info.endAt}`)
  check(info.metadata.suite === 'sdk', `metadata ${JSON.stringify(info.metadata)}`)
})

await scenario('list', async () => {
  const p = Sandbox.list({ query: { metadata: { suite: 'sdk' } } })
  const items = await p.nextItems()
  check(items.some((s) => s.sandboxId === sbx.sandboxId), `list: ${JSON.stringify(items)}`)
  check(!p.hasNext, 'a second page')
})

await scenario('pause and connect', async () => {
  check(await Sandbox.pause(sbx.sandboxId), 'pause returned false')
  check(!(await Sandbox.pause(sbx.sandboxId)), 'a second pause returned true')
  check(!(await sbx.isRunning()), 'a paused sandbox is running')
  check((await sbx.getInfo()).state === 'paused', 'getInfo of a paused sandbox')
  const again = await Sandbox.connect(sbx.sandboxId)
  const r = await again.commands.run('echo back')
  check(r.stdout === 'back\n', `after resume: ${r.stdout}`)
})

await scenario('pty', async () => {
  const got = []
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => got.push(Buffer.from(d).toString()) })
  await sbx.pty.sendInput(t.pid, new TextEncoder().encode('echo from-pty\n'))
  for (let i = 0; i < 50 && !got.join('').includes('from-pty'); i++) await sleep(100)
  check(got.join('').includes('from-pty'), `pty output: ${JSON.stringify(got)}`)
  await sbx.pty.resize(t.pid, { cols: 100, rows: 30 })
  check(await sbx.pty.kill(t.pid), 'pty kill returned false')
})

await scenario('kill during a command', async () => {
  const other = await Sandbox.create('base')
  const cmd = await other.commands.run('sleep 60', { background: true })
  await other.kill()
  const err = await cmd.wait().catch((e) => e)
  check(err instanceof TimeoutError && err.message.includes('sandbox was killed or reached its end of life'), `${err}`)
})

await scenario('kill', async () => {
  await sbx.kill()
  check(!(await sbx.isRunning()), 'running after kill')
  check(!(await Sandbox.kill(sbx.sandboxId)), 'a second kill returned true')
  try {
    await sbx.commands.run('echo ghost')
    throw new Error('a command ran in a killed sandbox')
  } catch (err) {
    check(!String(err).includes('ghost'), `${err}`)
  }
})

await scenario('code interpreter', async () => {
  const ci = await CodeInterpreter.create()
  try {
    await ci.runCode('x = 41')
    const out = []
    let ex = await ci.runCode('print(x)\nx', { onStdout: (m) => out.push(m.line) })
    check(ex.logs.stdout.join('') === '41\n' && out.join('') === '41\n', `stdout: ${JSON.stringify(ex.logs)}`)
    check(ex.text === '41', `state across calls: ${ex.text}`)
    ex = await ci.runCode('raise ZeroDivisionError')
    check(ex.error && ex.error.name === 'ZeroDivisionError' && ex.error.traceback.includes('Traceback'), `error: ${JSON.stringify(ex.error)}`)
    ex = await ci.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
    check(ex.results.length === 1 && ex.results[0].png && !ex.results[0].isMainResult, `plot: ${JSON.stringify(ex.results)}`)
    const js = await ci.runCode('x', { language: 'js' })
    check(js.text === undefined, `javascript saw python's x: ${js.text}`)
    const ctx = await ci.createCodeContext({ language: 'bash' })
    check(ctx.id && ctx.language === 'bash' && ctx.cwd === '/home/user', JSON.stringify(ctx))
    await ci.runCode('Y=7', { context: ctx })
    let b = await ci.runCode('echo $Y', { context: ctx })
    check(b.logs.stdout.join('') === '7\n', `bash context state: ${JSON.stringify(b.logs)}`)
    const ctxs = await ci.listCodeContexts()
    check(ctxs[ctxs.length - 1].id === ctx.id, `contexts: ${JSON.stringify(ctxs)}`)
    check(['python', 'javascript'].every((l) => ctxs.some((c) => c.language === l)), `default contexts: ${JSON.stringify(ctxs)}`)
    await ci.restartCodeContext(ctx)
    b = await ci.runCode('echo $Y', { context: ctx })
    check(b.logs.stdout.join('') === '\n', `restart kept state: ${JSON.stringify(b.logs)}`)
    await ci.removeCodeContext(ctx.id)
    check(!(await ci.listCodeContexts()).some((c) => c.id === ctx.id), 'removed context still listed')
  } finally {
    await ci.kill()
  }
})

await scenario('code interpreter killed during a cell', async () => {
  const ci = await CodeInterpreter.create()
  const run = ci.runCode('import time; time.sleep(300)', { timeoutMs: 300_000 }).then(() => null, (e) => e)
  await sleep(1000)
  await ci.kill()
  const err = await run
  check(err instanceof TimeoutError && /sandbox was killed while the request was in progress/.test(err.message), `${err}`)
})

// The code interpreter over kernels running inside real sandboxes (the
// 'ci ...' scenarios, run by cmd/sandcell's TestE2BSDKOnRealSandboxes):
// one sandbox of the SDK's default template (code-interpreter-v1) for
// them all, and one of the javascript template for the javascript context.
let ciBox = null
const ci = async () => (ciBox ??= await CodeInterpreter.create({ timeoutMs: 300_000 }))

await scenario('ci state', async () => {
  const s = await ci()
  await s.runCode('x = 41')
  const out = []
  const ex = await s.runCode('print(x)\nx + 1', { onStdout: (m) => out.push(m.line) })
  check(ex.logs.stdout.join('') === '41\n' && out.join('') === '41\n', `stdout: ${JSON.stringify(ex.logs)}`)
  check(ex.text === '42' && ex.results.length === 1 && ex.results[0].isMainResult, `value: ${JSON.stringify(ex.results)}`)
  check(ex.executionCount === 2, `execution count ${ex.executionCount}`)
})

await scenario('ci error', async () => {
  const ex = await (await ci()).runCode('def f():\n    raise ZeroDivisionError("boom")\nf()')
  check(ex.error && ex.error.name === 'ZeroDivisionError' && ex.error.value === 'boom', `error: ${JSON.stringify(ex.error)}`)
  check(ex.error.traceback.includes('Traceback') && ex.error.traceback.includes('in f'), `traceback: ${ex.error.traceback}`)
})

await scenario('ci plot', async () => {
  const ex = await (await ci()).runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
  check(!ex.error, `error: ${JSON.stringify(ex.error)}`)
  const png = ex.results.length === 1 && ex.results[0].png
  check(png && !ex.results[0].isMainResult, `plot: ${JSON.stringify(ex.results).slice(0, 300)}`)
  const bytes = Buffer.from(png, 'base64')
  check(bytes.length > 1000 && bytes.subarray(0, 8).equals(Buffer.from('89504e470d0a1a0a', 'hex')), `not a PNG: ${bytes.length} bytes`)
})

await scenario('ci dataframe', async () => {
  const ex = await (await ci()).runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
  check(!ex.error && ex.results.length === 1 && ex.results[0].isMainResult, `results: ${JSON.stringify(ex.results).slice(0, 300)} ${JSON.stringify(ex.error)}`)
  check(ex.results[0].html && ex.results[0].html.includes('<table'), `no html table: ${JSON.stringify(ex.results[0])}`)
  check(ex.text.includes('a  b'), `text: ${ex.text}`)
})

await scenario('ci files', async () => {
  const s = await ci()
  await s.files.write('/home/user/data.txt', 'written by files.write')
  const ex = await s.runCode("open('data.txt').read()")
  check(ex.text === "'written by files.write'", `read: ${ex.text} ${JSON.stringify(ex.error)}`)
  await s.runCode("open('made.txt', 'w').write('by the kernel')")
  check((await s.files.read('/home/user/made.txt')) === 'by the kernel', 'the kernel\'s file is not in the home')
  const who = await s.runCode('import getpass, os\n(getpass.getuser(), os.getcwd())')
  check(who.text === "('user', '/home/user')", `user and cwd: ${who.text}`)
})

await scenario('ci envs', async () => {
  const s = await ci()
  const ex = await s.runCode("import os\nos.environ['CELL_VAR']", { envs: { CELL_VAR: 'for this cell' } })
  check(ex.text === "'for this cell'", `envs: ${ex.text} ${JSON.stringify(ex.error)}`)
  const after = await s.runCode("os.environ.get('CELL_VAR', 'unset')")
  check(after.text === "'unset'", `envs after their cell: ${after.text}`)
})

await scenario('ci timeout then next cell', async () => {
  const s = await ci()
  await s.runCode('kept = 5')
  try {
    await s.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 })
    throw new Error('a 60 s cell did not time out')
  } catch (err) {
    check(err instanceof TimeoutError, `${err}`)
  }
  const t0 = Date.now()
  const ex = await s.runCode('kept')
  check(ex.text === '5' && Date.now() - t0 < 10_000, `after a client timeout: ${ex.text} in ${Date.now() - t0} ms`)
})

await scenario('ci contexts', async () => {
  const s = await ci()
  const ctx = await s.createCodeContext({ language: 'python', cwd: '/tmp' })
  check(ctx.id && ctx.language === 'python' && ctx.cwd === '/tmp', JSON.stringify(ctx))
  await s.runCode('y = 1', { context: ctx })
  check((await s.runCode('import os\n(y, os.getcwd())', { context: ctx })).text === "(1, '/tmp')", 'context state or cwd')
  check((await s.runCode("'y' in globals()")).text === 'False', 'a context shares the default one\'s state')
  check((await s.listCodeContexts()).some((c) => c.id === ctx.id), 'context not listed')
  await s.restartCodeContext(ctx)
  const r = await s.runCode('y', { context: ctx })
  check(r.error && r.error.name === 'NameError', `restart kept state: ${JSON.stringify(r)}`)
  await s.removeCodeContext(ctx.id)
  check(!(await s.listCodeContexts()).some((c) => c.id === ctx.id), 'removed context still listed')
  for (const language of ['r', 'java']) {
    try {
      await s.createCodeContext({ language })
      throw new Error(`a ${language} context was made`)
    } catch (err) {
      // The SDK shows a 400 without its body; the body names the
      // languages offered (e2b's and interp's tests check it).
      check(/400|offered: python, javascript, bash/.test(String(err)), `${language}: ${err}`)
    }
  }
})

await scenario('ci bash', async () => {
  const s = await ci()
  const ctx = await s.createCodeContext({ language: 'bash' })
  check(ctx.id && ctx.language === 'bash' && ctx.cwd === '/home/user', JSON.stringify(ctx))
  await s.runCode('Y=7; mkdir -p sub && cd sub', { context: ctx })
  let b = await s.runCode('echo "$Y $(pwd) $(whoami)"', { context: ctx })
  check(b.logs.stdout.join('') === '7 /home/user/sub user\n', `bash context state: ${JSON.stringify(b.logs)}`)
  b = await s.runCode('ls /nonexistent', { context: ctx })
  check(b.error && b.logs.stderr.join('').includes('nonexistent'), `a failing command: ${JSON.stringify(b)}`)
  try {
    await s.runCode('sleep 60', { context: ctx, timeoutMs: 1500 })
    throw new Error('a 60 s sleep did not time out')
  } catch (err) {
    check(err instanceof TimeoutError, `${err}`)
  }
  const t0 = Date.now()
  b = await s.runCode('echo "$Y"', { context: ctx })
  check(b.logs.stdout.join('') === '7\n' && Date.now() - t0 < 4000, `after an interrupt: ${JSON.stringify(b.logs)} in ${Date.now() - t0} ms`)
  await s.restartCodeContext(ctx)
  b = await s.runCode('echo "[$Y]"', { context: ctx })
  check(b.logs.stdout.join('') === '[]\n', `restart kept state: ${JSON.stringify(b.logs)}`)
  await s.removeCodeContext(ctx.id)
})

await scenario('ci javascript', async () => {
  const s = await CodeInterpreter.create('javascript', { timeoutMs: 120_000 })
  try {
    await s.runCode('var y = 2', { language: 'js' })
    const ex = await s.runCode("console.log('hi'); y * 21", { language: 'js' })
    check(ex.text === '42' && ex.logs.stdout.join('') === 'hi\n', `javascript: ${JSON.stringify(ex)}`)
    const err = await s.runCode('null.x', { language: 'js' })
    check(err.error && err.error.name === 'TypeError', `javascript error: ${JSON.stringify(err.error)}`)
  } finally {
    await s.kill()
  }
})

await scenario('ci round trip', async () => {
  const s = await ci()
  const ms = []
  for (let i = 0; i < 21; i++) {
    const t0 = process.hrtime.bigint()
    const ex = await s.runCode('1+1')
    if (i > 0) ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
    check(ex.text === '2', `1+1: ${ex.text}`)
  }
  ms.sort((a, b) => a - b)
  console.log(`measure: runCode("1+1") round trip over ${ms.length} calls: p50 ${ms[ms.length >> 1].toFixed(1)} ms, min ${ms[0].toFixed(1)} ms, max ${ms[ms.length - 1].toFixed(1)} ms`)
})

if (ciBox) await ciBox.kill()

process.exit(failed ? 1 : 0)
