// A sandbox's own ports through the official SDKs, `e2b` and
// `@alibaba-group/opensandbox`: a web server and a
// WebSocket echo server started in the sandbox (with commands.run, no
// network of its own) answer at the host sbx.getHost(port) names (E2B's
// `<port>-<sandboxId>.<domain>`, reached here through this server's
// address, as a wildcard DNS name would) and through E2B's routing headers;
// a port nothing listens on is E2B's 502; `allowPublicTraffic: false` makes
// the ports need the sandbox's traffic access token.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';

import { Sandbox as OsbSandbox } from '@alibaba-group/opensandbox';
import { Sandbox } from 'e2b';

import { eventually, killAfter, useServer, withSandbox } from './harness.mjs';

const ctx = useServer({ gateway: false });
const T = { timeout: 120_000 };

/** GET path through the server with these headers: {status, headers, body}. */
function get(path, headers) {
  return fetchUrl(new URL(path, ctx.server.url).href, headers);
}

/** GET the URL u with these headers. */
function fetchUrl(u, headers) {
  const url = new URL(u);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Starts `code` (Python) in the sandbox in the background and waits until port listens. */
async function serve(sbx, code, port) {
  await sbx.files.write('/home/user/server.py', code);
  let stderr = '';
  await sbx.commands.run('python3 /home/user/server.py', { background: true, onStderr: (d) => { stderr += d; } });
  const check = `python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port})).close()"`;
  const up = await eventually(async () => (await sbx.commands.run(check).catch((e) => e)).exitCode === 0);
  assert.ok(up, `port ${port} does not listen; the server's stderr: ${stderr}`);
}

const WEB = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("path=%s host=%s token=%s" % (self.path, self.headers.get("Host"),
                self.headers.get("E2B-Traffic-Access-Token"))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-From-Sandbox", "yes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
`;

// A WebSocket echo server of the standard library's parts (RFC 6455: the
// handshake, then unfragmented text frames, masked from the client).
const ECHO = `
import base64, hashlib, socket, socketserver, struct
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
class H(socketserver.BaseRequestHandler):
    def handle(self):
        s, data = self.request, b""
        while b"\\r\\n\\r\\n" not in data:
            data += s.recv(4096)
        head = data.split(b"\\r\\n\\r\\n")[0].decode()
        key = [l.split(":", 1)[1].strip() for l in head.split("\\r\\n") if l.lower().startswith("sec-websocket-key:")][0]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        s.sendall(("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
                   "Sec-WebSocket-Accept: %s\\r\\n\\r\\n" % accept).encode())
        f = s.makefile("rb")
        while True:
            b = f.read(2)
            if len(b) < 2 or b[0] & 0x0f == 8:
                return
            n = b[1] & 0x7f
            if n == 126:
                n = struct.unpack(">H", f.read(2))[0]
            mask = f.read(4)
            payload = bytes(c ^ mask[i % 4] for i, c in enumerate(f.read(n)))
            reply = b"echo: " + payload
            s.sendall(bytes([0x81, len(reply)]) + reply)
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", 8765), H).serve_forever()
`;

/** A WebSocket handshake and one text message through the server: the reply's text. */
function wsEcho(headers, message, { base = ctx.server.url, path = '/chat?room=1' } = {}) {
  const url = new URL(base);
  const key = crypto.randomBytes(16).toString('base64');
  const want = crypto.createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: url.hostname, port: Number(url.port) });
    let buf = Buffer.alloc(0);
    let upgraded = false;
    s.on('error', reject);
    s.on('connect', () => {
      const lines = [`GET ${path} HTTP/1.1`, 'Upgrade: websocket', 'Connection: Upgrade',
        `Sec-WebSocket-Key: ${key}`, 'Sec-WebSocket-Version: 13',
        ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
      s.write(`${lines.join('\r\n')}\r\n\r\n`);
    });
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (!upgraded) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        buf = buf.subarray(end + 4);
        if (!head.startsWith('HTTP/1.1 101') || !head.includes(`Sec-WebSocket-Accept: ${want}`)) {
          s.destroy();
          reject(new Error(`no upgrade: ${head}`));
          return;
        }
        upgraded = true;
        const payload = Buffer.from(message);
        const mask = crypto.randomBytes(4);
        const masked = Buffer.from(payload.map((c, i) => c ^ mask[i % 4]));
        s.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, masked]));
      }
      if (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
        const text = buf.subarray(2, 2 + (buf[1] & 0x7f)).toString();
        s.end(Buffer.from([0x88, 0x80, 0, 0, 0, 0]));
        s.destroy();
        resolve(text);
      }
    });
  });
}

test('getHost(port): a web server started in the sandbox answers, by host name and by headers', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await serve(sbx, WEB, 8000);
    const host = sbx.getHost(8000);
    assert.equal(host, `8000-${sbx.sandboxId}.${sbx.sandboxDomain ?? 'e2b.app'}`);
    const byHost = await get('/hello?x=1', { Host: host });
    assert.equal(byHost.status, 200);
    assert.equal(byHost.headers['x-from-sandbox'], 'yes');
    assert.equal(byHost.body, `path=/hello?x=1 host=${host} token=None`);
    const byHeaders = await get('/again', { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' });
    assert.equal(byHeaders.status, 200);
    assert.match(byHeaders.body, /^path=\/again /);
    // Nothing listens on 8001: E2B's answer.
    const closed = await get('/', { Host: sbx.getHost(8001) });
    assert.equal(closed.status, 502);
    assert.deepEqual(JSON.parse(closed.body), {
      sandboxId: sbx.sandboxId, message: 'The sandbox is running but port is not open', port: '8001', code: 502,
    });
  }),
);

test('a WebSocket echo server started in the sandbox answers through getHost(port)', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await serve(sbx, ECHO, 8765);
    assert.equal(await wsEcho({ Host: sbx.getHost(8765) }, 'hello'), 'echo: hello');
    assert.equal(await wsEcho({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8765' }, 'twice'), 'echo: twice');
  }),
);

test('allowPublicTraffic: false: the ports need the traffic access token', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    assert.ok(sbx.trafficAccessToken, 'no trafficAccessToken in the answer');
    const info = await sbx.getInfo();
    assert.equal(info.network?.allowPublicTraffic, false);
    await serve(sbx, WEB, 8000);
    const host = sbx.getHost(8000);
    const without = await get('/', { Host: host });
    assert.equal(without.status, 401);
    const wrong = await get('/', { Host: host, 'E2B-Traffic-Access-Token': 'not-the-token' });
    assert.equal(wrong.status, 401);
    const ok = await get('/', { Host: host, 'E2B-Traffic-Access-Token': sbx.trafficAccessToken });
    assert.equal(ok.status, 200);
    assert.equal(ok.body, `path=/ host=${host} token=None`); // the token stays at the door
  }, { network: { allowPublicTraffic: false } }),
);

test('allowPublicTraffic: a non-boolean is a 400 at creation, and a running sandbox\'s ports cannot be opened or closed', T, async () => {
  /** A request of the control plane as E2B's API takes it: {status, body}. */
  async function control(method, path, body) {
    const res = await fetch(new URL(path, ctx.server.url), {
      method, headers: { 'X-API-Key': ctx.server.apiKey, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  }
  const made = await control('POST', '/sandboxes', { templateID: 'base', network: { allowPublicTraffic: 'no' } });
  assert.equal(made.status, 400);
  assert.equal(made.body.code, 400);
  assert.match(made.body.message, /'network\.allowPublicTraffic' must be a boolean/);
  const listed = await Sandbox.list({ ...ctx.server.sdkOpts() }).nextItems();
  assert.deepEqual(listed, [], 'the refused create made a sandbox');

  await withSandbox(Sandbox, async (sbx) => {
    for (const value of [true, false, 'yes']) {
      const put = await control('PUT', `/sandboxes/${sbx.sandboxId}/network`, { allowPublicTraffic: value });
      assert.equal(put.status, 400, `allowPublicTraffic: ${JSON.stringify(value)}`);
      assert.equal(put.body.code, 400);
      assert.match(put.body.message, /'allowPublicTraffic' is set when the sandbox is created/);
    }
    const info = await sbx.getInfo();
    assert.equal(info.network?.allowPublicTraffic, undefined, 'the ports stay public');
    assert.equal((await get('/', { Host: sbx.getHost(8001) })).status, 502, 'no token asked for: nothing listens');
  });
});

test('OpenSandbox getEndpoint and getSignedEndpoint: the web server and a WebSocket through the endpoints', T, async () => {
  const connectionConfig = { domain: new URL(ctx.server.osbUrl).host, protocol: 'http', apiKey: ctx.server.apiKey, requestTimeoutSeconds: 30 };
  const sbx = await OsbSandbox.create({ connectionConfig, image: 'python:3.12', timeoutSeconds: 300 });
  await killAfter(sbx, async () => {
    for (const [code, port] of [[WEB, 8000], [ECHO, 8765]]) {
      await sbx.files.writeFiles([{ path: `/home/user/server${port}.py`, data: code }]);
      await sbx.commands.run(`python3 /home/user/server${port}.py`, { background: true });
      const check = `python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port})).close()"`;
      const up = await eventually(async () => (await sbx.commands.run(check)).exitCode === 0);
      assert.ok(up, `port ${port} does not listen`);
    }
    // With the endpoint's headers.
    const ep = await sbx.getEndpoint(8000);
    assert.ok(ep.headers && Object.keys(ep.headers).length === 1, JSON.stringify(ep));
    const url = await sbx.getEndpointUrl(8000);
    const viaHeaders = await fetchUrl(`${url}/page?q=1`, ep.headers);
    assert.equal(viaHeaders.status, 200);
    assert.match(viaHeaders.body, /^path=\/page\?q=1 /);
    assert.equal((await fetchUrl(`${url}/`, {})).status, 401);
    const ws = new URL(await sbx.getEndpointUrl(8765));
    assert.equal(await wsEcho(ep.headers, 'osb', { base: ws.href, path: `${ws.pathname}/ws` }), 'echo: osb');
    // Signed: the endpoint alone, until it expires.
    const signed = await sbx.getSignedEndpoint(8000, Math.floor(Date.now() / 1000) + 60);
    assert.equal(signed.headers, undefined);
    const signedUrl = `http://${signed.endpoint}`;
    const viaSigned = await fetchUrl(`${signedUrl}/signed-page`, {});
    assert.equal(viaSigned.status, 200);
    assert.match(viaSigned.body, /^path=\/signed-page /);
    const tampered = signedUrl.replace(/.$/, (c) => (c === '0' ? '1' : '0'));
    assert.equal((await fetchUrl(`${tampered}/`, {})).status, 401);
    await assert.rejects(sbx.getSignedEndpoint(8000, Math.floor(Date.now() / 1000) - 1), /in the past/);
    // Nothing listens on 8001.
    const closed = await fetchUrl(`${await sbx.getEndpointUrl(8001)}/`, ep.headers);
    assert.equal(closed.status, 502);
    assert.match(closed.body, /nothing listens on port 8001/);
  }, { afterKill: () => sbx.close() });
});

