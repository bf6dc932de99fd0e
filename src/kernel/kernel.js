// corral JavaScript/TypeScript kernel: the process behind one `javascript` or
// `typescript` context of a corral sandbox.
//
// The agent starts it as `node -e <this file> <language>` with fd 0 on
// /dev/null, fd 3 a SOCK_STREAM Unix socket to the daemon, and fds 1 and 2
// pipes whose read ends are this process's fds 4 and 5.  It speaks the frames
// of docs/kernel-protocol.md on fd 3: a 4-byte big-endian length and ASCII
// JSON whose `type` member comes first; `execute`, `environ` and `warm` in,
// `ready`, `stream`, `result`, `error` and `done` out.
//
// Cells run in the kernel's own global context (vm.Script#runInThisContext),
// so state persists between them as in Node's REPL.  Each cell is parsed with
// Debian's acorn and rewritten before it runs:
//   - top-level let/const/class become `let` bindings of the script scope that
//     are declared once and assigned by the cell, so re-running a cell that
//     declares `const x` works (a top-level const is therefore reassignable
//     by later cells, as in Node's REPL after a top-level await);
//   - a cell with top-level `await` (or `for await`, or a static import) is
//     wrapped in an async function as Node's REPL does: its top-level
//     declarations are hoisted out of it so that they stay global, and its
//     last expression statement is returned as the cell's value;
//   - static imports become `await import(...)` with destructuring, and every
//     `import(...)` goes through the kernel (vm scripts have no module loader
//     of their own without a flag), which resolves bare names with Node's ESM
//     resolution and then as require() does;
//   - the value of the last expression statement is the main result, shown
//     as util.inspect shows it (as Node's REPL); `_` holds it afterwards.
// TypeScript cells are first transpiled with Debian's typescript
// (transpileModule: no type checking).  Positions in stack traces are mapped
// back to the cell's lines.
//
// Output: process.stdout/process.stderr and the global console are replaced
// by writers that hand text to a sender thread (a worker), which owns the
// writing side of fd 3, batches stream chunks (at once on a newline, at the
// latest 40 ms later) and reads the pipes behind fds 1 and 2, also while the
// main thread is busy (execSync, a busy loop).  The bytes between threads are
// bounded: a chatty cell waits for the daemon instead of growing the memory.
// Text written by callbacks while no execution runs goes with the next one
// (up to 1 MiB); descriptor-level output and display() then are dropped.
//
// SIGINT interrupts the running cell: a synchronous one through vm's
// breakOnSigint, a synchronous child process (execSync) by signalling it, a
// pending top-level await by abandoning the cell's promise, and JavaScript
// busy after an await (in a promise or timer callback) by terminating it
// through the inspector.  It is ignored while idle.  See "Interrupts" below.  process.exit() throws (the cell ends, not the kernel);
// unhandled rejections and uncaught exceptions of callbacks are reported on
// stderr.  EOF on fd 3 kills the kernel's children and ends the kernel with
// status 0.
//
// The file is self-contained (passed with -e) and everything lives inside one
// function so that no name of the kernel's collides with the user's globals.
'use strict';

