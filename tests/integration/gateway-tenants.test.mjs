// Virtual keys (tenants) of the gateway: made, listed, updated and revoked through
// LiteLLM's admin endpoints with the master key, each key seeing only its
// own containers, files and responses, with its model allow-list, rate limit
// and container limit; through the official `openai` SDK against
// `corral serve`, with the scripted upstream of upstream.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI, { toFile } from 'openai';

import { MASTER_KEY, useGateway } from './gateway-helpers.mjs';

const gw = useGateway();
const T = { timeout: 120_000 };

async function admin(method, path, body) {
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, body: await r.json(), headers: r.headers };
}

const clientOf = (key) => new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: key, maxRetries: 0 });

test('keys: made, listed, limited, and each sees only its own objects', T, async () => {
  const a = await admin('POST', '/key/generate', { key_alias: 'team-a' });
  assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.match(a.body.key, /^sk-[0-9a-f]{48}$/);
  assert.match(a.body.token, /^[0-9a-f]{64}$/);
  const b = await admin('POST', '/key/generate', { key_alias: 'team-b', models: ['mock-responses'], rpm_limit: 4, max_containers: 1 });
  assert.equal(b.status, 200);
  const list = await admin('GET', '/key/list');
  const tokens = list.body.keys.map((k) => k.token);
  assert.ok(tokens.includes(a.body.token) && tokens.includes(b.body.token));
  assert.ok(!JSON.stringify(list.body).includes(a.body.key), 'the list shows no key itself');

  const A = clientOf(a.body.key);
  const B = clientOf(b.body.key);
  // a virtual key cannot use the admin endpoints
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  assert.equal((await fetch(`${base}/key/list`, { headers: { authorization: `Bearer ${a.body.key}` } })).status, 401);

  // A's objects are A's
  const box = await A.containers.create({ name: 'a-box' });
  const f = await A.files.create({ file: await toFile(Buffer.from('1,2\n'), 'a.csv'), purpose: 'user_data' });
  const m = gw.marker('tenant-a');
  gw.upstream.script(m, [{ text: 'for A' }]);
  const resp = await A.responses.create({ model: 'mock-chat', input: `${m} hi` });
  await assert.rejects(B.containers.retrieve(box.id), (e) => e.status === 404);
  await assert.rejects(B.files.retrieve(f.id), (e) => e.status === 404);
  await assert.rejects(B.responses.retrieve(resp.id), (e) => e.status === 404);
  const seen = [];
  for await (const x of await B.containers.list()) seen.push(x.id);
  assert.ok(!seen.includes(box.id));
  assert.equal((await A.containers.retrieve(box.id)).id, box.id);

  // B: its model allow-list, its container limit, its rate limit (4 a minute;
  // the three retrieves and the list above took them)
  const c = gw.marker('tenant-b');
  gw.upstream.script(c, [{ text: 'for B' }]);
  const other = await admin('POST', '/key/generate', { models: ['mock-responses'], max_containers: 1, rpm_limit: 100 });
  const B2 = clientOf(other.body.key);
  await assert.rejects(B2.responses.create({ model: 'mock-chat', input: `${c} hi` }), (e) => e.status === 401 && /not allowed/.test(e.message));
  assert.equal((await B2.responses.create({ model: 'mock-responses', input: `${c} hi` })).output_text, 'for B');
  await B2.containers.create({ name: 'one' });
  await assert.rejects(B2.containers.create({ name: 'two' }), (e) => e.status === 429 && e.code === 'container_limit_reached');
  // /key/update changes a key in use: what it is given, at once
  const up = await admin('POST', '/key/update', { key: other.body.key, models: null, max_containers: 2 });
  assert.equal(up.status, 200, JSON.stringify(up.body));
  assert.deepEqual(up.body.info.models, []);
  assert.equal(up.body.info.rpm_limit, 100);
  await B2.containers.create({ name: 'two' });
  const c2 = gw.marker('tenant-b2');
  gw.upstream.script(c2, [{ text: 'now allowed' }]);
  assert.equal((await B2.responses.create({ model: 'mock-chat', input: `${c2} hi` })).output_text, 'now allowed');
  const limited = await assert.rejects(B.containers.list(), (e) => {
    assert.equal(e.status, 429);
    assert.equal(e.code, 'rate_limit_exceeded');
    assert.ok(Number(e.headers?.get?.('retry-after') ?? e.headers?.['retry-after']) >= 1);
    return true;
  });
  void limited;

  // usage is counted per key
  const info = await admin('GET', `/key/info?key=${other.body.key}`);
  assert.equal(info.body.key, other.body.token);
  assert.ok(info.body.info.usage[0].requests >= 1, JSON.stringify(info.body));

  // a revoked key is refused
  const del = await admin('POST', '/key/delete', { keys: [a.body.key] });
  assert.deepEqual(del.body.deleted_keys, [a.body.key]);
  await assert.rejects(A.containers.list(), (e) => e.status === 401);
});

test("a file's bytes go to the gateway's disk only for a key it takes: another one is refused before they are kept", T, async () => {
  const bytes = Buffer.alloc(12 << 20, 7); // past --max-body (10 MiB), within gateway.file_max
  const upload = (key) => {
    const form = new FormData();
    form.append('purpose', 'assistants');
    form.append('file', new Blob([bytes]), 'big.bin');
    return fetch(`${gw.server.gatewayUrl}/files`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
  };
  const refused = await upload('sk-not-a-key');
  assert.equal(refused.status, 401);
  const body = await refused.json();
  assert.equal(body.error.code, 'invalid_api_key', JSON.stringify(body));
  const kept = await upload(MASTER_KEY);
  assert.equal(kept.status, 200);
  const file = await kept.json();
  assert.equal(file.bytes, bytes.length);
  await gw.client.files.delete(file.id);
});
