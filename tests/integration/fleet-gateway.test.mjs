// The gateway on a fleet: two fronts (`corral serve --role front`, the
// OpenAI-compatible gateway on each, one PostgreSQL store that this test
// starts) before two nodes; the official `openai` SDK and the scripted
// upstream of upstream.mjs:
//   - a code_interpreter conversation through one front goes on through the
//     other, in the same container and sandbox (on a node);
//   - one front stopped: the other serves the same responses, containers
//     and keys; everything restarted: the gateway's state is intact;
//   - PostgreSQL stopped mid-way: what needs the store is a 503 saying so,
//     sandboxes keep running, the fronts recover by themselves once it is
//     back, and nothing acknowledged is lost; a front that cannot reach the
//     store at start-up says so and exits.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import OpenAI, { APIError } from 'openai';

import { CI_TOOL, MASTER_KEY, ciCalls, gatewayConfig } from './gateway-helpers.mjs';
import {
  acquireHostLock,
  assertNothingLeft,
  eventually,
  hostBaseline,
  randomApiKey,
  startServer,
} from './harness.mjs';
import { usePostgres } from './postgres.mjs';
import { startUpstream } from './upstream.mjs';

const KEY = randomApiKey();
const FLEET_KEY = `fleet-${randomApiKey()}`;
const T = { timeout: 180_000 };
const MODEL = 'mock-chat';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-fleet-gw-'));
const pg = usePostgres();

const fleet = { nodes: [], fronts: [], upstream: null, seq: 0 };
let release = null;
let baseline = null;

const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? '(no stdout)';
const marker = (name) => `{{fleet-${name}#${++fleet.seq}}}`;
const client = (front, apiKey = MASTER_KEY) =>
  new OpenAI({ baseURL: front.gatewayUrl, apiKey, maxRetries: 0, timeout: 120_000 });

async function startNodes() {
  const config = path.join(dir, 'node.yaml');
  fs.writeFileSync(config, `fleet:\n  key: ${FLEET_KEY}\n  drain_grace: 0\ntemplates:\n  default:\n    preload: []\n`);
  fleet.nodes = [];
  for (let i = 0; i < 2; i++) {
    const state = fs.mkdtempSync(path.join(dir, `node${i}-`));
    fleet.nodes.push(await startServer({ apiKeys: [KEY], config, gateway: false,
      args: ['--role', 'node', '--state-dir', state, '--disk-dir', 'memory'] }));
  }
}

function frontConfig(i) {
  const file = path.join(dir, `front${i}.yaml`);
  const nodes = fleet.nodes.map((n) => `127.0.0.1:${n.port}`).join(', ');
  fs.writeFileSync(file, gatewayConfig(fleet.upstream.url, {
    dataDir: path.join(dir, `front${i}-data`),
    gatewayLines: [`store: "${pg.url}"`],
    topLines: ['fleet:', '  role: front', `  key: ${FLEET_KEY}`, '  probe_interval: 0.2s', `  nodes: [${nodes}]`],
  }));
  return file;
}

async function startFronts() {
  fleet.fronts = [];
  for (let i = 0; i < 2; i++) {
    const front = await startServer({ config: frontConfig(i), gateway: true });
    assert.ok(await eventually(async () => (await fetch(`${front.url}/readyz`)).status === 200, { timeoutMs: 60_000 }),
      'a front is not ready');
    fleet.fronts.push(front);
  }
}

async function stopAll(servers) {
  const problems = [];
  for (const s of servers) {
    if (s.exitStatus) continue;
    try {
      await s.stop();
    } catch (err) {
      problems.push(err.message);
    }
  }
  return problems;
}

before(async () => {
  release = await acquireHostLock();
  baseline = hostBaseline();
  pg.init();
  fleet.upstream = await startUpstream();
  await startNodes();
  await startFronts();
});

