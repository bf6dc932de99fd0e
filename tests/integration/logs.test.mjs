// The server's log (docs/operations.md, "Logs"): with --log-format json every
// line of a whole run is a JSON object with time, level, surface and msg;
// a request's id (its X-Request-ID when sane, else one the server makes)
// comes back on every answer (whole, streamed, an error, the server's own
// refusal), names the log lines of that request and goes on to the
// gateway's upstream; and no secret of a workload (API, admin, master and
// virtual keys, the upstream's key, sandboxes' environment values, envd's
// access token) appears in the log, in JSON or in text.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import OpenAI from 'openai';

import { startServer, useServer, withSandbox } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

const T = { timeout: 120_000 };
const hex = (n) => crypto.randomBytes(n).toString('hex');
const SECRETS = {
  apiKey: `e2b_${hex(20)}`,
  adminKey: `e2b_${hex(20)}`,
  masterKey: `sk-master-${hex(12)}`,
  upstreamKey: `sk-upstream-${hex(12)}`,
  envValue: `env-value-${hex(12)}`,
  commandEnvValue: `cmd-env-${hex(12)}`,
};
const found = {}; // secrets learnt during the run: the virtual key, envd's token
const ID_RE = /^[\x21-\x7e]{1,128}$/;

let upstream = null;
let dir = null;

function config(upstreamUrl) {
  return [
    'templates:',
    '  default:',
    '    pool_size: 0',
    'model_list:',
    '  - model_name: mock-chat',
    '    litellm_params:',
    '      model: openai/mock-model',
    `      api_base: ${upstreamUrl}`,
    `      api_key: ${SECRETS.upstreamKey}`,
    '      upstream_api: chat_completions',
    'general_settings:',
    `  master_key: ${SECRETS.masterKey}`,
    'gateway:',
    '  code_tool_name: python',
    `  data_dir: ${path.join(dir, 'data')}`,
    '',
  ].join('\n');
}

/** The JSON run's lines, each checked: time, level, surface, msg. */
function jsonLines(text) {
  const lines = text.split('\n').filter((l) => l !== '');
  return lines.map((line) => {
    let v;
    assert.doesNotThrow(() => {
      v = JSON.parse(line);
    }, `not a JSON line: ${line}`);
    assert.match(v.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, line);
    assert.ok(['debug', 'info', 'warn', 'error'].includes(v.level), line);
    assert.equal(typeof v.surface, 'string', line);
    assert.equal(typeof v.msg, 'string', line);
    return v;
  });
}

function assertNoSecret(text, label) {
  for (const [name, secret] of Object.entries({ ...SECRETS, ...found })) {
    assert.ok(!text.includes(secret), `the ${label} log holds the ${name}`);
  }
}

const keyLabel = (key) => `key-${crypto.createHash('sha256').update(key).digest('hex').slice(0, 12)}`;

const ctx = useServer(
  async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-logs-'));
    upstream = await startUpstream({ apiKey: SECRETS.upstreamKey });
    const file = path.join(dir, 'corral.yaml');
    fs.writeFileSync(file, config(upstream.url));
    return {
      config: file,
      gateway: true,
      apiKeys: [SECRETS.apiKey],
      args: ['--log-format', 'json', '--admin-key', SECRETS.adminKey],
    };
  },
  {
    // (a) and (c) over the whole run, once the server has stopped
    afterStop: async () => {
      const lines = jsonLines(ctx.server.stderr);
      assert.ok(lines.some((l) => l.msg.startsWith('listening on')), 'no listening line');
      assert.ok(lines.some((l) => l.key === keyLabel(SECRETS.apiKey)), 'no line names the API key by its label');
      assertNoSecret(ctx.server.stderr, 'JSON');
    },
  },
);

after(async () => {
  await upstream?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The lines of the JSON run so far that carry request id `id`. */
const linesOf = (id) => jsonLines(ctx.server.stderr).filter((l) => l.request_id === id);

/**
 * The first line of request `id` that pred takes, once the server has
 * written it: a request's access line follows its answer's last byte.
 */
function lineOf(id, pred = () => true) {
  const { child } = ctx.server;
  return new Promise((resolve, reject) => {
    const check = () => {
      const line = linesOf(id).find(pred);
      if (!line) return;
      done();
      resolve(line);
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`no such log line of request ${id} within 30 s; its lines: ${JSON.stringify(linesOf(id))}`));
    }, 30_000);
    const done = () => {
      clearTimeout(timer);
      child.stderr.off('data', check);
    };
    child.stderr.on('data', check);
    check();
  });
}

