'use strict';
// sandcell's javascript kernel driver.
//
// It runs as the first process of a kernel's sandbox (the same lock-down as
// any run) and executes cells sent by the server in one global scope, the
// way a notebook does: var, function, let, const and class declarations of
// a cell stay for the next ones, the value of the last expression is the
// cell's value, and top-level await works (as in node's REPL). The
// protocol is python.py's (oci/kernel_linux.go): commands on fd 3, replies
// on fd 4, a mark on stdout and stderr after each cell. A timeout or a
// cancellation arrives as SIGINT: synchronous code is interrupted (vm's
// breakOnSigint), an awaited promise is abandoned.
//
// Everything here runs inside the sandbox, with the user's code: the server
// trusts nothing it says.

const fs = require('fs');
const path = require('path');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { createRequire } = require('module');

const CMD_FD = 3;
const REPLY_FD = 4;
// The directory cells work in: a kernel's own sandbox has /work; a kernel
// in a live sandbox (package interp) names the context's directory.
const WORK = process.env.SANDCELL_KERNEL_WORK || '/work';
delete process.env.SANDCELL_KERNEL_WORK;
const DRIVER = __filename;
const MAX_VALUE = 1 << 20;
const MAX_TRACEBACK = 64 << 10;
const MAX_DISPLAY = 32;

// The driver's own references, taken before any cell can replace them.
const writeSync = fs.writeSync;
const stringify = JSON.stringify;
const parse = JSON.parse;
const inspect = util.inspect;

let processTopLevelAwait = null;
try {
  ({ processTopLevelAwait } = require('internal/repl/await'));
} catch (e) {
  // Without node's REPL rewriter a cell that awaits runs wrapped in an
  // async function: its declarations stay local to it.
}

function writeAll(fd, data) {
  try {
    let off = 0;
    while (off < data.length) off += writeSync(fd, data, off);
    return true;
  } catch (e) {
    return false;
  }
}

function send(obj) {
  writeAll(REPLY_FD, Buffer.from(stringify(obj) + '\n', 'utf8'));
}

const state = { running: false, cmd: null, display: null, images: 0, interrupt: null };

function outputsDir() {
  const d = path.join(WORK, state.cmd.outputs || 'outputs');
  fs.mkdirSync(d, { recursive: true });
  return d;
}

function imagePath(ext) {
  state.images += 1;
  return path.join(outputsDir(), `cell${state.cmd.cell || 0}-figure${state.images}.${ext}`);
}

function add(item) {
  if (state.display.length < MAX_DISPLAY) state.display.push(item);
  else if (state.display.length === MAX_DISPLAY) state.display.push({ kind: 'text', text: '(more display items were left out)' });
}

function pngSize(buf) {
  if (buf.length >= 24 && buf.readUInt32BE(0) === 0x89504e47 && buf.toString('latin1', 12, 16) === 'IHDR') {
    return [buf.readUInt32BE(16), buf.readUInt32BE(20)];
  }
  return [0, 0];
}

const MAGIC = [
  [Buffer.from('89504e470d0a1a0a', 'hex'), 'png', 'image/png'],
  [Buffer.from('ffd8ff', 'hex'), 'jpg', 'image/jpeg'],
  [Buffer.from('GIF87a'), 'gif', 'image/gif'],
  [Buffer.from('GIF89a'), 'gif', 'image/gif'],
];
const EXT_MIME = { '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif', '.webp': 'image/webp', '.svg': 'image/svg+xml' };

function addImage(file, mime, head) {
  const item = { kind: 'image', path: path.relative(WORK, file), mime };
  if (mime === 'image/png') {
    const [w, h] = pngSize(head);
    if (w) { item.width = w; item.height = h; }
  }
  add(item);
}

function showBytes(buf) {
  for (const [magic, ext, mime] of MAGIC) {
    if (buf.length >= magic.length && buf.subarray(0, magic.length).equals(magic)) {
      const file = imagePath(ext);
      fs.writeFileSync(file, buf);
      addImage(file, mime, buf.subarray(0, 24));
      return true;
    }
  }
  return false;
}

function showFile(p) {
  let file = path.resolve(WORK, p);
  const mime = EXT_MIME[path.extname(file).toLowerCase()];
  if (!mime || !fs.existsSync(file) || !fs.statSync(file).isFile()) return false;
  let head = Buffer.alloc(0);
  if (path.relative(WORK, file).startsWith('..')) {
    const data = fs.readFileSync(file);
    file = imagePath(path.extname(file).slice(1).toLowerCase());
    fs.writeFileSync(file, data);
    head = data.subarray(0, 24);
  } else {
    const fd = fs.openSync(file, 'r');
    head = Buffer.alloc(24);
    fs.readSync(fd, head, 0, 24, 0);
    fs.closeSync(fd);
  }
  addImage(file, mime, head);
  return true;
}

function text(v) {
  if (typeof v === 'string') return v;
  return inspect(v, { depth: 4, maxArrayLength: 200, maxStringLength: 100000, breakLength: 120 });
}

// display(...values): images (PNG/JPEG/GIF bytes in a Buffer or
// Uint8Array, or the path of an image file) become image content, anything
// else its text.
function display(...values) {
  if (!state.display) return;
  for (const v of values) {
    try {
      if (v instanceof Uint8Array && showBytes(Buffer.from(v.buffer, v.byteOffset, v.byteLength))) continue;
      if (typeof v === 'string' && v.length < 4096 && showFile(v)) continue;
      add({ kind: 'text', text: text(v).slice(0, MAX_VALUE) });
    } catch (e) {
      add({ kind: 'text', text: `display failed: ${e && e.message}` });
    }
  }
}