test("OpenSandbox's entrypoint runs as the sandbox's long-lived process: it serves port 80, its output is readable", T, async () => {
  const connectionConfig = { domain: new URL(ctx.server.osbUrl).host, protocol: 'http', apiKey: ctx.server.apiKey, requestTimeoutSeconds: 30 };
  const entrypoint = ['python3', '-c', [
    'import http.server, sys',
    'print("serving on 80", flush=True)',
    'http.server.ThreadingHTTPServer(("0.0.0.0", 80), http.server.SimpleHTTPRequestHandler).serve_forever()',
  ].join('\n')];
  const sbx = await OsbSandbox.create({ connectionConfig, image: 'python:3.12', timeoutSeconds: 300, entrypoint });
  await killAfter(sbx, async () => {
    assert.deepEqual((await sbx.getInfo()).entrypoint, entrypoint);
    const status = await sbx.commands.getCommandStatus('entrypoint');
    assert.equal(status.running, true);
    assert.match(status.content, /^exec 'python3' '-c' /);
    const logs = await eventually(async () => {
      const l = await sbx.commands.getBackgroundCommandLogs('entrypoint');
      return l.content.includes('serving on 80') ? l : null;
    });
    assert.ok(logs, 'the entrypoint printed nothing');
    const ep = await sbx.getEndpoint(80);
    const page = await eventually(async () => {
      const r = await fetchUrl(`${await sbx.getEndpointUrl(80)}/`, ep.headers);
      return r.status === 200 ? r : null;
    });
    assert.ok(page && /Directory listing for \//.test(page.body), page?.body);
  }, { afterKill: () => sbx.close() });
});