after(async () => {
  const problems = [];
  try {
    problems.push(...(await stopAll([...fleet.fronts, ...fleet.nodes])));
    await fleet.upstream?.close();
    pg.remove();
    try {
      await assertNothingLeft(baseline);
    } catch (err) {
      problems.push(err.message);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  } finally {
    release?.();
  }
  if (problems.length) throw new Error(problems.join('\n'));
});

/** The sandboxes the fronts' gateways made, as the nodes list them. */
async function gatewaySandboxes() {
  const ids = [];
  for (const node of fleet.nodes) {
    if (node.exitStatus) continue;
    const res = await fetch(`${node.url}/v2/sandboxes`, { headers: { 'X-API-Key': FLEET_KEY } });
    assert.equal(res.status, 200);
    ids.push(...(await res.json()).map((s) => s.sandboxID));
  }
  return ids;
}

/** r1 through one front sets a variable in its container; r2 through the other reads it. */
async function conversation(first, second) {
  const a = marker('set');
  fleet.upstream.script(a, [{ code: 'memo = "heron-" + str(6 * 7)' }, { text: 'Noted.' }]);
  const r1 = await client(first).responses.create({ model: MODEL, input: `${a} Remember.`, tools: [CI_TOOL] });
  assert.equal(r1.status, 'completed', JSON.stringify(r1.error));
  const b = marker('get');
  fleet.upstream.script(b, [{ code: 'print(memo)' }, (req, ctx) => ({ text: `memo is ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const r2 = await client(second).responses.create({
    model: MODEL, input: `${b} What is the memo?`, tools: [CI_TOOL], previous_response_id: r1.id });
  assert.equal(r2.status, 'completed', JSON.stringify(r2.error));
  assert.equal(r2.output_text, 'memo is heron-42', 'the second front reached the same sandbox');
  assert.equal(ciCalls(r2)[0].container_id, ciCalls(r1)[0].container_id);
  return { r1, r2, container: ciCalls(r1)[0].container_id };
}

test('a conversation through one front goes on through the other, in the same sandbox on a node', T, async () => {
  const [a, b] = fleet.fronts;
  const before = await gatewaySandboxes();
  const { container } = await conversation(a, b);
  const made = (await gatewaySandboxes()).filter((id) => !before.includes(id));
  assert.equal(made.length, 1, 'one sandbox, made on a node with the fleet key');
  const tags = fleet.nodes.map((n) => /tag ([0-9a-f]{8})/.exec(n.stderr)[1]);
  assert.ok(tags.includes(made[0].slice(0, 8)), `${made[0]} is on no node`);
  const listed = await client(b).containers.list();
  assert.ok(listed.data.some((c) => c.id === container), 'the other front lists the container');
});

test('two fronts that start a container\'s sandbox at once end with one sandbox, shared', T, async () => {
  const [a, b] = fleet.fronts;
  const container = await client(a).containers.create({ name: 'race' });
  const tool = { type: 'code_interpreter', container: container.id };
  const before = await gatewaySandboxes();
  try {
    // both fronts find no sandbox recorded and make one: the first recorded
    // is the container's, the other goes and its code runs in the first
    await Promise.all([a, b].map(async (front, i) => {
      const m = marker(`race-${i}`);
      fleet.upstream.script(m, [{ code: `v_${i} = ${i}` }, { text: 'set' }]);
      const r = await client(front).responses.create({ model: MODEL, input: `${m} set`, tools: [tool] });
      assert.equal(r.status, 'completed', JSON.stringify(r.error));
      assert.equal(ciCalls(r)[0].container_id, container.id);
    }));
    for (const front of [a, b]) {
      const m = marker('race-both');
      fleet.upstream.script(m, [{ code: "print(sorted(k for k in globals() if k.startswith('v_')))" },
        (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) })]);
      const r = await client(front).responses.create({ model: MODEL, input: `${m} which?`, tools: [tool] });
      assert.equal(r.output_text, "['v_0', 'v_1']", 'the two fronts ran in different sandboxes');
    }
    const made = (await gatewaySandboxes()).filter((id) => !before.includes(id));
    assert.equal(made.length, 1, `sandboxes made for one container: ${made.join(', ')}`);
  } finally {
    await client(a).containers.delete(container.id);
  }
});

test('one front stopped, the other serves its responses, containers and keys; all restarted, the state is intact', T, async () => {
  const [a, b] = fleet.fronts;
  const { r1, container } = await conversation(a, a);
  const base = a.gatewayUrl.replace(/\/v1$/, '');
  const made = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ key_alias: 'fleet-team' }),
  });
  const key = (await made.json()).key;
  assert.ok(key);
  await a.stop();

  assert.equal((await client(b).responses.retrieve(r1.id)).id, r1.id);
  assert.equal((await client(b).containers.retrieve(container)).id, container);
  const c = marker('after-a');
  fleet.upstream.script(c, [{ code: 'print(memo)' }, (req, ctx) => ({ text: `still ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const r3 = await client(b).responses.create({ model: MODEL, input: `${c} And now?`, tools: [CI_TOOL], previous_response_id: r1.id });
  assert.equal(r3.output_text, 'still heron-42');
  const d = marker('key');
  fleet.upstream.script(d, [{ text: 'hello team' }]);
  assert.equal((await client(b, key).responses.create({ model: MODEL, input: `${d} hi` })).output_text, 'hello team');

  // everything stops and starts again
  const problems = await stopAll([b, ...fleet.nodes]);
  assert.deepEqual(problems, []);
  await startNodes();
  await startFronts();
  const [a2, b2] = fleet.fronts;
  assert.equal((await client(a2).responses.retrieve(r1.id)).id, r1.id);
  assert.equal((await client(b2).containers.retrieve(container)).id, container);
  const e = marker('restarted');
  fleet.upstream.script(e, [{ text: 'the team is back' }]);
  assert.equal((await client(b2, key).responses.create({ model: MODEL, input: `${e} hi` })).output_text, 'the team is back');
  // the container's sandbox went with its node: the next call starts another
  const f = marker('again');
  fleet.upstream.script(f, [{ code: 'print(6 * 7)' }, (req, ctx) => ({ text: `now ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const r4 = await client(a2).responses.create({ model: MODEL, input: `${f} go`, tools: [CI_TOOL], previous_response_id: r1.id });
  assert.equal(r4.output_text, 'now 42');
  assert.equal(ciCalls(r4)[0].container_id, container);
});

test('PostgreSQL stopped: 503 saying so, sandboxes run on; started again: the fronts recover, nothing lost', T, async () => {
  const [a, b] = fleet.fronts;
  const m = marker('kept');
  fleet.upstream.script(m, [{ text: 'kept before the outage' }]);
  const kept = await client(a).responses.create({ model: MODEL, input: `${m} keep this` });
  const sbx = await Sandbox.create({ apiUrl: b.url, sandboxUrl: b.url, apiKey: KEY });
  try {
    await sbx.runCode('z = 5');
    pg.stop();
    for (const front of [a, b]) {
      const err = await client(front).responses.retrieve(kept.id).then(() => null, (e) => e);
      assert.ok(err instanceof APIError, `expected an APIError, got ${err}`);
      assert.equal(err.status, 503);
      assert.equal(err.code, 'service_unavailable');
      assert.match(err.message, /the store is unreachable/);
    }
    // the sandboxes need no store
    assert.equal((await sbx.runCode('z * 2')).text, '10');
    const other = await Sandbox.create({ apiUrl: a.url, sandboxUrl: a.url, apiKey: KEY });
    assert.equal((await other.runCode('1 + 1')).text, '2');
    await other.kill();

    pg.start();
    for (const front of [a, b]) {
      const back = await eventually(() => client(front).responses.retrieve(kept.id).catch(() => null));
      assert.ok(back, 'a front did not recover once the store came back');
      assert.equal(back.output_text, 'kept before the outage');
    }
  } finally {
    await sbx.kill();
  }

  // a front that cannot reach the store at start-up says so and exits
  pg.stop();
  try {
    await assert.rejects(startServer({ config: frontConfig(9), gateway: true }),
      /cannot open response store postgresql:\/\/corral@[^\n]*the store is unreachable/);
  } finally {
    pg.start();
  }
});