const e2b = (pathname, { method = 'GET', headers = {}, body } = {}) =>
  fetch(new URL(pathname, ctx.server.url), {
    method,
    headers: { 'X-API-Key': SECRETS.apiKey, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

/** A raw request's answer head (the server's own refusals). */
function rawHead(port, text) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => sock.write(text));
    let got = '';
    sock.setEncoding('latin1');
    sock.on('data', (d) => {
      got += d;
    });
    sock.on('end', () => resolve(got));
    sock.on('error', reject);
  });
}

test('a request id given is answered and names the request’s log lines; one not given is made', T, async () => {
  const id = `logs-${hex(8)}`;
  const res = await e2b('/sandboxes', { method: 'POST', headers: { 'X-Request-ID': id }, body: { templateID: 'no-such-template' } });
  assert.equal(res.status, 404, await res.text());
  assert.equal(res.headers.get('x-request-id'), id);
  const access = await lineOf(id, (l) => l.status === 404);
  assert.equal(access.surface, 'e2b');
  assert.equal(access.method, 'POST');
  assert.equal(access.path, '/sandboxes');
  assert.equal(typeof access.duration_ms, 'number');
  assert.equal(access.key, keyLabel(SECRETS.apiKey));

  // none given: one made, on an error too
  const made = await e2b('/sandboxes/nope');
  assert.equal(made.status, 404);
  const madeId = made.headers.get('x-request-id');
  assert.match(madeId, ID_RE);
  await lineOf(madeId, (l) => l.status === 404 && l.path === '/sandboxes/nope');

  // an unusable one is replaced
  for (const bad of ['x'.repeat(129), 'two words']) {
    const r = await e2b('/sandboxes', { headers: { 'X-Request-ID': bad } });
    assert.equal(r.status, 200);
    const got = r.headers.get('x-request-id');
    assert.match(got, ID_RE);
    assert.notEqual(got, bad);
  }

  // the server's own refusal (ambiguous framing: 400), once a head was read
  const refused = await rawHead(
    ctx.server.port,
    'POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-Request-ID: refused-1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n',
  );
  assert.match(refused, /^HTTP\/1\.1 400 /);
  assert.match(refused, /\r\nX-Request-ID: refused-1\r\n/i);
  await lineOf('refused-1', (l) => l.status === 400);
});

test('sandbox work: streamed answers carry an id; secrets stay out of the log', T, () =>
  withSandbox(
    Sandbox,
    async (sbx) => {
      const info = await (await e2b(`/sandboxes/${sbx.sandboxId}`)).json();
      assert.equal(typeof info.envdAccessToken, 'string', 'the SDK makes secure sandboxes');
      found.envdToken = info.envdAccessToken;
      const env = await sbx.runCode('import os; os.environ["LOGS_SECRET"]');
      assert.equal(env.text, SECRETS.envValue);
      const cmd = await sbx.commands.run('echo "$CMD_SECRET"', { envs: { CMD_SECRET: SECRETS.commandEnvValue } });
      assert.equal(cmd.stdout.trim(), SECRETS.commandEnvValue);

      // a streamed answer (NDJSON of /execute), without an id, then with one
      for (const given of [null, `exec-${hex(6)}`]) {
        const res = await fetch(new URL('/execute', ctx.server.url), {
          method: 'POST',
          headers: {
            'E2b-Sandbox-Id': sbx.sandboxId,
            'E2b-Sandbox-Port': '49999',
            'X-Access-Token': found.envdToken,
            ...(given ? { 'X-Request-ID': given } : {}),
          },
          body: JSON.stringify({ code: '1 / 0' }),
        });
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('transfer-encoding'), 'chunked');
        const id = res.headers.get('x-request-id');
        assert.match(id, ID_RE);
        if (given) assert.equal(id, given);
        assert.match(await res.text(), /ZeroDivisionError/);
        const access = await lineOf(id, (l) => l.path === '/execute');
        assert.equal(access.sandbox_id, sbx.sandboxId);
        assert.ok(access.bytes > 0);
      }
      // an admin's look at every sandbox
      const all = await fetch(new URL('/v2/sandboxes', ctx.server.url), { headers: { 'X-API-Key': SECRETS.adminKey } });
      assert.equal(all.status, 200);
    },
    { envs: { LOGS_SECRET: SECRETS.envValue } },
  ),
);

