// A server without keys against the web pages its machine's browser opens
// (docs/security.md, "Web pages and DNS rebinding"): in a real headless
// Chromium (Debian's chromium, driven by playwright-core), where evil.test
// resolves to 127.0.0.1, a page of http://evil.test:PORT can neither create
// a sandbox through E2B's API nor reach OpenSandbox's API, MCP or the
// gateway (cross-origin: its Origin is refused), and a page served as
// evil.test from corral's own ports (DNS rebinding: same-origin, its Host
// is refused) gets each protocol's 403; pages of this machine (localhost,
// 127.0.0.1) still work, the web console included. Then the same refusals
// as raw HTTP, each in its protocol's shape, and a server with keys, which
// keeps answering any origin as E2B does. One browser for all.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { chromium } from 'playwright-core';

import { UPSTREAM_KEY, UPSTREAM_MODEL } from './gateway-helpers.mjs';
import { randomApiKey, startServer, useServer } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

const CHROMIUM = process.env.CORRAL_CHROMIUM || '/usr/bin/chromium';
const EVIL = 'evil.test';
const T = { timeout: 60_000 };

let upstream = null;
let dir = null;
const ctx = useServer(async () => {
  upstream = await startUpstream();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-browsers-'));
  const config = path.join(dir, 'corral.yaml');
  // No master key, no API keys: every listener serves this machine only.
  fs.writeFileSync(config, [
    'model_list:',
    '  - model_name: mock-chat',
    '    litellm_params:',
    `      model: openai/${UPSTREAM_MODEL}`,
    `      api_base: ${upstream.url}`,
    `      api_key: ${UPSTREAM_KEY}`,
    '      upstream_api: chat_completions',
    'templates:',
    '  default:',
    '    pool_size: 0',
    'gateway:',
    `  data_dir: ${path.join(dir, 'data')}`,
    '',
  ].join('\n'));
  return { config, gateway: true };
});

let browser = null;
let page = null;
let site = null; // the attacker's (and a local app's) page: any path, a blank document
let sitePort = 0;

before(async () => {
  site = http.createServer((req, res) => res.end('<!doctype html><title>a page</title>'));
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  sitePort = site.address().port;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', `--host-resolver-rules=MAP ${EVIL} 127.0.0.1`],
  });
  page = await browser.newPage();
});

after(async () => {
  await browser?.close();
  await new Promise((resolve) => (site ? site.close(resolve) : resolve()));
  await upstream?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const e2bPort = () => ctx.server.port;
const osbPort = () => ctx.server.osbPort;
const gwPort = () => ctx.server.gatewayPort;

/** The access lines of the server's log that say `METHOD PATH STATUS`. */
const logged = (method, pathname, status) =>
  ctx.server.stderr.split('\n').filter((l) => l.includes(` ${method} ${pathname} ${status} `)).length;

/** Waits for the server to log its count-th `METHOD PATH STATUS` (written once answered). */
function loggedAgain(method, pathname, status, count) {
  const stderr = ctx.server.child.stderr;
  return new Promise((resolve, reject) => {
    const check = () => {
      if (logged(method, pathname, status) < count) return;
      clearTimeout(timer);
      stderr.off('data', check);
      resolve();
    };
    const timer = setTimeout(() => {
      stderr.off('data', check);
      reject(new Error(`no access line "${method} ${pathname} ${status}" #${count} within 10 s`));
    }, 10_000);
    stderr.on('data', check);
    check();
  });
}

/** What the listeners hold: the sandboxes (asked from this machine) and the upstream's calls. */
async function sandboxes() {
  const res = await fetch(`http://127.0.0.1:${e2bPort()}/sandboxes`);
  assert.equal(res.status, 200);
  return res.json();
}

/** fetch(url, init) run by the page: {status, body} or {failed: the error's name}. */
function pageFetch(url, init = {}) {
  return page.evaluate(async ([u, i]) => {
    try {
      const res = await fetch(u, i);
      return { status: res.status, body: await res.text() };
    } catch (err) {
      return { failed: err.name };
    }
  }, [url, init]);
}

const CREATE = { method: 'POST', body: JSON.stringify({ templateID: 'base' }) }; // text/plain: no preflight
const CHAT = { method: 'POST', body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] }) };
const MCP_INIT = {
  method: 'POST',
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'page', version: '1' } } }),
};

