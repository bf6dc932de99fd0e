// The audit trail of executions (docs/operations.md, "Audit trail"): every
// execution of code or a command recorded with its key, sandbox, code,
// outcome and output, and the admin API that lists, reads and exports the
// records, each key seeing only its own; through the official E2B SDKs and
// the `openai` SDK (a code_interpreter call of a virtual key, with the
// scripted upstream of upstream.mjs), against one `corral serve`.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { Sandbox as OsbSandbox } from '@alibaba-group/opensandbox';
import { Sandbox } from '@e2b/code-interpreter';
import { CommandExitError } from 'e2b';
import OpenAI from 'openai';

import { CI_TOOL, MASTER_KEY, gatewayConfig } from './gateway-helpers.mjs';
import { eventually, randomApiKey, startServer, useServer } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

const T = { timeout: 120_000 };
const KEY_A = randomApiKey();
const KEY_B = randomApiKey();
const ADMIN = randomApiKey();

let upstream = null;
let dir = null;
const ctx = useServer(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-audit-'));
  upstream = await startUpstream();
  const config = path.join(dir, 'corral.yaml');
  fs.writeFileSync(config, gatewayConfig(upstream.url, { dataDir: path.join(dir, 'data') }));
  // a short server-side limit of /execute: a cell that sleeps is a timeout
  return { config, gateway: true, apiKeys: [KEY_A, KEY_B], args: ['--admin-key', ADMIN, '--execute-timeout', '2s'] };
});
after(async () => {
  await upstream?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** GET an audit route of the E2B listener with key; {status, body} (body: JSON, or text). */
async function e2bAudit(key, route) {
  const r = await fetch(`${ctx.server.directUrl}${route}`, { headers: { 'X-API-Key': key } });
  const text = await r.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: r.status, body, headers: r.headers };
}

/** Every record a key lists (following the cursor), newest first. */
async function listAll(key, query = '') {
  const all = [];
  let cursor = null;
  for (;;) {
    const q = new URLSearchParams(query);
    q.set('limit', '2');
    if (cursor) q.set('cursor', cursor);
    const { status, body } = await e2bAudit(key, `/audit/executions?${q}`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.object, 'list');
    assert.ok(body.data.length <= 2);
    all.push(...body.data);
    if (!body.has_more) {
      assert.equal(body.next_cursor, null);
      return all;
    }
    cursor = body.next_cursor;
  }
}

/** What each tenant ran: its sandbox id, by tenant. */
const ran = {};

/** A tenant's executions: code that succeeds, code that raises, a command
 * that exits 3, a cell past the server's limit, a command past its own. */
async function runAs(key, tag) {
  const sbx = await Sandbox.create({ ...ctx.server.sdkOpts({ apiKey: key }) });
  try {
    ran[tag] = sbx.sandboxId;
    const ok = await sbx.runCode(`print("hello-${tag}")\n6 * 7`);
    assert.equal(ok.error, undefined);
    const bad = await sbx.runCode(`raise ValueError("bad-${tag}")`);
    assert.equal(bad.error?.name, 'ValueError');
    const exit = await sbx.commands.run(`echo out-${tag}; echo err-${tag} >&2; exit 3`).then(
      () => assert.fail('no CommandExitError'),
      (e) => e,
    );
    assert.ok(exit instanceof CommandExitError, `${exit}`);
    const slow = await sbx.runCode('import time\ntime.sleep(30)');
    assert.equal(slow.error?.name, 'TimeoutError');
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1_000 }));
    // the SDK may give up on that command before the server ends it at
    // its deadline: its record is waited for before the sandbox goes
    await eventually(async () => (await listAll(key, `sandbox_id=${sbx.sandboxId}`)).length >= 5);
  } finally {
    await sbx.kill();
  }
}

