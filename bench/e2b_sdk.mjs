// The E2B JS SDK against `corral serve`, for bench/run.py: prints
//   sdk_create MS   Sandbox.create() + runCode('1+1') (to its result), per sandbox
//   sdk_trip MS     runCode('1+1') in a warm sandbox
//   raw_create MS   the same two calls (POST /v2/sandboxes, POST /execute to the end
//                   of its stream) from a minimal HTTP/1.1 client on a raw socket
//   raw_trip MS     the same /execute in the same warm sandbox, from that client
// The SDK's calls and the minimal client's alternate, in this process and against
// the same server: their difference is what the SDK and Node's fetch cost on the
// client's side, whatever the server does.
// Usage: node bench/e2b_sdk.mjs CORRAL N_CREATE N_TRIP
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'integration', 'package.json'));
const { Sandbox } = require('@e2b/code-interpreter');

const [corral, nCreate = '20', nTrip = '200'] = process.argv.slice(2);
const TEMPLATE = 'code-interpreter-v1'; // what Sandbox.create() asks for
const API_KEY = 'e2b_' + '0'.repeat(40);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** One whole response at the start of buf: {status, body, used}, or null if incomplete. */
function parseResponse(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0].split(' ')[1]);
  const headers = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let pos = end + 4;
  if (headers['transfer-encoding'] === 'chunked') {
    const parts = [];
    for (;;) {
      const eol = buf.indexOf('\r\n', pos);
      if (eol < 0) return null;
      const size = parseInt(buf.subarray(pos, eol).toString('latin1'), 16);
      if (buf.length < eol + 2 + size + 2) return null;
      if (size === 0) return { status, body: Buffer.concat(parts).toString(), used: eol + 4 };
      parts.push(buf.subarray(eol + 2, eol + 2 + size));
      pos = eol + 2 + size + 2;
    }
  }
  const length = Number(headers['content-length'] ?? 0); // 204: none
  if (buf.length < pos + length) return null;
  return { status, body: buf.subarray(pos, pos + length).toString(), used: pos + length };
}

/** A minimal HTTP/1.1 client: one kept-alive connection, one request at a time. */
class RawClient {
  static async connect(port) {
    const sock = net.connect(port, '127.0.0.1');
    sock.setNoDelay(true);
    await new Promise((resolve, reject) => {
      sock.once('connect', resolve);
      sock.once('error', reject);
    });
    return new RawClient(sock, port);
  }

  constructor(sock, port) {
    this.sock = sock;
    this.port = port;
    this.buf = Buffer.alloc(0);
    this.waiting = null;
    sock.on('data', (d) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      const r = this.waiting && parseResponse(this.buf);
      if (r) {
        this.buf = this.buf.subarray(r.used);
        const { resolve } = this.waiting;
        this.waiting = null;
        resolve(r);
      }
    });
    const fail = (err) => {
      if (this.waiting) this.waiting.reject(err ?? new Error('the server closed the connection'));
      this.waiting = null;
    };
    sock.on('error', fail);
    sock.on('close', () => fail());
  }

  request(method, target, headers = {}, body = '') {
    const head = [`${method} ${target} HTTP/1.1`, `Host: 127.0.0.1:${this.port}`,
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.sock.write(head.join('\r\n') + '\r\n\r\n' + body);
    });
  }

  /** sandbox: {sandboxId, token} (token: its envdAccessToken, if it is secure). */
  async execute(sandbox, code) {
    const headers = {
      'Content-Type': 'application/json', 'E2b-Sandbox-Id': sandbox.sandboxId,
      'E2b-Sandbox-Port': '49999',
    };
    if (sandbox.token) headers['X-Access-Token'] = sandbox.token;
    const r = await this.request('POST', '/execute', headers, JSON.stringify({ code }));
    if (r.status !== 200) throw new Error(`/execute answered ${r.status}: ${r.body}`);
    return r.body;
  }

  /** As Sandbox.create() does: the default (secure) sandbox of TEMPLATE. */
  async create() {
    const r = await this.request('POST', '/v2/sandboxes',
      { 'Content-Type': 'application/json', 'X-API-Key': API_KEY },
      JSON.stringify({ templateID: TEMPLATE }));
    if (r.status !== 201) throw new Error(`create answered ${r.status}: ${r.body}`);
    const sb = JSON.parse(r.body);
    return { sandboxId: sb.sandboxID, token: sb.envdAccessToken };
  }

  async kill(sandbox) {
    await this.request('DELETE', `/sandboxes/${sandbox.sandboxId}`, { 'X-API-Key': API_KEY });
  }

  close() {
    this.sock.destroy();
  }
}

const port = await freePort();
const server = spawn(corral, ['serve', '--listen', `127.0.0.1:${port}`, '--opensandbox-listen', 'off'],
  { stdio: ['ignore', 'ignore', 'pipe'] });
await new Promise((resolve, reject) => {
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
    if (err.includes('listening on')) resolve();
  });
  server.on('exit', (code) => reject(new Error(`corral serve exited ${code}: ${err}`)));
});
const url = `http://127.0.0.1:${port}`;
const opts = { apiUrl: url, sandboxUrl: url, apiKey: API_KEY };
const ms = (t0) => (performance.now() - t0).toFixed(3);
const isTwo = (body) => body.includes('"text":"2"');

async function sdkCreate() {
  const t0 = performance.now();
  const sbx = await Sandbox.create(opts);
  const ex = await sbx.runCode('1+1');
  const t = ms(t0);
  if (ex.text !== '2') throw new Error(`runCode gave ${ex.text}`);
  await sbx.kill();
  return t;
}

async function rawCreate(raw) {
  const t0 = performance.now();
  const sandbox = await raw.create();
  const body = await raw.execute(sandbox, '1+1');
  const t = ms(t0);
  if (!isTwo(body)) throw new Error(`/execute gave ${body}`);
  await raw.kill(sandbox);
  return t;
}

let raw;
try {
  raw = await RawClient.connect(port);
  // The first sandbox waits for the template's zygote, and the first few
  // creates are slower while Node compiles the SDK's code: not measured.
  const warm = await Sandbox.create(opts);
  await warm.runCode('1+1');
  const warmRaw = { sandboxId: warm.sandboxId, token: warm.envdAccessToken };
  for (let i = 0; i < 3; i++) {
    await sdkCreate();
    await rawCreate(raw);
  }
  for (let i = 0; i < Number(nCreate); i++) {
    // Alternate which goes first, so that neither always follows the other's kill.
    if (i % 2) {
      console.log(`raw_create ${await rawCreate(raw)}`);
      console.log(`sdk_create ${await sdkCreate()}`);
    } else {
      console.log(`sdk_create ${await sdkCreate()}`);
      console.log(`raw_create ${await rawCreate(raw)}`);
    }
  }
  for (let i = -10; i < Number(nTrip); i++) {
    for (const which of i % 2 ? ['raw', 'sdk'] : ['sdk', 'raw']) {
      const t0 = performance.now();
      if (which === 'sdk') {
        await warm.runCode('1+1');
      } else if (!isTwo(await raw.execute(warmRaw, '1+1'))) {
        throw new Error('/execute did not give 2');
      }
      if (i >= 0) console.log(`${which}_trip ${ms(t0)}`);
    }
  }
  await warm.kill();
} finally {
  raw?.close();
  server.kill('SIGTERM');
  await new Promise((resolve) => server.on('exit', resolve));
}