test('a page of another site reaches none of the listeners across origins', T, async () => {
  await page.goto(`http://${EVIL}:${sitePort}/`);
  const before = { sandboxes: (await sandboxes()).length, upstream: upstream.requests.length };
  const attempts = [
    [`http://127.0.0.1:${e2bPort()}/sandboxes`, CREATE, 'POST', '/sandboxes'],
    [`http://127.0.0.1:${e2bPort()}/sandboxes`, { ...CREATE, headers: { 'Content-Type': 'application/json' } }, 'OPTIONS', '/sandboxes'],
    [`http://127.0.0.1:${e2bPort()}/mcp`, MCP_INIT, 'POST', '/mcp'],
    [`http://127.0.0.1:${osbPort()}/v1/sandboxes`, { method: 'POST', body: JSON.stringify({ image: { uri: 'python' } }) }, 'POST', '/v1/sandboxes'],
    [`http://127.0.0.1:${gwPort()}/v1/chat/completions`, CHAT, 'POST', '/v1/chat/completions'],
    [`http://localhost:${gwPort()}/ui/api/session`, {}, 'GET', '/ui/api/session'],
  ];
  for (const [url, init, method, pathname] of attempts) {
    const refusedBefore = logged(method, pathname, 403);
    const got = await pageFetch(url, init);
    assert.deepEqual(got, { failed: 'TypeError' }, `${method} ${url}: the page may not read an answer`);
    await loggedAgain(method, pathname, 403, refusedBefore + 1); // it reached the server, which refused it
  }
  assert.equal((await sandboxes()).length, before.sandboxes, 'no sandbox was made');
  assert.equal(upstream.requests.length, before.upstream, 'the upstream was not called');
});

test('a site\'s name re-pointed at this machine (DNS rebinding) is refused on every listener', T, async () => {
  const before = { sandboxes: (await sandboxes()).length, upstream: upstream.requests.length };
  const cases = [
    [e2bPort(), '/sandboxes', CREATE, (b) => assert.equal(b.code, 403)],
    [e2bPort(), '/mcp', MCP_INIT, (b) => assert.equal(b.error.code, -32000)],
    [osbPort(), '/v1/sandboxes', { method: 'POST', body: '{}' }, (b) => assert.equal(b.code, 'PERMISSION_DENIED')],
    [gwPort(), '/v1/chat/completions', CHAT, (b) => assert.equal(b.error.code, 'forbidden')],
    [gwPort(), '/ui/api/session', {}, (b) => assert.equal(b.error.code, 'forbidden')],
  ];
  for (const [port, pathname, init, shape] of cases) {
    const nav = await page.goto(`http://${EVIL}:${port}/ui`);
    assert.equal(nav.status(), 403, `the page itself, from port ${port}`);
    const got = await pageFetch(pathname, init); // same-origin: the answer is readable
    assert.equal(got.status, 403, `${pathname} on port ${port}: ${got.body}`);
    const body = JSON.parse(got.body);
    shape(body);
    assert.match(JSON.stringify(body), new RegExp(`not to ${EVIL}:${port} \\(its Host\\).*DNS rebinding.*give the server keys`));
  }
  assert.equal((await sandboxes()).length, before.sandboxes, 'no sandbox was made');
  assert.equal(upstream.requests.length, before.upstream, 'the upstream was not called');
});

test('pages of this machine still work: a local app across origins, and the console', T, async () => {
  await page.goto(`http://localhost:${sitePort}/`);
  const list = await pageFetch(`http://127.0.0.1:${e2bPort()}/sandboxes`);
  assert.equal(list.status, 200, list.body); // readable: E2B's API allows the page, as E2B's does
  assert.ok(Array.isArray(JSON.parse(list.body)));
  await page.goto(`http://127.0.0.1:${gwPort()}/ui`);
  await page.waitForFunction(() => document.getElementById('who')?.textContent === 'no key configured', null, { timeout: 30_000 });
  const session = await pageFetch('/ui/api/session');
  assert.equal(session.status, 200, session.body);
});