test('each key lists exactly its own executions, with their outcomes, code and output', T, async () => {
  await runAs(KEY_A, 'A');
  await runAs(KEY_B, 'B');
  for (const [key, tag, other] of [
    [KEY_A, 'A', 'B'],
    [KEY_B, 'B', 'A'],
  ]) {
    const mine = await listAll(key);
    assert.equal(mine.length, 5, JSON.stringify(mine.map((r) => [r.kind, r.outcome, r.code])));
    for (const r of mine) {
      assert.equal(r.sandbox_id, ran[tag]);
      assert.equal(r.surface, 'e2b');
      assert.match(r.key, /^sha256:[0-9a-f]{12}$/);
      assert.ok(!JSON.stringify(r).includes(key), 'a record shows no key itself');
      assert.equal(r.template, 'default');
      assert.ok(r.started_at > 0 && r.duration_ms >= 0);
    }
    const oldestFirst = [...mine].reverse();
    const [ok, bad, exit, slow, slowCommand] = oldestFirst;
    assert.deepEqual(
      oldestFirst.map((r) => [r.kind, r.outcome]),
      [
        ['code', 'ok'],
        ['code', 'error'],
        ['command', 'error'],
        ['code', 'timeout'],
        ['command', 'timeout'],
      ],
    );
    assert.equal(ok.code, `print("hello-${tag}")\n6 * 7`);
    assert.equal(ok.language, 'python');
    assert.equal(ok.stdout, `hello-${tag}\n`);
    assert.equal(ok.stdout_bytes, `hello-${tag}\n`.length);
    assert.equal(ok.result_bytes, 2); // "42"
    assert.equal(ok.error_name, null);
    assert.equal(bad.error_name, 'ValueError');
    assert.match(bad.error, new RegExp(`bad-${tag}`));
    assert.match(exit.code, new RegExp(`echo out-${tag}; echo err-${tag} >&2; exit 3`));
    assert.equal(exit.exit_code, 3);
    assert.equal(exit.stdout, `out-${tag}\n`);
    assert.equal(exit.stderr, `err-${tag}\n`);
    assert.equal(exit.stderr_bytes, `err-${tag}\n`.length);
    assert.equal(slow.error_name, 'TimeoutError');
    assert.match(slowCommand.code, /sleep 30/);

    // one record by id; another tenant's is not there
    const one = await e2bAudit(key, `/audit/executions/${ok.id}`);
    assert.equal(one.status, 200);
    // the record whole: a list's page has the count of its images, not them
    const { images, ...rest } = one.body;
    assert.deepEqual(rest, ok);
    assert.deepEqual(images, []);
    assert.equal(ok.images_count, 0);
    const theirs = (await listAll(other === 'A' ? KEY_A : KEY_B))[0];
    const hidden = await e2bAudit(key, `/audit/executions/${theirs.id}`);
    assert.equal(hidden.status, 404);
    assert.equal(hidden.body.code, 404);
    assert.equal(typeof hidden.body.message, 'string');
    // filters
    const errors = await listAll(key, 'outcome=error');
    assert.deepEqual(errors.map((r) => r.id).sort(), [bad.id, exit.id].sort());
    const commands = await listAll(key, `kind=command&sandbox_id=${ran[tag]}`);
    assert.equal(commands.length, 2);
    assert.deepEqual(await listAll(key, `sandbox_id=${ran[other]}`), []);
    assert.deepEqual(await listAll(key, `since=${Date.now() + 60_000}`), []);
  }

  // the admin sees both tenants'; a bad parameter is a 400 in E2B's shape
  const everything = await listAll(ADMIN, 'surface=e2b');
  assert.equal(everything.length, 10);
  assert.deepEqual(new Set(everything.map((r) => r.sandbox_id)), new Set([ran.A, ran.B]));
  const badLimit = await e2bAudit(ADMIN, '/audit/executions?limit=100000');
  assert.equal(badLimit.status, 400);
  assert.equal(badLimit.body.code, 400);
  const badCursor = await e2bAudit(ADMIN, '/audit/executions?cursor=nonsense');
  assert.equal(badCursor.status, 400);
  assert.equal((await e2bAudit('not-a-key', '/audit/executions')).status, 401);

  // export: JSON lines, the key's own
  const exported = await e2bAudit(KEY_A, '/audit/executions/export');
  assert.equal(exported.status, 200);
  assert.match(exported.headers.get('content-type'), /ndjson/);
  const lines = exported.body.trimEnd().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 5);
  assert.ok(lines.every((r) => r.sandbox_id === ran.A));
  const all = await e2bAudit(ADMIN, '/audit/executions/export?kind=code');
  assert.equal(all.body.trimEnd().split('\n').length, 6);

  // an OpenSandbox command, recorded as B's
  const box = await OsbSandbox.create({
    connectionConfig: { domain: new URL(ctx.server.osbUrl).host, protocol: 'http', apiKey: KEY_B, requestTimeoutSeconds: 30 },
    image: 'python:3.12',
    timeoutSeconds: 300,
  });
  try {
    const failed = await box.commands.run('echo osb-out; exit 7');
    assert.equal(failed.exitCode, 7);
  } finally {
    await box.kill();
    await box.close();
  }
  const [osbRecord] = await listAll(KEY_B, 'surface=opensandbox');
  assert.equal(osbRecord.kind, 'command');
  assert.equal(osbRecord.outcome, 'error');
  assert.equal(osbRecord.exit_code, 7);
  assert.equal(osbRecord.code, 'echo osb-out; exit 7');
  assert.equal(osbRecord.stdout, 'osb-out\n');
  assert.equal(osbRecord.sandbox_id, box.id);

  // the same API on OpenSandbox's listener, in its error shape
  const osb = (key, route) =>
    fetch(`${ctx.server.osbUrl}${route}`, { headers: { 'OPEN-SANDBOX-API-KEY': key } }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const viaOsb = await osb(KEY_B, '/v1/audit/executions?limit=10&surface=e2b');
  assert.equal(viaOsb.status, 200);
  assert.equal(viaOsb.body.data.length, 5);
  assert.ok(viaOsb.body.data.every((r) => r.sandbox_id === ran.B));
  const hiddenOsb = await osb(KEY_B, `/v1/audit/executions/${lines[0].id}`);
  assert.equal(hiddenOsb.status, 404);
  assert.equal(hiddenOsb.body.code, 'SANDBOX::NOT_FOUND');
});