function cleanStack(stack) {
  return String(stack).split('\n').filter((l) => !l.includes(DRIVER) && !l.includes('node:internal/') && !l.includes('node:vm:')).join('\n');
}

function errorOf(e) {
  if (e instanceof Error) {
    let tb = cleanStack(e.stack || `${e.name}: ${e.message}`);
    if (tb.length > MAX_TRACEBACK) tb = tb.slice(0, MAX_TRACEBACK / 2) + '\n[... traceback cut ...]\n' + tb.slice(-MAX_TRACEBACK / 2);
    return { type: (e.constructor && e.constructor.name) || e.name || 'Error', message: String(e.message).slice(0, MAX_TRACEBACK), traceback: tb };
  }
  return { type: typeof e, message: text(e).slice(0, MAX_TRACEBACK), traceback: `Uncaught ${text(e).slice(0, MAX_TRACEBACK)}` };
}

class Interrupted extends Error {
  constructor() {
    super('the cell was interrupted (timeout or cancellation)');
    this.name = 'Interrupted';
  }
}

async function runCell(code, cell) {
  const filename = `<cell ${cell}>`;
  let source = code;
  let awaited = false;
  if (processTopLevelAwait) {
    const rewritten = processTopLevelAwait(code);
    if (rewritten !== null) {
      source = rewritten;
      awaited = true;
    }
  } else if (/\bawait\b/.test(code)) {
    try {
      new vm.Script(code, { filename });
    } catch (e) {
      source = `(async () => {\n${code}\n})()`;
      awaited = true;
    }
  }
  const script = new vm.Script(source, { filename, importModuleDynamically: (s) => import(s) });
  let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  if (awaited) {
    value = await Promise.race([value, new Promise((_, reject) => { state.interrupt = reject; })]);
    if (processTopLevelAwait && value && typeof value === 'object') value = value.value;
  }
  return value;
}

let count = 0;

// cellEnv sets a cell's own environment variables (cmd.env) and returns
// what restoreEnv puts back after it.
function cellEnv(env) {
  const saved = new Map();
  if (!env || typeof env !== 'object') return saved;
  for (const [k, v] of Object.entries(env)) {
    if (typeof v !== 'string' || !k || k.includes('=') || (k + v).includes('\0')) continue;
    saved.set(k, Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined);
    process.env[k] = v;
  }
  return saved;
}

function restoreEnv(saved) {
  for (const [k, v] of saved) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}

async function handle(cmd) {
  count += 1;
  state.cmd = cmd;
  state.display = [];
  state.images = 0;
  const reply = { id: cmd.id, status: 'ok', execution_count: count };
  const saved = cellEnv(cmd.env);
  try {
    state.running = true;
    const value = await runCell(String(cmd.code || ''), Number(cmd.cell) || count);
    if (value !== undefined) {
      globalThis._ = value;
      reply.value = text(value).slice(0, MAX_VALUE);
      reply.value_type = value === null ? 'null' : (typeof value === 'object' && value.constructor ? value.constructor.name : typeof value);
    }
  } catch (e) {
    reply.status = 'error';
    const interrupted = e instanceof Interrupted || (e instanceof Error && /Script execution (was )?interrupted/.test(e.message));
    reply.error = errorOf(e);
    reply.interrupted = interrupted;
  } finally {
    state.running = false;
    state.interrupt = null;
    restoreEnv(saved);
  }
  if (state.display.length) reply.display = state.display;
  const mark = Buffer.from(String(cmd.mark || ''), 'latin1');
  reply.marks = [writeAll(1, mark), writeAll(2, mark)];
  state.cmd = null;
  state.display = null;
  send(reply);
}

function main() {
  // Between cells an interrupt (a timeout that raced with the cell's end)
  // is ignored; during an awaited cell it abandons the cell.
  process.on('SIGINT', () => {
    if (state.running && state.interrupt) state.interrupt(new Interrupted());
  });
  // A rejection nobody handles must not end the kernel (node's default).
  process.on('unhandledRejection', (reason) => {
    writeAll(2, Buffer.from(`Unhandled promise rejection: ${text(reason)}\n`));
  });
  process.on('uncaughtException', (e) => {
    writeAll(2, Buffer.from(`Uncaught exception: ${(e && e.stack) || text(e)}\n`));
  });
  try { process.chdir(WORK); } catch (e) { /* no /work */ }
  globalThis.require = createRequire(path.join(WORK, 'sandcell-cell.js'));
  globalThis.display = display;
  process.argv = [process.argv[0]];

  const input = readline.createInterface({ input: fs.createReadStream(null, { fd: CMD_FD, highWaterMark: 1 << 16 }), crlfDelay: Infinity });
  let queue = Promise.resolve();
  input.on('line', (line) => {
    let cmd;
    try {
      cmd = parse(line);
    } catch (e) {
      return;
    }
    if (!cmd || cmd.op !== 'run') return;
    queue = queue.then(() => handle(cmd));
  });
  // The server closed the channel: the kernel ends.
  input.on('close', () => process.exit(0));
  send({ ready: true, language: 'javascript', version: process.versions.node, pid: process.pid });
}

main();