/** A raw request to 127.0.0.1:port: {status, headers, body (parsed when JSON)}. */
function raw(port, { method = 'GET', pathname = '/', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: pathname, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let parsed = text;
        try { parsed = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, body: parsed });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('raw HTTP: a foreign Origin or Host is a 403 in each protocol\'s shape, and what passes', T, async () => {
  const origin = { Origin: 'http://evil.test:8000' };
  const host = { Host: 'evil.test:3000' };
  const listeners = [
    ['E2B', e2bPort(), '/sandboxes', (b) => assert.deepEqual([Object.keys(b).sort(), b.code], [['code', 'message'], 403])],
    ['OpenSandbox', osbPort(), '/v1/sandboxes', (b) => assert.equal(b.code, 'PERMISSION_DENIED')],
    ['the gateway', gwPort(), '/v1/models', (b) => assert.deepEqual([b.error.type, b.error.code], ['invalid_request_error', 'forbidden'])],
    ['MCP', e2bPort(), '/mcp', (b) => assert.deepEqual([b.jsonrpc, b.error.code], ['2.0', -32000])],
  ];
  for (const [name, port, pathname, shape] of listeners) {
    const method = name === 'MCP' ? 'POST' : 'GET';
    const byOrigin = await raw(port, { method, pathname, headers: origin, body: name === 'MCP' ? MCP_INIT.body : undefined });
    assert.equal(byOrigin.status, 403, `${name}, a foreign Origin`);
    shape(byOrigin.body);
    const message = byOrigin.body.message ?? byOrigin.body.error.message;
    assert.match(message, /no keys.*web page of http:\/\/evil\.test:8000 \(its Origin\).*give the server keys/i);
    assert.match(message, name === 'the gateway' ? /master key/ : /--api-key/);
    assert.equal(byOrigin.headers['access-control-allow-origin'], undefined, `${name}: no CORS permission`);
    const byHost = await raw(port, { method, pathname, headers: host, body: name === 'MCP' ? MCP_INIT.body : undefined });
    assert.equal(byHost.status, 403, `${name}, a foreign Host`);
    shape(byHost.body);
    const probe = await raw(port, { pathname: '/healthz', headers: host });
    assert.equal(probe.status, 403, `${name}: the probes are this machine's too`);
  }
  // a preflight from another site gets no permission
  const preflight = await raw(e2bPort(), { method: 'OPTIONS', pathname: '/sandboxes',
    headers: { ...origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' } });
  assert.equal(preflight.status, 403);
  assert.equal(preflight.headers['access-control-allow-origin'], undefined);
  assert.equal(preflight.headers['access-control-allow-methods'], undefined);
  // what passes: this machine's names and pages, no Origin, a sandbox's host name
  for (const h of ['localhost:1', 'app.localhost', '127.0.0.2:80', '[::1]:3000']) {
    assert.equal((await raw(e2bPort(), { pathname: '/sandboxes', headers: { Host: h } })).status, 200, `Host ${h}`);
  }
  for (const o of ['http://localhost:5173', 'https://127.0.0.1', 'http://[::1]:8080', 'http://app.localhost:3000']) {
    const res = await raw(e2bPort(), { pathname: '/sandboxes', headers: { Origin: o } });
    assert.equal(res.status, 200, `Origin ${o}`);
    assert.equal(res.headers['access-control-allow-origin'], '*');
  }
  assert.equal((await raw(gwPort(), { pathname: '/v1/models', headers: { Origin: 'http://localhost:3000' } })).status, 200);
  assert.equal((await raw(osbPort(), { pathname: '/v1/sandboxes', headers: { Origin: 'http://localhost:3000' } })).status, 200);
  // E2B's sandbox host names (getHost, signed URLs) are routed, whatever their domain
  const sandboxHost = await raw(e2bPort(), { pathname: '/health', headers: { Host: '49983-nosuchsandbox.sandbox.test:3000' } });
  assert.equal(sandboxHost.status, 502, JSON.stringify(sandboxHost.body));
  assert.match(sandboxHost.body.message, /not found/);
  // ... but not from another site's page
  const sandboxOrigin = await raw(e2bPort(), { pathname: '/health',
    headers: { Host: '49983-nosuchsandbox.sandbox.test:3000', Origin: 'http://49983-nosuchsandbox.sandbox.test:3000' } });
  assert.equal(sandboxOrigin.status, 403);
  // a sandbox's page under .localhost reaches its own sandbox, not the APIs
  const page = 'http://8080-nosuchsandbox.localhost:3000';
  const toApi = await raw(e2bPort(), { method: 'POST', pathname: '/sandboxes', headers: { Origin: page } });
  assert.equal(toApi.status, 403, JSON.stringify(toApi.body));
  assert.match(toApi.body.message, /web page of http:\/\/8080-nosuchsandbox\.localhost:3000 \(its Origin\)/);
  const toGateway = await raw(gwPort(), { pathname: '/v1/models', headers: { Origin: page } });
  assert.equal(toGateway.status, 403);
  const toItself = await raw(e2bPort(), { method: 'POST', pathname: '/form',
    headers: { Origin: page, Host: '8000-nosuchsandbox.localhost:3000' } });
  assert.equal(toItself.status, 502, JSON.stringify(toItself.body));
  assert.match(toItself.body.message, /not found/);
});

test('a server with keys answers any origin and host name as before: its keys protect it', T, async () => {
  const key = randomApiKey();
  const keyed = await startServer({ apiKeys: [key], gateway: false, args: ['--opensandbox-listen', 'off'] });
  try {
    const headers = { 'X-API-Key': key, Origin: `http://${EVIL}:8000`, Host: `${EVIL}:3000` };
    const res = await raw(keyed.port, { pathname: '/sandboxes', headers });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.headers['access-control-allow-origin'], '*');
    const without = await raw(keyed.port, { pathname: '/sandboxes', headers: { Origin: `http://${EVIL}:8000` } });
    assert.equal(without.status, 401, 'no key: refused for that reason, as before');
  } finally {
    await keyed.stop();
  }
});