(function corralKernel() {
  // The globals the kernel uses, taken before a cell can shadow them: a cell's
  // top-level `let process` is visible to every script of the context.
  const {
    process, require, Buffer, JSON, Object, Array, Promise, Atomics, SharedArrayBuffer,
    Int32Array, Uint8Array, ArrayBuffer, Error, SyntaxError, TypeError, Map, Set, String,
    Number, Math, setImmediate, setTimeout, performance,
  } = globalThis;
  const global = globalThis;
  const fs = require('fs');
  const net = require('net');
  const path = require('path');
  const util = require('util');
  const vm = require('vm');
  const { Writable } = require('stream');
  const { StringDecoder } = require('string_decoder');
  const { Worker } = require('worker_threads');
  const { pathToFileURL } = require('url');
  const Module = require('module');

  const LANGUAGE = process.argv[1] === 'typescript' ? 'typescript' : 'javascript';
  const SOCK_FD = 3;
  const PIPE_FDS = [4, 5];               // read ends of the pipes behind fds 1, 2
  const PENDING_MAX = 8 << 20;            // characters queued for the sender at most
  const IDLE_MAX = 1 << 20;               // idle output kept for the next execution
  const ALLOWED_MIME = new Set([
    'text/plain', 'text/html', 'text/markdown', 'text/latex', 'image/png', 'image/jpeg',
    'image/svg+xml', 'application/json', 'application/pdf', 'application/javascript',
  ]);
  const BINARY_MIME = new Set(['image/png', 'image/jpeg', 'application/pdf']);

  // From here on SIGINT never ends the kernel (see "Interrupts").
  const sigintWatchdog = startSigintWatchdog();

  const acorn = require('/usr/share/nodejs/acorn');
  // Loaded before `ready`: the first TypeScript cell must not pay for it.
  const ts = LANGUAGE === 'typescript' ? require('/usr/share/nodejs/typescript') : null;

  // ---------------------------------------------------------------------------
  // JSON the daemon accepts: ASCII only, no NUL, no lone surrogates, integers
  // within 64 bits.

  const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

  function cleanString(s) {
    return s.replace(LONE_SURROGATE, '\ufffd').replace(/\0/g, '\ufffd');
  }

  const BIG = '\ufdd0corral-big:';  // marks a number JSON would write as a huge integer

  function replacer(key, value) {
    if (typeof value === 'string') return cleanString(value);
    if (typeof value === 'number' && Number.isInteger(value) && Math.abs(value) >= 2 ** 63) {
      return BIG + value.toExponential();
    }
    if (typeof value === 'bigint') {
      const n = Number(value);
      return Math.abs(n) >= 2 ** 63 ? BIG + n.toExponential() : n;
    }
    return value;
  }

  function asciiJson(value) {
    return JSON.stringify(value, replacer)
      .replace(/"\ufdd0corral-big:([^"]*)"/g, '$1')
      .replace(/[\u0080-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  }

  // ---------------------------------------------------------------------------
  // The sender thread.  It is the only writer of fd 3 and the only reader of
  // fds 4 and 5.  Messages from the main thread, in order:
  //   {t:'out', id, name, text, ts}  text written by the cell (console, process.stdout)
  //   {t:'frame', body}              a complete non-stream frame (JSON text)
  //   {t:'begin', id} / {t:'end'}    what descriptor-level output belongs to
  //   {t:'drain', id}                read fds 4 and 5 dry now (a child ended)
  // shared[0] counts the characters the main thread has queued and not yet sent;
  // shared[1] is 1 while a 'sigint' message to the main thread is unanswered;
  // shared[2] is 1 while JavaScript the main thread runs may be terminated: the
  // user's after an await or in a callback, not the kernel's own.

  function senderMain() {
    const fs = require('fs');
    const net = require('net');
    const { parentPort, workerData } = require('worker_threads');
    const { StringDecoder } = require('string_decoder');
    const shared = new Int32Array(workerData.shared);
    const sleeper = new Int32Array(new SharedArrayBuffer(4));
    const ITEM_MAX = 1 << 20;   // characters of text in one stream frame
    const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

    let current = 0;            // execution that descriptor-level output belongs to
    let pending = [];           // [{id, name, text, ts, chars}] not yet sent
    let timer = null;
    let immediate = null;

    // fd 3 is non-blocking (the main thread reads it through libuv): a full
    // socket is waited out with short sleeps, growing while it stays full.
    function writeAll(buf) {
      let off = 0;
      let pause = 0.05;
      while (off < buf.length) {
        try {
          off += fs.writeSync(3, buf, off, buf.length - off);
          pause = 0.05;
        } catch (e) {
          if (e.code === 'EAGAIN') {
            Atomics.wait(sleeper, 0, 0, pause);
            pause = Math.min(pause * 2, 5);
          } else if (e.code !== 'EINTR') {
            process.exit(0);  // the daemon went away: ends this thread, then the kernel
          }
        }
      }
    }

    function writeFrame(body) {
      const payload = Buffer.from(body, 'latin1');  // bodies are ASCII
      const head = Buffer.alloc(4);
      head.writeUInt32BE(payload.length);
      writeAll(Buffer.concat([head, payload]));
    }

    function jsonText(s) {
      return JSON.stringify(s.replace(LONE, '\ufffd').replace(/\0/g, '\ufffd'))
        .replace(/[\u0080-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
    }

    // seconds as a JSON real (shortest form, always with a fraction)
    function timestamp(ts) {
      const text = String(Math.round(ts * 1e6) / 1e6);
      return /[.e]/.test(text) ? text : text + '.0';
    }

    function flush() {
      if (timer) { clearTimeout(timer); timer = null; }
      if (immediate) { clearImmediate(immediate); immediate = null; }
      const items = pending;
      pending = [];
      for (const item of items) {
        let text = item.text;
        while (text) {
          let cut = Math.min(text.length, ITEM_MAX);
          if (cut < text.length && /[\ud800-\udbff]/.test(text[cut - 1])) cut -= 1;
          writeFrame('{"type":"stream","id":' + item.id + ',"name":"' + item.name +
                     '","text":' + jsonText(text.slice(0, cut)) +
                     ',"timestamp":' + timestamp(item.ts) + '}');
          text = text.slice(cut);
        }
        if (item.chars) {
          Atomics.sub(shared, 0, item.chars);
          Atomics.notify(shared, 0);
        }
      }
    }

    function queue(id, name, text, ts, chars) {
      if (!text) return;
      const last = pending[pending.length - 1];
      if (last && last.id === id && last.name === name) {
        last.text += text;
        last.chars += chars;
      } else {
        pending.push({ id, name, text, ts, chars });
      }
      if (text.includes('\n')) {
        // at once, but after the messages already queued: they join this frame
        if (!immediate) immediate = setImmediate(flush);
      } else if (!timer) {
        timer = setTimeout(flush, 40);
      }
    }

    const decoders = new Map();
    const streamName = (fd) => (fd === 4 ? 'stdout' : 'stderr');

    function fromPipe(fd, bytes, id) {
      const text = decoders.get(fd).write(bytes);
      if (id) queue(id, streamName(fd), text, Date.now() / 1000, 0);
    }

    function drain(id) {
      const buf = Buffer.allocUnsafe(65536);
      for (const fd of decoders.keys()) {
        for (;;) {
          let n = 0;
          try {
            n = fs.readSync(fd, buf, 0, buf.length, null);
          } catch (e) {
            break;  // EAGAIN: empty
          }
          if (n <= 0) break;
          fromPipe(fd, buf.subarray(0, n), id);
        }
      }
    }

    for (const fd of workerData.pipes) {
      try {
        if (!fs.fstatSync(fd).isFIFO()) continue;
      } catch (e) {
        continue;
      }
      decoders.set(fd, new StringDecoder('utf8'));
      const sock = new net.Socket({ fd, readable: true, writable: false });
      sock.on('data', (bytes) => fromPipe(fd, bytes, current));
      sock.on('error', () => {});
    }

    // SIGINT while the main thread runs no vm script: Node's SIGINT watchdog
    // (started by the main thread for good) notes it; the main thread is told,
    // and if it does not answer within 250 ms it is busy in JavaScript, which
    // the inspector terminates (the cell's promise is then abandoned).
    if (workerData.watchdog) {
      const contextify = process.binding('contextify');
      setInterval(() => {
        if (Atomics.load(shared, 1) !== 0 || !contextify.watchdogHasPendingSigint()) return;
        Atomics.store(shared, 1, 1);
        parentPort.postMessage('sigint');
        if (Atomics.wait(shared, 1, 1, 250) === 'timed-out' && Atomics.load(shared, 2) === 1) {
          terminateMain();
        }
      }, 50).unref();
    }

    function terminateMain() {
      try {
        const inspector = require('inspector');
        const session = new inspector.Session();
        session.connectToMainThread();
        session.post('Runtime.terminateExecution', () => session.disconnect());
      } catch (e) {
        // no inspector: the daemon kills the kernel 3 s after the interrupt
      }
    }

    parentPort.on('message', (m) => {
      switch (m.t) {
        case 'out': queue(m.id, m.name, m.text, m.ts, m.text.length); break;
        case 'frame': flush(); writeFrame(m.body); break;
        case 'begin': current = m.id; break;
        case 'end': current = 0; break;
        case 'drain': drain(m.id); break;
      }
    });
    parentPort.postMessage('ready');
  }

  const sharedBuf = new SharedArrayBuffer(12);
  const shared = new Int32Array(sharedBuf);
  const sender = new Worker('(' + senderMain.toString() + ')()', {
    eval: true,
    workerData: { shared: sharedBuf, pipes: PIPE_FDS, watchdog: Boolean(sigintWatchdog) },
    stdout: false,
    stderr: false,
  });

  // The daemon refuses a frame above 32 MiB (and ends the kernel): a result
  // or an error that large is sent cut, as kernel.py does.
  const MAX_FRAME = 32 * 1024 * 1024 - 4096;
  const CUT_NOTE = '\n[corral: output too large for one frame, truncated]';

  function shrunk(obj) {
    const limit = 1 << 20;
    if (obj.type === 'result') {
      const text = typeof obj.data?.['text/plain'] === 'string' ? obj.data['text/plain'] : '';
      return { type: 'result', id: obj.id, is_main: Boolean(obj.is_main),
        data: { 'text/plain': text.slice(0, limit) + CUT_NOTE } };
    }
    const out = { ...obj };
    for (const key of ['value', 'traceback']) {
      if (typeof out[key] === 'string' && out[key].length > limit) out[key] = out[key].slice(0, limit) + CUT_NOTE;
    }
    return out;
  }

  function sendFrame(obj) {
    let body = asciiJson(obj);
    if (body.length > MAX_FRAME) body = asciiJson(shrunk(obj));
    sender.postMessage({ t: 'frame', body });
  }

  function now() {
    return (performance.timeOrigin + performance.now()) / 1000;
  }

  // Whether the sender may terminate what the main thread runs (shared[2]).
  function terminable(yes) {
    Atomics.store(shared, 2, yes ? 1 : 0);
  }
  terminable(true);

  // ---------------------------------------------------------------------------
  // Output of the user's code.

  let current = null;      // the execution under way: {id, interrupt()}
  let idleOutput = [];     // [name, text] written while idle, for the next execution
  let idleChars = 0;

  function emitText(name, text) {
    if (!text) return;
    if (!current) {
      if (idleChars + text.length <= IDLE_MAX) {
        idleOutput.push([name, text]);
        idleChars += text.length;
      }
      return;
    }
    // Bounded hand-over: wait while the sender has too much to write.
    for (;;) {
      const queued = Atomics.load(shared, 0);
      if (queued < PENDING_MAX) break;
      Atomics.wait(shared, 0, queued, 1000);
    }
    Atomics.add(shared, 0, text.length);
    sender.postMessage({ t: 'out', id: current.id, name, text, ts: now() });
  }

  // A stdout/stderr replacement: synchronous, text only, never a TTY.
  function makeStdio(name, fd) {
    const decoder = new StringDecoder('utf8');
    const stream = new Writable();
    stream.write = function write(chunk, encoding, cb) {
      if (typeof encoding === 'function') { cb = encoding; encoding = undefined; }
      let text;
      if (typeof chunk === 'string') {
        text = encoding && encoding !== 'utf8' && encoding !== 'utf-8'
          ? decoder.write(Buffer.from(chunk, encoding)) : chunk;
      } else {
        text = decoder.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      }
      emitText(name, text);
      if (typeof cb === 'function') process.nextTick(cb);
      return true;
    };
    stream._write = (chunk, encoding, cb) => {  // what end(chunk) writes
      stream.write(chunk, encoding);
      cb();
    };
    stream.fd = fd;
    stream.isTTY = false;
    stream.getColorDepth = () => 1;
    stream.hasColors = () => false;
    stream._isStdio = true;
    stream.destroySoon = stream.destroy;
    stream._destroy = (err, cb) => cb(err);
    return stream;
  }

  function installStdio() {
    const stdout = makeStdio('stdout', 1);
    const stderr = makeStdio('stderr', 2);
    Object.defineProperty(process, 'stdout', { configurable: true, enumerable: true, get: () => stdout });
    Object.defineProperty(process, 'stderr', { configurable: true, enumerable: true, get: () => stderr });
    const cons = new console.Console({ stdout, stderr, colorMode: false });
    Object.defineProperty(global, 'console', {
      configurable: true, enumerable: false, writable: true, value: cons,
    });
  }

  // Descriptor-level output of a child run synchronously goes before what the
  // parent writes next: the sender reads the pipes dry when the child is done.
  function drainPipes() {
    if (current) sender.postMessage({ t: 'drain', id: current.id });
  }

  // ---------------------------------------------------------------------------
  // Interrupting a synchronous child process (execSync, execFileSync,
  // spawnSync).  While the main thread waits for one, no JavaScript runs
  // there: neither vm nor the inspector can stop it.  A watcher thread is
  // armed for the length of the call: it runs a vm script with breakOnSigint
  // that only waits, and as the latest such script it is the one Node's
  // watchdog tells of a SIGINT (the watchdog stops at the most recent one).
  // It then sends SIGINT to the processes the call started (SIGKILL at the
  // next interrupt), and the call throws Interrupted once its child is gone.
  // ctl: [0] armed, [1] the watcher is in its script, [2] interrupts during
  // the call; since[0]: when the call began, in clock ticks since boot.

  function watcherMain() {
    const fs = require('fs');
    const vm = require('vm');
    const { workerData } = require('worker_threads');
    const ctl = new Int32Array(workerData.ctl);
    const since = new Float64Array(workerData.since);
    globalThis.ctl = ctl;
    const armed = new vm.Script('Atomics.store(ctl, 1, 1); Atomics.notify(ctl, 1); Atomics.wait(ctl, 0, 1);');

    // the kernel's children started since the call began, and their descendants
    function startedSince() {
      const children = new Map();
      const started = new Map();
      for (const entry of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(entry)) continue;
        let stat;
        try { stat = fs.readFileSync('/proc/' + entry + '/stat', 'latin1'); } catch (e) { continue; }
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        const ppid = Number(fields[1]);
        if (!children.has(ppid)) children.set(ppid, []);
        children.get(ppid).push(Number(entry));
        started.set(Number(entry), Number(fields[19]));
      }
      const found = [];
      const stack = (children.get(process.pid) || []).filter((pid) => started.get(pid) >= since[0]);
      while (stack.length) {
        const pid = stack.pop();
        found.push(pid);
        stack.push(...(children.get(pid) || []));
      }
      return found;
    }

    for (;;) {
      Atomics.wait(ctl, 0, 0);  // until armed
      try {
        armed.runInThisContext({ breakOnSigint: true });
      } catch (e) {
        const signal = Atomics.add(ctl, 2, 1) === 0 ? 'SIGINT' : 'SIGKILL';
        for (const pid of startedSince()) {
          try { process.kill(pid, signal); } catch (err) { /* gone */ }
        }
      }
      Atomics.store(ctl, 1, 0);
    }
  }

  const watcherCtl = new Int32Array(new SharedArrayBuffer(12));
  const watcherSince = new Float64Array(new SharedArrayBuffer(8));
  let watcher = null;
  let watcherGone = false;  // it could not start, or ended: calls go unwatched

  function clockTicks() {
    try {
      return Math.floor(parseFloat(fs.readFileSync('/proc/uptime', 'latin1')) * 100) - 1;
    } catch (e) {
      return 0;
    }
  }

  function armWatcher() {
    if (!sigintWatchdog || watcherGone) return;
    if (!watcher) {
      watcher = new Worker('(' + watcherMain.toString() + ')()', {
        eval: true,
        workerData: { ctl: watcherCtl.buffer, since: watcherSince.buffer },
        stdout: false,
        stderr: false,
      });
      watcher.unref();
      watcher.on('error', () => { watcherGone = true; });
      watcher.on('exit', () => { watcherGone = true; });
    }
    Atomics.store(watcherCtl, 2, 0);
    watcherSince[0] = clockTicks();
    Atomics.store(watcherCtl, 0, 1);
    Atomics.notify(watcherCtl, 0);
    Atomics.wait(watcherCtl, 1, 0, 2000);  // in its script (a first call waits for it to start)
  }

  function disarmWatcher() {
    Atomics.store(watcherCtl, 0, 0);
    Atomics.notify(watcherCtl, 0);
  }

  function wrapChildProcess() {
    const cp = require('child_process');
    for (const fname of ['execSync', 'execFileSync', 'spawnSync']) {
      const orig = cp[fname];
      cp[fname] = function (...args) {
        let result;
        let failure = null;
        armWatcher();
        try {
          result = orig.apply(this, args);
        } catch (e) {
          failure = { e };
        } finally {
          disarmWatcher();
          drainPipes();
        }
        if (Atomics.load(watcherCtl, 2) > 0) throw new Interrupted();
        if (failure) throw failure.e;
        return result;
      };
    }
  }

  // ---------------------------------------------------------------------------
  // Rich display, a global of the cells.  Each call sends a result frame
  // (is_main false) of the execution under way; outside any it does nothing.
  //   display(value)             text/plain as util.inspect shows it; a Buffer
  //                              or Uint8Array holding a PNG or JPEG is that image
  //   display(bundle)            a MIME bundle: {'text/html': ..., 'text/plain': ...}
  //                              (types of docs/kernel-protocol.md; others throw)
  //   display.html(s), .markdown(s), .latex(s), .svg(s), .javascript(s), .text(s)
  //   display.png(data), .jpeg(data), .pdf(data)
  //                              data: Buffer, Uint8Array, ArrayBuffer or base64
  //                              (a data: URL prefix is allowed)
  //   display.json(value)        application/json (the value as JSON makes it)
  // text/plain is added when a bundle has none.

  function toBase64(data, mime) {
    if (typeof data === 'string') {
      const s = data.replace(/^data:[^,]*;base64,/, '').replace(/\s+/g, '');
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) {
        throw new TypeError(mime + ' data must be a Buffer, a Uint8Array or a base64 string');
      }
      return s;
    }
    if (ArrayBuffer.isView(data)) {
      return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64');
    }
    if (data instanceof ArrayBuffer) return Buffer.from(data).toString('base64');
    throw new TypeError(mime + ' data must be a Buffer, a Uint8Array or a base64 string');
  }

  function jsonValue(value) {
    const text = JSON.stringify(value);
    return text === undefined ? null : JSON.parse(text);
  }

  function inspect(value) {
    return util.inspect(value, { colors: false, showProxy: true });
  }

  // A bundle as the protocol wants it: known MIME types, binary ones in base64,
  // application/json a JSON value, the others strings, text/plain always.
  function normalizeBundle(bundle) {
    const data = {};
    for (const [mime, value] of Object.entries(bundle)) {
      if (!ALLOWED_MIME.has(mime)) throw new TypeError('display: unsupported MIME type ' + mime);
      if (value === undefined || value === null) continue;
      if (BINARY_MIME.has(mime)) data[mime] = toBase64(value, mime);
      else if (mime === 'application/json') data[mime] = jsonValue(value);
      else data[mime] = typeof value === 'string' ? value : String(value);
    }
    if (!('text/plain' in data)) {
      const kinds = Object.keys(data).join(', ');
      data['text/plain'] = kinds ? '<' + kinds + '>' : '';
    }
    return data;
  }

  function isBundle(value) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return false;
    const keys = Object.keys(value);
    return keys.length > 0 && keys.every((k) => /^[a-z]+\/[-+.\w]+$/.test(k));
  }

  const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47]);
  const JPEG_MAGIC = Buffer.from([0xff, 0xd8, 0xff]);

  function bundleOf(value) {
    if (isBundle(value)) return normalizeBundle(value);
    if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
      const bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
      if (bytes.subarray(0, 4).equals(PNG_MAGIC)) return normalizeBundle({ 'image/png': bytes, 'text/plain': '<image/png>' });
      if (bytes.subarray(0, 3).equals(JPEG_MAGIC)) return normalizeBundle({ 'image/jpeg': bytes, 'text/plain': '<image/jpeg>' });
    }
    return { 'text/plain': inspect(value) };
  }

  function sendResult(data, isMain) {
    if (!current) return;  // nothing to attach it to
    sendFrame({ type: 'result', id: current.id, is_main: isMain, data });
  }

  function display(value) {
    sendResult(bundleOf(value), false);
  }
  const one = (mime) => (value) => sendResult(normalizeBundle({ [mime]: value }), false);
  display.html = one('text/html');
  display.markdown = one('text/markdown');
  display.latex = one('text/latex');
  display.svg = one('image/svg+xml');
  display.javascript = one('application/javascript');
  display.png = one('image/png');
  display.jpeg = one('image/jpeg');
  display.pdf = one('application/pdf');
  display.json = (value) => sendResult(normalizeBundle({
    'application/json': value, 'text/plain': JSON.stringify(value, null, 2) ?? 'undefined',
  }), false);
  display.text = (value) => sendResult({ 'text/plain': typeof value === 'string' ? value : inspect(value) }, false);

  // ---------------------------------------------------------------------------
  // Modules: require() from the context's working directory, then the usual
  // global folders (~/.node_modules, ...) and Debian's module folders.

  function setupModulePaths() {
    const extra = ['/usr/local/lib/node_modules', '/usr/share/nodejs', '/usr/lib/nodejs'];
    const multiarch = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' }[process.arch];
    if (multiarch) extra.push('/usr/lib/' + multiarch + '/nodejs');
    const saved = process.env.NODE_PATH;
    process.env.NODE_PATH = [saved, ...extra].filter(Boolean).join(path.delimiter);
    Module._initPaths();
    if (saved === undefined) delete process.env.NODE_PATH;
    else process.env.NODE_PATH = saved;
  }

  let requireCwd = null;
  let cellRequire = null;

  // The require of the cells, made again when the working directory changed.
  function userRequire() {
    const cwd = process.cwd();
    if (cwd !== requireCwd) {
      requireCwd = cwd;
      cellRequire = Module.createRequire(path.join(cwd, '[cell]'));
    }
    return cellRequire;
  }

  // import() of the cells: node builtins; relative paths from the working
  // directory; bare names with Node's own ESM resolution (conditions, ESM-only
  // packages; node_modules up from the kernel's start directory), and where
  // that finds nothing, with require()'s resolution (which also searches the
  // global and Debian folders) and the file it finds.
  async function userImport(specifier) {
    specifier = String(specifier);
    const builtin = Module.isBuiltin ? Module.isBuiltin(specifier)
      : Module.builtinModules.includes(specifier.replace(/^node:/, ''));
    if (builtin) return import(specifier.startsWith('node:') ? specifier : 'node:' + specifier);
    if (/^\.{0,2}\//.test(specifier)) {
      return import(pathToFileURL(path.resolve(process.cwd(), specifier)).href);
    }
    try {
      return await import(specifier);
    } catch (err) {
      if (err.code !== 'ERR_MODULE_NOT_FOUND' || /^[a-z][a-z0-9+.-]*:/i.test(specifier)) throw err;
      let resolved;
      try {
        resolved = userRequire().resolve(specifier);
      } catch (e) {
        throw err;
      }
      return import(pathToFileURL(resolved).href);
    }
  }

  function defineGlobal(name, value) {
    Object.defineProperty(global, name, { configurable: true, enumerable: false, writable: true, value });
  }

  // ---------------------------------------------------------------------------
  // Turning a cell into a script.

  const PARSE_OPTIONS = {
    ecmaVersion: 'latest',
    sourceType: 'script',
    allowAwaitOutsideFunction: true,
    allowImportExportEverywhere: true,
    allowHashBang: true,
  };

  const declaredLexicals = new Set();  // script-scope `let`s the kernel has declared

  function isFunctionNode(node) {
    return node.type === 'FunctionDeclaration' || node.type === 'FunctionExpression' ||
      node.type === 'ArrowFunctionExpression';
  }

  // Calls visit(node, insideFunction) on every node of the tree.
  function walk(node, visit, insideFunction = false) {
    if (!node || typeof node.type !== 'string') return;
    visit(node, insideFunction);
    const inner = insideFunction || isFunctionNode(node);
    for (const key of Object.keys(node)) {
      const child = node[key];
      if (Array.isArray(child)) {
        for (const c of child) if (c && typeof c === 'object') walk(c, visit, inner);
      } else if (child && typeof child === 'object' && key !== 'loc') {
        walk(child, visit, inner);
      }
    }
  }

  function patternNames(pattern, out) {
    if (!pattern) return out;
    switch (pattern.type) {
      case 'Identifier': out.push(pattern.name); break;
      case 'ObjectPattern':
        for (const p of pattern.properties) patternNames(p.type === 'RestElement' ? p.argument : p.value, out);
        break;
      case 'ArrayPattern': for (const e of pattern.elements) patternNames(e, out); break;
      case 'RestElement': patternNames(pattern.argument, out); break;
      case 'AssignmentPattern': patternNames(pattern.left, out); break;
    }
    return out;
  }

  function patternNamesOf(declaration) {
    const names = [];
    for (const d of declaration.declarations) patternNames(d.id, names);
    return names;
  }

  // A name the script may declare with `let`: not declared by an earlier cell,
  // and not a var/function of an earlier cell (a non-configurable global).
  function mayDeclareLexical(name) {
    if (declaredLexicals.has(name)) return false;
    const desc = Object.getOwnPropertyDescriptor(global, name);
    return !(desc && !desc.configurable);
  }

  // `import ... from 'x'` as an assignment from `await __corral.import('x')`.
  function importAssignment(node, lexicals) {
    const source = JSON.stringify(node.source.value);
    const load = 'await __corral.import(' + source + ')';
    const ns = node.specifiers.find((s) => s.type === 'ImportNamespaceSpecifier');
    const parts = [];
    for (const s of node.specifiers) lexicals.push(s.local.name);
    if (ns) {
      parts.push(ns.local.name + ' = ' + load);
      for (const s of node.specifiers) {
        if (s.type === 'ImportDefaultSpecifier') parts.push(s.local.name + ' = ' + ns.local.name + '.default');
      }
    } else if (node.specifiers.length) {
      const props = node.specifiers.map((s) => {
        const imported = s.type === 'ImportDefaultSpecifier' ? 'default'
          : (s.imported.type === 'Literal' ? JSON.stringify(s.imported.value) : s.imported.name);
        return imported + ': ' + s.local.name;
      });
      parts.push('{' + props.join(', ') + '} = ' + load);
    } else {
      return load + ';';
    }
    return 'void (' + parts.join(', ') + ');';
  }

  // Rewrites a parsed cell (line numbers are kept); returns {source, isAsync,
  // lexicals: the names its script declares with `let`}.
  function rewrite(code, ast) {
    const edits = [];
    const replace = (start, end, text) => edits.push({ start, end, text });
    const lexicals = [];   // names to declare with `let` before the cell
    const vars = [];       // async cells: names to declare with `var` before the cell
    const functions = [];  // async cells: function declarations to publish
    let isAsync = false;

    walk(ast, (node, insideFunction) => {
      if (node.type === 'ImportExpression') replace(node.start, node.start + 6, '__corral.import');
      if (insideFunction) return;
      if (node.type === 'AwaitExpression' || (node.type === 'ForOfStatement' && node.await)) isAsync = true;
      if (node.type === 'ImportDeclaration') isAsync = true;
    });

    // a declaration statement as a `void (assignments)` statement
    function declarationAsAssignment(decl, names, fillUndefined) {
      const first = decl.declarations[0];
      const last = decl.declarations[decl.declarations.length - 1];
      replace(decl.start, first.start, 'void (');
      for (const d of decl.declarations) {
        patternNames(d.id, names);
        if (!d.init && fillUndefined) replace(d.id.end, d.id.end, ' = undefined');
      }
      replace(last.end, last.end, ')');
    }

    const body = ast.body;
    for (let i = 0; i < body.length; i++) {
      let node = body[i];
      if (node.type === 'ExportNamedDeclaration' || node.type === 'ExportDefaultDeclaration') {
        // a cell is no module: `export` is dropped, its declaration kept
        if (node.declaration) {
          replace(node.start, node.declaration.start, '');
          node = node.declaration;
        } else {
          replace(node.start, node.end, ';');
          continue;
        }
      } else if (node.type === 'ExportAllDeclaration') {
        replace(node.start, node.end, ';');
        continue;
      }
      if (node.type === 'ImportDeclaration') {
        const newlines = code.slice(node.start, node.end).split('\n').length - 1;
        replace(node.start, node.end, importAssignment(node, lexicals) + '\n'.repeat(newlines));
      } else if (node.type === 'VariableDeclaration' && node.kind !== 'var') {
        declarationAsAssignment(node, lexicals, true);
      } else if (node.type === 'VariableDeclaration' &&
                 (isAsync || patternNamesOf(node).some((n) => declaredLexicals.has(n)))) {
        // a var that must live outside the async function, or that names a
        // `let` of an earlier cell (which a `var` may not redeclare)
        declarationAsAssignment(node, vars, false);
      } else if (node.type === 'ClassDeclaration' && node.id) {
        lexicals.push(node.id.name);
        replace(node.start, node.start, 'void (' + node.id.name + ' = ');
        replace(node.end, node.end, ')');
      } else if (node.type === 'FunctionDeclaration' && isAsync && node.id) {
        functions.push(node.id.name);
      }
    }

    const newLexicals = [...new Set(lexicals)].filter(mayDeclareLexical);
    let prefix = newLexicals.length ? 'let ' + newLexicals.join(', ') + '; ' : '';
    let suffix = '';
    if (isAsync) {
      const hoisted = [...new Set([...vars, ...functions])].filter((n) => !declaredLexicals.has(n));
      if (hoisted.length) prefix += 'var ' + hoisted.join(', ') + '; ';
      prefix += '(async () => { ';
      for (const f of new Set(functions)) prefix += '__corral.global[' + JSON.stringify(f) + '] = ' + f + '; ';
      const last = body[body.length - 1];
      if (last && last.type === 'ExpressionStatement') {
        replace(last.start, last.start, 'return { value: (');
        replace(last.expression.end, last.expression.end, ') }');
      }
      suffix = '\n})()';
    }
    edits.sort((a, b) => a.start - b.start || a.end - b.end);
    // anchors: [offset in the script, offset in the code] where copied code starts
    let out = prefix;
    let pos = 0;
    const anchors = [];
    for (const e of edits) {
      anchors.push([out.length, pos]);
      out += code.slice(pos, e.start) + e.text;
      pos = e.end;
    }
    anchors.push([out.length, pos]);
    out += code.slice(pos) + suffix;
    return { source: out, isAsync, lexicals: newLexicals, anchors, code };
  }

  class CellSyntaxError extends SyntaxError {}

  // A SyntaxError found before V8 saw the cell, shown as V8 shows its own:
  // where (file:line), the line, a caret, then the message.
  function cellSyntaxError(filename, code, line, column, message, more = []) {
    const err = new CellSyntaxError(message);
    const text = code.split('\n')[line - 1];
    const where = text === undefined ? '' :
      filename + ':' + line + '\n' + text + '\n' + ' '.repeat(column) + '^\n\n';
    err.stack = where + ['SyntaxError: ' + message, ...more.map((m) => 'SyntaxError: ' + m)].join('\n');
    return err;
  }

  // TypeScript to JavaScript, types removed; syntax errors become SyntaxErrors.
  function transpile(code, filename) {
    const result = ts.transpileModule(code, {
      fileName: 'cell.ts',
      reportDiagnostics: true,
      compilerOptions: {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        isolatedModules: true,
        preserveValueImports: true,
        experimentalDecorators: true,
        esModuleInterop: true,
        sourceMap: true,
        inlineSources: false,
      },
    });
    const errors = (result.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (!errors.length) {
      let lines = null;
      try { lines = decodeMappings(JSON.parse(result.sourceMapText).mappings); } catch (e) { /* unmapped */ }
      return { js: result.outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n'), lines };
    }
    const where = (d) => (d.file && d.start !== undefined
      ? d.file.getLineAndCharacterOfPosition(d.start) : { line: 0, character: 0 });
    const describe = (d) => {
      const { line, character } = where(d);
      return ts.flattenDiagnosticMessageText(d.messageText, '\n') + ' (' + (line + 1) + ':' + (character + 1) + ')';
    };
    const { line, character } = where(errors[0]);
    throw cellSyntaxError(filename, code, line + 1, character,
      describe(errors[0]), errors.slice(1).map(describe));
  }

  // Node's REPL reads `{ a: 1 }` as an object literal, not a block.
  function maybeObjectLiteral(code) {
    if (!/^\s*\{/.test(code) || /;\s*$/.test(code)) return code;
    const wrapped = '(' + code + '\n)';
    try {
      acorn.parse(ts ? transpile(wrapped, '').js : wrapped, PARSE_OPTIONS);
      return wrapped;
    } catch (e) {
      return code;
    }
  }

  // The cell as a script: {source, isAsync, lexicals}.
  function prepare(code, filename) {
    if (code.startsWith('#!')) code = '//' + code.slice(2);  // a script's first line
    code = maybeObjectLiteral(code);
    const compiled = ts ? transpile(code, filename) : { js: code, lines: null };
    const js = compiled.js;
    let ast;
    try {
      ast = acorn.parse(js, PARSE_OPTIONS);
    } catch (parseError) {
      // V8's message (and its caret) for what V8 rejects too; what only acorn
      // rejects (syntax newer than it) runs as it is.
      try {
        new vm.Script(js, { filename });
      } catch (v8Error) {
        if (/\bawait\b/.test(v8Error.message) && !/\bawait\b/.test(parseError.message)) {
          const loc = parseError.loc || { line: 1, column: 0 };
          throw cellSyntaxError(filename, js, loc.line, loc.column, parseError.message);
        }
        throw v8Error;
      }
      return { source: js, isAsync: false, lexicals: [], anchors: [[0, 0]], code: js, lines: compiled.lines };
    }
    return { ...rewrite(js, ast), lines: compiled.lines };
  }

  // ---------------------------------------------------------------------------
  // Positions in stack traces: they are in the script the kernel made of the
  // cell, and are mapped back to the cell: through the rewrite's anchors, then
  // for TypeScript through the transpiler's source map.

  const cellPositions = new Map();  // filename -> {script, code, anchors, lines}
  const POSITIONS_MAX = 200;

  function rememberPositions(filename, cell) {
    if (cellPositions.size >= POSITIONS_MAX) cellPositions.delete(cellPositions.keys().next().value);
    cellPositions.set(filename, { script: cell.source, code: cell.code, anchors: cell.anchors, lines: cell.lines });
  }

  function lineStarts(text) {
    const starts = [0];
    for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) starts.push(i + 1);
    return starts;
  }

  // (1-based line, column) in the script -> (1-based line, column) in the code
  function scriptToCode(pos, line, column) {
    const scriptStarts = pos.scriptStarts || (pos.scriptStarts = lineStarts(pos.script));
    const codeStarts = pos.codeStarts || (pos.codeStarts = lineStarts(pos.code));
    const offset = (scriptStarts[line - 1] ?? 0) + column - 1;
    let anchor = pos.anchors[0];
    for (const a of pos.anchors) if (a[0] <= offset) anchor = a;
    const inCode = anchor[1] + Math.max(0, offset - anchor[0]);
    let l = 0;
    while (l + 1 < codeStarts.length && codeStarts[l + 1] <= inCode) l += 1;
    return [l + 1, inCode - codeStarts[l] + 1];
  }

  const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

  // A source map's mappings as, per generated line, [column, source line,
  // source column] segments (0-based).
  function decodeMappings(mappings) {
    const lines = [];
    let srcLine = 0;
    let srcCol = 0;
    for (const lineText of mappings.split(';')) {
      const segments = [];
      let genCol = 0;
      for (const seg of lineText.split(',')) {
        if (!seg) continue;
        const fields = [];
        let value = 0;
        let shift = 0;
        for (const ch of seg) {
          const digit = BASE64.indexOf(ch);
          value += (digit & 31) << shift;
          if (digit & 32) {
            shift += 5;
          } else {
            fields.push(value & 1 ? -(value >>> 1) : value >>> 1);
            value = 0;
            shift = 0;
          }
        }
        genCol += fields[0];
        if (fields.length >= 4) {
          srcLine += fields[2];
          srcCol += fields[3];
          segments.push([genCol, srcLine, srcCol]);
        }
      }
      lines.push(segments);
    }
    return lines;
  }

  // cellN:line:column in a stack, as positions in the cell the user wrote.
  function mapPositions(stack) {
    return stack.replace(/\b(cell\d+):(\d+):(\d+)\b/g, (all, filename, l, c) => {
      const pos = cellPositions.get(filename);
      if (!pos) return all;
      let [line, column] = scriptToCode(pos, Number(l), Number(c));
      if (pos.lines) {
        const segments = pos.lines[line - 1];
        if (segments && segments.length) {
          let seg = segments[0];
          for (const s of segments) if (s[0] <= column - 1) seg = s;
          line = seg[1] + 1;
          column = seg[2] + 1 + Math.max(0, column - 1 - seg[0]);
        }
      }
      return filename + ':' + line + ':' + column;
    });
  }

  // ---------------------------------------------------------------------------
  // Errors.

  const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

  class Interrupted extends Error {
    constructor() {
      super('Script execution was interrupted by SIGINT');
      this.name = 'Interrupted';
    }
  }

  // The stack with the cell's positions, without the frames that called the
  // cell (those after its last frame: the kernel's, Node's) and without any
  // frame of the kernel's. A syntax error of the cell has no frame of its
  // own: every frame is the kernel's that compiled it.
  function cleanStack(stack) {
    const lines = mapPositions(String(stack).replace(ANSI, '')).split('\n');
    let last = -1;
    lines.forEach((line, i) => { if (/^\s+at .*\bcell\d+:\d+/.test(line)) last = i; });
    const compiled = last < 0 && lines.some((line) => /^SyntaxError\b/.test(line));
    return lines
      .filter((line, i) => !((compiled || (last >= 0 && i > last)) && /^\s+at /.test(line)))
      .filter((line) => !/^\s+at .*(\[eval\]|node:vm|\[worker eval\]|corralKernel|evalmachine)/.test(line))
      .join('\n').replace(/\n+$/, '');
  }

  function errorFrame(err) {
    if (err instanceof Interrupted || (err && err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')) {
      return { name: 'Interrupted', value: 'Script execution was interrupted by SIGINT',
        traceback: 'Interrupted: Script execution was interrupted by SIGINT' };
    }
    if (err instanceof CellSyntaxError) {
      return { name: 'SyntaxError', value: err.message, traceback: cleanStack(err.stack) };
    }
    if (util.types.isNativeError(err) || err instanceof Error) {
      let name = 'Error';
      let message = '';
      let stack = '';
      try { name = String(err.name); } catch (e) { /* a hostile getter */ }
      try { message = String(err.message); } catch (e) { /* a hostile getter */ }
      try { stack = err.stack ? String(err.stack) : name + ': ' + message; } catch (e) { stack = name + ': ' + message; }
      return { name, value: message, traceback: cleanStack(stack) };
    }
    const text = inspect(err);
    return { name: 'Uncaught', value: typeof err === 'string' ? err : text, traceback: 'Uncaught ' + text };
  }

  // ---------------------------------------------------------------------------
  // Executions.

  // `_` is the last main result, as in Node's REPL, until a cell assigns `_`
  // itself (or declares it: `const _ = require('lodash')` shadows it).
  let lastValue;
  let underscoreAuto = true;

  function installUnderscore() {
    Object.defineProperty(global, '_', {
      configurable: true,
      enumerable: false,
      get: () => lastValue,
      set: (value) => {
        underscoreAuto = false;
        Object.defineProperty(global, '_', { configurable: true, enumerable: true, writable: true, value });
      },
    });
  }

  let executionCount = 0;

  function applyEnv(env) {
    const saved = [];
    if (!env || typeof env !== 'object') return saved;
    for (const [name, value] of Object.entries(env)) {
      saved.push([name, Object.prototype.hasOwnProperty.call(process.env, name) ? process.env[name] : undefined]);
      if (value === null || value === undefined) delete process.env[name];
      else process.env[name] = String(value);
    }
    return saved;
  }

  function restoreEnv(saved) {
    for (const [name, value] of saved.reverse()) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }

  async function execute(req) {
    executionCount += 1;
    const count = executionCount;
    const id = req.id;
    let interrupt;
    const interrupted = new Promise((resolve, reject) => { interrupt = () => reject(new Interrupted()); });
    interrupted.catch(() => {});
    current = { id, interrupt };
    terminable(false);
    sender.postMessage({ t: 'begin', id });
    for (const [name, text] of idleOutput) emitText(name, text);
    idleOutput = [];
    idleChars = 0;
    const savedEnv = applyEnv(req.env);
    let status = 'ok';
    try {
      if (global.require === cellRequire) defineGlobal('require', userRequire());
      const filename = 'cell' + count;
      const cell = prepare(typeof req.code === 'string' ? req.code : '', filename);
      rememberPositions(filename, cell);
      const script = new vm.Script(cell.source, { filename });
      let value;
      try {
        value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      } catch (e) {
        if (!(e instanceof SyntaxError)) cell.lexicals.forEach((n) => declaredLexicals.add(n));
        throw e;
      }
      cell.lexicals.forEach((n) => declaredLexicals.add(n));
      if (cell.isAsync) {
        current.async = true;
        terminable(true);
        let box;
        try {
          box = await Promise.race([value, interrupted]);
        } finally {
          terminable(false);
        }
        value = box ? box.value : undefined;
      }
      if (value !== undefined) {
        sendResult({ 'text/plain': inspect(value) }, true);
        if (underscoreAuto) lastValue = value;
      }
    } catch (err) {
      status = 'error';
      sendFrame({ type: 'error', id, ...errorFrame(err) });
    }
    // what the cell left queued (promise callbacks, nextTicks, the reports of
    // its unhandled rejections) runs and writes as part of it
    await new Promise((resolve) => setImmediate(resolve));
    restoreEnv(savedEnv);
    sender.postMessage({ t: 'drain', id });
    sendFrame({ type: 'done', id, execution_count: count, status });
    sender.postMessage({ t: 'end' });
    current = null;
    terminable(true);
  }

  // warm: exercise the cell pipeline (and TypeScript's transpiler) once
  // without running anything, then answer with done 0.
  function warm() {
    try {
      prepare('const warm = await Promise.resolve(1' + (ts ? ' as number' : '') + ');\nwarm', 'warm');
    } catch (e) {
      // nothing to warm
    }
    inspect({ warm: [1, 'two'] });
    sendFrame({ type: 'done', id: 0, execution_count: executionCount, status: 'ok' });
  }

  function environ(env) {
    if (!env || typeof env !== 'object') return;
    for (const [name, value] of Object.entries(env)) {
      if (value === null) delete process.env[name];
      else process.env[name] = String(value);
    }
  }

  // Frames are handled one at a time, in order.  The queue is driven by
  // reactions to each handling's own promise, not by a chain of promises:
  // terminating JavaScript busy after an await drops the microtasks queued at
  // that moment, and a dropped link would stop the chain for good.
  const inbox = [];
  let handling = false;

  function receive(msg) {
    inbox.push(msg);
    pump();
  }

  function pump() {
    if (handling || !inbox.length) return;
    handling = true;
    handle(inbox.shift()).catch(() => {}).then(() => {
      handling = false;
      pump();
    });
  }

  async function handle(msg) {
    if (!msg || typeof msg !== 'object') return;
    if (msg.type === 'execute' && Number.isInteger(msg.id)) await execute(msg);
    else if (msg.type === 'environ') environ(msg.env);
    else if (msg.type === 'warm') warm();
  }

  // ---------------------------------------------------------------------------
  // Ending: children first, then the kernel.

  function descendantsAndGroup() {
    const byParent = new Map();
    const group = [];
    const self = process.pid;
    let ownGroup = 0;
    for (const entry of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      let stat;
      try { stat = fs.readFileSync('/proc/' + entry + '/stat', 'latin1'); } catch (e) { continue; }
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const pid = Number(entry);
      const ppid = Number(fields[1]);
      const pgrp = Number(fields[2]);
      if (pid === self) ownGroup = pgrp;
      if (!byParent.has(ppid)) byParent.set(ppid, []);
      byParent.get(ppid).push(pid);
      group.push([pid, pgrp]);
    }
    const found = new Set();
    const stack = [self];
    while (stack.length) {
      for (const child of byParent.get(stack.pop()) || []) {
        if (!found.has(child)) { found.add(child); stack.push(child); }
      }
    }
    if (ownGroup === self) {  // a group leader: its group is its own
      for (const [pid, pgrp] of group) if (pgrp === self && pid !== self) found.add(pid);
    }
    return found;
  }

  function shutdown() {
    try {
      for (const pid of descendantsAndGroup()) {
        try { process.kill(pid, 'SIGKILL'); } catch (e) { /* gone */ }
      }
    } catch (e) { /* no /proc */ }
    realExit(0);
  }

  // process.exit() in a cell ends the cell, not the kernel (as SystemExit in
  // the Python kernel): it throws a ProcessExit error.
  const realExit = process.exit.bind(process);

  class ProcessExit extends Error {
    constructor(code) {
      super('process.exit(' + (code === undefined ? '' : inspect(code)) + ') was called; the kernel keeps running');
      this.name = 'ProcessExit';
      this.code = code;
    }
  }

  function exitThrows(code) {
    throw new ProcessExit(code);
  }

  // ---------------------------------------------------------------------------
  // Start-up.

  // Frames from fd 3, split or joined anyhow by the socket.  Chunks are joined
  // once a frame is complete (a big frame is copied once, not per chunk).
  // While a chunk is handled, what runs is the kernel's (see terminable()),
  // except what the cell it starts leaves running after its script.
  function readFrames(onFrame) {
    const sock = new net.Socket({ fd: SOCK_FD, readable: true, writable: false });
    let parts = [];
    let have = 0;
    sock.on('data', (chunk) => {
      terminable(false);
      parts.push(chunk);
      have += chunk.length;
      try {
        while (have >= 4) {
          if (parts[0].length < 4) parts = [Buffer.concat(parts, have)];
          const len = parts[0].readUInt32BE(0);
          if (len > (256 << 20)) shutdown();  // not a frame of the daemon's
          if (have < 4 + len) break;
          const buf = parts.length === 1 ? parts[0] : Buffer.concat(parts, have);
          const body = buf.toString('utf8', 4, 4 + len);
          const rest = buf.subarray(4 + len);
          parts = rest.length ? [rest] : [];
          have = rest.length;
          let msg;
          try { msg = JSON.parse(body); } catch (e) { continue; }  // ignored
          onFrame(msg);
        }
      } finally {
        terminable(!current || current.async);
      }
    });
    sock.on('end', shutdown);
    sock.on('close', shutdown);
    sock.on('error', shutdown);
  }

  // ---------------------------------------------------------------------------
  // Interrupts.
  //
  // Node's SIGINT watchdog (the one behind vm's breakOnSigint, and behind the
  // REPL's Ctrl-C) is started once, before `ready`, and never stopped: its
  // signal handler replaces the default one, so that SIGINT never ends the
  // kernel.  While a cell's script runs synchronously, vm terminates it and
  // runInThisContext throws.  Otherwise the watchdog only notes the signal;
  // the sender thread polls for it and tells the main thread ('sigint'), which
  // abandons a cell that awaits.  A main thread that does not answer is busy
  // in JavaScript outside any script (a loop after an await, in a callback):
  // the sender terminates that JavaScript through the inspector, and the
  // 'sigint' message is then handled; only while the main thread has said
  // that what it runs is the user's (shared[2]): the kernel's own code is
  // never cut in the middle.  No process.on('SIGINT') listener may
  // exist alongside (vm removes and adds those, which would reset the handler).
  // Without the watchdog binding, a plain listener does what it can.

  function startSigintWatchdog() {
    const quiet = process.noDeprecation;
    process.noDeprecation = true;  // process.binding() would warn in the first cell
    try {
      const contextify = process.binding('contextify');
      if (typeof contextify.startSigintWatchdog !== 'function' ||
          typeof contextify.watchdogHasPendingSigint !== 'function') return null;
      contextify.startSigintWatchdog();
      // JavaScript terminated inside a callback (a timer's) leaves its async
      // context on Node's stack, which Node's consistency check would turn
      // into a fatal error: the check goes (as with --no-force-async-hooks-checks).
      try {
        const asyncWrap = process.binding('async_wrap');
        asyncWrap.async_hook_fields[asyncWrap.constants.kCheck] = 0;
      } catch (e) {
        // without it an interrupt in a callback ends the kernel
      }
      return contextify;
    } catch (e) {
      return null;
    } finally {
      process.noDeprecation = quiet;
    }
  }

  // The watchdog keeps a noted signal until it is stopped; a nested start and
  // stop clears it without taking its handler away.
  function clearPendingSigint() {
    sigintWatchdog.startSigintWatchdog();
    sigintWatchdog.stopSigintWatchdog();
  }

  function onSigint() {
    // idle: ignored; a cell awaiting (or terminated after an await): abandoned
    if (current && current.async) current.interrupt();
    userSigint.emit('SIGINT', 'SIGINT');
  }

  // The cells' own SIGINT listeners: a real one would take the signal from the
  // watchdog (and vm's removing and adding it would leave SIGINT's default,
  // which ends the process).  They are kept aside and called, from the event
  // loop, for every SIGINT that does not arrive while a script runs.
  const userSigint = new (require('events'))();

  function keepSigintListenersAside() {
    for (const method of ['on', 'addListener', 'once', 'prependListener', 'prependOnceListener',
      'off', 'removeListener']) {
      const orig = process[method];
      process[method] = function (event, listener) {
        if (event === 'SIGINT' && sigintWatchdog) {
          userSigint[method](event, listener);
          return this;
        }
        return orig.call(this, event, listener);
      };
    }
  }

  function onSigintMessage() {
    clearPendingSigint();
    Atomics.store(shared, 1, 0);
    Atomics.notify(shared, 1);
    onSigint();
  }

  function start() {
    if (!sigintWatchdog) process.on('SIGINT', onSigint);
    keepSigintListenersAside();
    sender.on('message', (m) => { if (m === 'sigint') onSigintMessage(); });
    process.on('unhandledRejection', (reason) => {
      const f = errorFrame(reason);
      emitText('stderr', 'Unhandled promise rejection: ' + f.traceback + '\n');
    });
    process.on('uncaughtException', (err) => {
      const f = errorFrame(err);
      emitText('stderr', 'Uncaught exception: ' + f.traceback + '\n');
    });
    installStdio();
    wrapChildProcess();
    process.exit = exitThrows;
    setupModulePaths();
    defineGlobal('require', userRequire());
    defineGlobal('display', display);
    installUnderscore();
    Object.defineProperty(global, '__corral', {
      configurable: false, enumerable: false, writable: false,
      value: Object.freeze({ import: userImport, global }),
    });
    sender.once('message', (m) => {
      if (m !== 'ready') shutdown();
      sendFrame({ type: 'ready', language: LANGUAGE, version: process.versions.node });
      readFrames(receive);
    });
    sender.on('error', shutdown);
    sender.on('exit', shutdown);
  }

  start();
})();