test('a gateway request: its id reaches the upstream and names its lines; streamed too', T, async () => {
  const base = ctx.server.gatewayUrl.replace(/\/v1$/, '');
  const made = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${SECRETS.masterKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ key_alias: 'logs-test' }),
  });
  assert.equal(made.status, 200);
  found.virtualKey = (await made.json()).key;
  const client = new OpenAI({ baseURL: ctx.server.gatewayUrl, apiKey: found.virtualKey, maxRetries: 0, timeout: 60_000 });

  const marker = `{{LOGS-${hex(4)}}}`;
  upstream.script(marker, [{ code: 'print(6 * 7)' }, { text: 'It is 42.' }]);
  const id = `gw-${hex(8)}`;
  const { data, response } = await client.responses
    .create({ model: 'mock-chat', input: `${marker} compute`, tools: [{ type: 'code_interpreter', container: { type: 'auto' } }] }, { headers: { 'X-Request-ID': id } })
    .withResponse();
  assert.equal(data.status, 'completed');
  assert.equal(response.headers.get('x-request-id'), id);
  const seen = upstream.requestsFor(marker);
  assert.equal(seen.length, 2);
  for (const r of seen) assert.equal(r.headers['x-request-id'], id, 'the upstream call carries the request id');
  const access = await lineOf(id, (l) => l.surface === 'gateway' && l.path === '/v1/responses');
  assert.equal(access.status, 200);
  assert.equal(access.key, keyLabel(found.virtualKey));

  // streamed, without an id: one made, and the upstream gets that one
  const streamMarker = `{{LOGS-STREAM-${hex(4)}}}`;
  upstream.script(streamMarker, [{ text: 'Streamed.' }]);
  const { data: stream, response: streamed } = await client.responses
    .create({ model: 'mock-chat', input: `${streamMarker} hi`, stream: true })
    .withResponse();
  for await (const _ of stream); // eslint-disable-line no-unused-vars
  const streamId = streamed.headers.get('x-request-id');
  assert.match(streamId, ID_RE);
  assert.equal(upstream.requestsFor(streamMarker)[0].headers['x-request-id'], streamId);
  await lineOf(streamId, (l) => l.path === '/v1/responses' && l.status === 200);

  // an error of the gateway's, in OpenAI's shape, with its id
  const bad = await fetch(`${ctx.server.gatewayUrl}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${SECRETS.masterKey}`, 'content-type': 'application/json', 'X-Request-ID': 'gw-bad-1' },
    body: '{"model": 42}',
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get('x-request-id'), 'gw-bad-1');
  await lineOf('gw-bad-1', (l) => l.status === 400 && l.key === 'master');
});

test('the text format: the lines as before, request ids in brackets, no secret', T, async () => {
  const file = path.join(dir, 'text.yaml');
  fs.writeFileSync(file, 'templates:\n  default:\n    pool_size: 0\n');
  const server = await startServer({ config: file, gateway: false, apiKeys: [SECRETS.apiKey], args: ['--admin-key', SECRETS.adminKey] });
  try {
    const url = (p) => new URL(p, server.url);
    const sbx = await Sandbox.create({ ...server.sdkOpts(), envs: { LOGS_SECRET: SECRETS.envValue } });
    try {
      const cmd = await sbx.commands.run('echo "$CMD_SECRET"', { envs: { CMD_SECRET: SECRETS.commandEnvValue } });
      assert.equal(cmd.stdout.trim(), SECRETS.commandEnvValue);
      const res = await fetch(url('/v2/sandboxes'), { headers: { 'X-API-Key': SECRETS.adminKey, 'X-Request-ID': 'text-run-1' } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-request-id'), 'text-run-1');
    } finally {
      await sbx.kill();
    }
  } finally {
    await server.stop();
  }
  const text = server.stderr;
  assert.match(text, /^corral: listening on http:\/\/127\.0\.0\.1:\d+ \(E2B sandbox API, API keys required\)$/m);
  assert.match(text, /^corral: GET \/v2\/sandboxes 200 \[duration_ms=\d+ bytes=\d+ request_id=text-run-1 key=key-[0-9a-f]{12}\]$/m);
  assert.ok(!text.includes('{"time"'), 'no JSON in the text format');
  assertNoSecret(text, 'text');
});