test('a gateway code_interpreter call is recorded with the virtual key\'s alias', T, async () => {
  const base = ctx.server.gatewayUrl.replace(/\/v1$/, '');
  const made = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ key_alias: 'audit-team' }),
  }).then((r) => r.json());
  const client = new OpenAI({ baseURL: ctx.server.gatewayUrl, apiKey: made.key, maxRetries: 0 });
  upstream.script('AUDIT-GW', [{ code: 'print("from-gateway")' }, { text: 'done' }]);
  const resp = await client.responses.create(
    { model: 'mock-chat', input: 'AUDIT-GW run it', tools: [CI_TOOL] },
    { headers: { 'x-request-id': 'req-audit-1' } },
  );
  const container = resp.output.find((o) => o.type === 'code_interpreter_call').container_id;

  const get = (key, route) =>
    fetch(`${base}${route}`, { headers: { authorization: `Bearer ${key}` } }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const mine = await get(made.key, '/audit/executions');
  assert.equal(mine.status, 200);
  assert.equal(mine.body.data.length, 1, JSON.stringify(mine.body));
  const [r] = mine.body.data;
  assert.equal(r.key, 'audit-team');
  assert.equal(r.surface, 'gateway');
  assert.equal(r.sandbox_id, container);
  assert.equal(r.kind, 'code');
  assert.equal(r.outcome, 'ok');
  assert.equal(r.code, 'print("from-gateway")');
  assert.equal(r.stdout, 'from-gateway\n');
  assert.equal(r.request_id, 'req-audit-1');
  // the master key sees every record, the sandbox APIs' too
  const master = await get(MASTER_KEY, '/audit/executions?limit=1000');
  assert.ok(master.body.data.some((x) => x.id === r.id));
  assert.ok(master.body.data.some((x) => x.surface === 'e2b'));
  // another tenant's record is a 404 in OpenAI's shape
  const theirs = master.body.data.find((x) => x.surface === 'e2b');
  const hidden = await get(made.key, `/audit/executions/${theirs.id}`);
  assert.equal(hidden.status, 404);
  assert.equal(typeof hidden.body.error.message, 'string');
  assert.equal(hidden.body.error.type, 'invalid_request_error');
  // a virtual key may not purge
  const purge = await fetch(`${base}/audit/purge`, { method: 'POST', headers: { authorization: `Bearer ${made.key}` } });
  assert.equal(purge.status, 403);
});

test('retention purges the records older than it keeps', T, async () => {
  const before = await listAll(ADMIN);
  const old = before[before.length - 1];
  // the oldest record made 40 days old, as the clock would
  const db = path.join(dir, 'data', 'gateway.db');
  execFileSync('/usr/bin/python3', [
    '-c',
    'import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=30); ' +
      'c.execute("UPDATE executions SET started_at = started_at - 40 * 86400000 WHERE id = ?", (sys.argv[2],)); c.commit()',
    db,
    old.id,
  ]);
  const refused = await fetch(`${ctx.server.directUrl}/audit/purge`, { method: 'POST', headers: { 'X-API-Key': KEY_A } });
  assert.equal(refused.status, 403);
  const purged = await fetch(`${ctx.server.directUrl}/audit/purge`, { method: 'POST', headers: { 'X-API-Key': ADMIN } }).then((r) => r.json());
  assert.deepEqual(purged, { purged: 1, retention_s: 30 * 86400 });
  const left = await listAll(ADMIN);
  assert.equal(left.length, before.length - 1);
  assert.ok(!left.some((r) => r.id === old.id));
  assert.equal((await e2bAudit(ADMIN, `/audit/executions/${old.id}`)).status, 404);
});

test('a gateway without a master key, on a server whose sandbox APIs have keys, shows the trail ' +
  'and the console to an admin key alone', T, async () => {
  const own = path.join(dir, 'no-master.yaml');
  fs.writeFileSync(own, `templates:\n  default:\n    pool_size: 0\ngateway:\n  data_dir: ${path.join(dir, 'data-no-master')}\n`);
  const server = await startServer({ config: own, gateway: true, apiKeys: [KEY_A], args: ['--admin-key', ADMIN] });
  try {
    const base = server.gatewayUrl.replace(/\/v1$/, '');
    const as = (key, route) => fetch(`${base}${route}`, { headers: key ? { authorization: `Bearer ${key}` } : {} });
    for (const key of [null, KEY_A, 'sk-anything']) {
      const r = await as(key, '/audit/executions');
      assert.equal(r.status, 401, `the trail to ${key ?? 'no key'}`);
      assert.equal((await r.json()).error.code, 'invalid_api_key');
      assert.equal((await as(key, '/ui/api/executions')).status, 401, `the console to ${key ?? 'no key'}`);
      assert.equal((await (await as(key, '/ui/api/session')).json()).role, null);
    }
    const admin = await as(ADMIN, '/audit/executions');
    assert.equal(admin.status, 200);
    assert.equal((await admin.json()).object, 'list');
    assert.equal((await (await as(ADMIN, '/ui/api/session')).json()).role, 'admin');
  } finally {
    await server.stop();
  }
});
