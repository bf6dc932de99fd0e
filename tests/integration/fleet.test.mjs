// A corral fleet on loopback: three nodes (`corral serve --role node`, each
// its own state folder and ports) and two fronts (`--role front`, the nodes
// in fleet.nodes), driven through the fronts with the official SDKs
// (`@e2b/code-interpreter`, `e2b`, `@alibaba-group/opensandbox`):
//   - sandboxes spread over the nodes, and work through either front as on
//     one machine: state, commands with streamed output, files, lists;
//   - kill -9 of a node in the middle of executions: its sandboxes answer
//     "lost with its node", the others carry on, new creates go elsewhere;
//   - SIGTERM of a node: it drains (not ready, no new sandboxes) and exits
//     once its last sandbox ends;
//   - a node that answers garbage or cuts a stream costs its request a 502
//     or a cut stream, never the front;
//   - a key's ceiling (--max-sandboxes-per-key) holds on the whole fleet,
//     across both APIs and both fronts, not on each node.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as OsbSandbox } from '@alibaba-group/opensandbox';

import {
  acquireHostLock,
  assertNothingLeft,
  eventually,
  freePort,
  hostBaseline,
  randomApiKey,
  startServer,
} from './harness.mjs';

const KEY = randomApiKey();
const KEY2 = randomApiKey(); // the ceiling's test only
const CEILING = 16; // per key, on the whole fleet
const FLEET_KEY = `fleet-${randomApiKey()}`;
const BAD_TAG = 'badbad00';
const T = { timeout: 180_000 };

const fleet = { nodes: [], fronts: [], tags: [], dirs: [], bad: null, badPort: 0 };
let release = null;
let baseline = null;

function writeConfig(dir, name, text) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

/** A fake node: a right state (not ready: no creates), then garbage. */
function startBadNode() {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      if (req.url === '/fleet/v1/node') {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ tag: BAD_TAG, ready: false, draining: false, sandboxes: 1,
          memory_promised: 0, memory_capacity: 1 << 30, opensandbox_port: 0 }));
      } else if (req.url === '/execute') {
        res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
        res.write('{"type":"number_of_executions","execution_count":1}\n');
        setImmediate(() => res.socket.destroy()); // cut mid-stream
      } else {
        req.socket.end('220 not a web server\r\n\r\n'); // garbage
      }
    });
    srv.listen(0, '127.0.0.1', () => resolve(srv));
  });
}

before(async () => {
  release = await acquireHostLock();
  baseline = hostBaseline();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-fleet-'));
  fleet.dir = dir;
  const nodeConfig = writeConfig(dir, 'node.yaml',
    `fleet:\n  key: ${FLEET_KEY}\n  drain_grace: 8s\ntemplates:\n  default:\n    preload: []\n`);
  for (let i = 0; i < 3; i++) {
    const state = fs.mkdtempSync(path.join(dir, `node${i}-`));
    fleet.dirs.push(state);
    const node = await startServer({ apiKeys: [KEY, KEY2], config: nodeConfig, gateway: false,
      args: ['--role', 'node', '--state-dir', state, '--disk-dir', 'memory',
        '--max-sandboxes-per-key', String(CEILING)] });
    const tag = /tag ([0-9a-f]{8})/.exec(node.stderr)?.[1];
    assert.ok(tag, `node ${i} said no tag: ${node.stderr}`);
    fleet.nodes.push(node);
    fleet.tags.push(tag);
  }
  fleet.bad = await startBadNode();
  const badAddr = `127.0.0.1:${fleet.bad.address().port}`;
  const nodes = [...fleet.nodes.map((n) => `127.0.0.1:${n.port}`), badAddr];
  const frontConfig = writeConfig(dir, 'front.yaml',
    `fleet:\n  role: front\n  key: ${FLEET_KEY}\n  probe_interval: 0.2s\n  nodes: [${nodes.join(', ')}]\n`);
  for (let i = 0; i < 2; i++) {
    const front = await startServer({ config: frontConfig, gateway: false });
    fleet.fronts.push(front);
  }
  // every node up in each front's view
  for (const front of fleet.fronts) {
    const up = await eventually(async () => (await frontNodes(front)).filter((n) => n.state === 'up' &&
      (n.ready || n.tag === BAD_TAG)).length === 4, { timeoutMs: 60_000 });
    assert.ok(up, `front ${front.port} does not see its nodes up: ${JSON.stringify(await frontNodes(front))}`);
  }
});

after(async () => {
  const problems = [];
  try {
    for (const server of [...fleet.fronts, ...fleet.nodes]) {
      if (server.exitStatus) continue; // stopped by a test
      try {
        await server.stop();
      } catch (err) {
        problems.push(err.message);
      }
    }
    await new Promise((resolve) => (fleet.bad ? fleet.bad.close(resolve) : resolve()));
    for (const dir of fleet.dirs) {
      const slots = path.join(dir, 'slots');
      const left = fs.existsSync(slots) ? fs.readdirSync(slots) : [];
      if (left.length) problems.push(`slots left in ${slots}: ${left.join(', ')}`);
    }
    try {
      await assertNothingLeft(baseline);
    } catch (err) {
      problems.push(err.message);
    }
    fs.rmSync(fleet.dir, { recursive: true, force: true });
  } finally {
    release?.();
  }
  if (problems.length) throw new Error(problems.join('\n'));
});

async function frontNodes(front) {
  const res = await fetch(`${front.url}/fleet/v1/nodes`, { headers: { 'X-Corral-Fleet-Key': FLEET_KEY } });
  return (await res.json()).nodes;
}

/** Until the front's view of its ready nodes (their last state, on which
 * placement stands) holds none of the sandboxes earlier tests killed. */
async function settled(front) {
  for (;;) {
    const nodes = (await frontNodes(front)).filter((n) => fleet.tags.includes(n.tag));
    if (nodes.every((n) => n.state === 'up' && n.ready && n.sandboxes === 0 && n.memory_promised === 0)) return;
    await new Promise((resolve) => setTimeout(resolve, 50)); // the front's next probe of each node
  }
}

const opts = (front, extra = {}) => ({ apiUrl: front.url, sandboxUrl: front.url, apiKey: KEY, ...extra });
const tagOf = (id) => id.slice(0, 8);
const osbConfig = (front) => ({ domain: `127.0.0.1:${front.osbPort}`, protocol: 'http', apiKey: KEY,
  requestTimeoutSeconds: 30 });

test('sandboxes spread over the nodes and work through either front as on one machine', T, async () => {
  const [a, b] = fleet.fronts;
  const made = [];
  try {
    for (let i = 0; i < 6; i++) made.push(await Sandbox.create(opts(a)));
    const tags = new Set(made.map((s) => tagOf(s.sandboxId)));
    assert.deepEqual([...tags].sort(), [...fleet.tags].sort(), 'the six sandboxes are on every node');

    // state through A, then through B
    const sbx = made[0];
    await sbx.runCode('x = 41');
    const viaB = await Sandbox.connect(sbx.sandboxId, opts(b));
    assert.equal((await viaB.runCode('x + 1')).text, '42');

    // a command's output streams through the front: "ready" arrives while
    // the command still waits for a file that is written only after it
    const seen = [];
    const handle = await viaB.commands.run(
      'echo ready; while [ ! -f /tmp/go ]; do sleep 0.05; done; echo done',
      { background: true, onStdout: (line) => seen.push(line) });
    assert.ok(await eventually(() => seen.join('').includes('ready'), { timeoutMs: 20_000 }),
      'no output came through the front while the command ran');
    await sbx.files.write('/tmp/go', 'go');
    const result = await handle.wait();
    assert.equal(result.exitCode, 0);
    assert.match(seen.join(''), /ready[\s\S]*done/);

    // files written through one front are read through the other
    await viaB.files.write('/home/user/data.csv', 'a,b\n1,2\n');
    assert.equal(await sbx.files.read('/home/user/data.csv'), 'a,b\n1,2\n');
    assert.equal((await sbx.runCode("open('/home/user/data.csv').read().count('\\n')")).text, '2');

    // each front lists the sandboxes of every node
    for (const front of [a, b]) {
      const listed = (await Sandbox.list(opts(front)).nextItems()).map((s) => s.sandboxId);
      for (const s of made) assert.ok(listed.includes(s.sandboxId), `${s.sandboxId} not listed via ${front.port}`);
      // paged one at a time, every node's sandboxes come once each, in order
      const paged = [];
      for (const pages = Sandbox.list({ ...opts(front), limit: 1 }); pages.hasNext;)
        paged.push(...(await pages.nextItems()));
      assert.deepEqual(paged.map((s) => s.sandboxId).sort(), [...listed].sort());
      const starts = paged.map((s) => s.startedAt.getTime());
      assert.deepEqual(starts, [...starts].sort((x, y) => y - x), 'newest first');
    }

    // OpenSandbox's SDK through a front
    const osb = await OsbSandbox.create({ connectionConfig: osbConfig(b), image: 'python:3.12', timeoutSeconds: 300 });
    try {
      assert.ok(fleet.tags.includes(tagOf(osb.id)), `${osb.id} is on no node of the fleet`);
      const run = await osb.commands.run('echo fleet-$((6*7))');
      assert.equal(run.logs.stdout.map((m) => m.text).join('').trim(), 'fleet-42');
      await osb.files.writeFiles([{ path: '/tmp/o.txt', data: 'osb' }]);
      assert.equal(await osb.files.readFile('/tmp/o.txt'), 'osb');
      // OpenSandbox's list through the other front: every node's, paginated
      // again over the whole, newest first
      const page = await fetch(`${a.osbUrl}/v1/sandboxes?pageSize=1`, { headers: { 'OPEN-SANDBOX-API-KEY': KEY } });
      assert.equal(page.status, 200);
      const listed = await page.json();
      assert.equal(listed.items.length, 1);
      assert.equal(listed.items[0].id, osb.id);
      assert.equal(listed.pagination.pageSize, 1);
      assert.equal(listed.pagination.hasNextPage, listed.pagination.totalItems > 1);
      const viaA = await OsbSandbox.connect({ sandboxId: osb.id, connectionConfig: osbConfig(a) });
      try {
        assert.equal((await viaA.getInfo()).status.state, 'Running');
      } finally {
        await viaA.close();
      }
    } finally {
      await osb.kill();
      await osb.close();
    }
  } finally {
    await Promise.allSettled(made.map((s) => s.kill()));
  }
});

test('a key holds at most its ceiling of sandboxes on the whole fleet, not on each node', T, async () => {
  const [a, b] = fleet.fronts;
  const e2b = (front) => opts(front, { apiKey: KEY2 });
  const osb = (front) => ({ ...osbConfig(front), apiKey: KEY2 });
  const made = [];
  const osbs = [];
  const refusal = /holds its most sandboxes at once \(16, on the whole fleet/;
  try {
    // more creates at once than the ceiling, through one front: exactly the
    // ceiling is let through, spread over the nodes
    const tries = await Promise.allSettled(Array.from({ length: CEILING + 4 },
      () => Sandbox.create(e2b(a))));
    for (const t of tries) if (t.status === 'fulfilled') made.push(t.value);
    assert.equal(made.length, CEILING, `${made.length} of ${CEILING + 4} creates were let through`);
    assert.ok(new Set(made.map((s) => tagOf(s.sandboxId))).size > 1, 'the sandboxes are all on one node');
    for (const t of tries.filter((r) => r.status === 'rejected')) {
      assert.equal(t.reason.name, 'RateLimitError');
      assert.match(t.reason.message, refusal);
    }
    // through the other front, and through OpenSandbox's API: the same ceiling
    await assert.rejects(Sandbox.create(e2b(b)), refusal);
    await assert.rejects(OsbSandbox.create({ connectionConfig: osb(b), image: 'python:3.12' }),
      (err) => { assert.match(String(err.message ?? err), /holds its most sandboxes at once/); return true; });
    const res = await fetch(`${b.osbUrl}/v1/sandboxes`, {
      method: 'POST', headers: { 'OPEN-SANDBOX-API-KEY': KEY2, 'Content-Type': 'application/json' },
      body: JSON.stringify({ image: { uri: 'python:3.12' }, timeout: 60, resourceLimits: {}, entrypoint: ['true'] }),
    });
    assert.equal(res.status, 429);
    assert.equal((await res.json()).code, 'SANDBOX::QUOTA_EXCEEDED');
    // another key is not held back
    const other = await Sandbox.create(opts(b));
    await other.kill();
    // a sandbox killed gives its room back, to either API
    await made.pop().kill();
    const o = await OsbSandbox.create({ connectionConfig: osb(b), image: 'python:3.12', timeoutSeconds: 120 });
    osbs.push(o);
    assert.ok(fleet.tags.includes(tagOf(o.id)));
    await assert.rejects(Sandbox.create(e2b(a)), refusal);
  } finally {
    await Promise.allSettled(made.map((s) => s.kill()));
    await Promise.allSettled(osbs.map(async (o) => { await o.kill(); await o.close(); }));
  }
});

test('a node that answers garbage or cuts a stream costs its request an error, never the front', T, async () => {
  const [a] = fleet.fronts;
  const id = `${BAD_TAG}${'0'.repeat(24)}`;
  const garbage = await fetch(`${a.url}/sandboxes/${id}`, { headers: { 'X-API-Key': KEY } });
  assert.equal(garbage.status, 502);
  const body = await garbage.json();
  assert.equal(body.code, 502);
  assert.match(body.message, /not HTTP\/1\.1|closed the connection/);

  const cut = await fetch(`${a.url}/execute`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json' },
    body: JSON.stringify({ code: '1' }),
  });
  assert.equal(cut.status, 200);
  await assert.rejects(cut.text(), 'a stream the node cut is cut for the client, not ended as if whole');

  // the front goes on
  const ok = await fetch(`${a.url}/readyz`);
  assert.equal(ok.status, 200);
  await Sandbox.create(opts(a)).then((s) => s.kill());
});

test('kill -9 of a node: its sandboxes are lost, the others carry on, creates go elsewhere', T, async () => {
  const [a, b] = fleet.fronts;
  // placement spreads by the nodes' room as the front last saw it: the
  // sandboxes of the tests before must be gone from that view first
  await settled(a);
  const made = [];
  for (let i = 0; i < 6; i++) made.push(await Sandbox.create(opts(a)));
  const victim = fleet.nodes[1];
  const victimTag = fleet.tags[1];
  assert.ok(made.some((s) => tagOf(s.sandboxId) === victimTag), 'no sandbox on the node to kill');
  try {
    // executions on every sandbox until each has run 3 more after the kill
    let killed = false;
    const loops = made.map(async (s) => {
      let after = 0;
      for (;;) {
        try {
          // (the SDK leaves its request timer running when an answer is an
          // error: a short one keeps the file from lingering after the tests)
          assert.equal((await s.runCode('6 * 7', { requestTimeoutMs: 20_000 })).text, '42');
        } catch (err) {
          return { s, err };
        }
        if (killed && ++after >= 3) return { s, err: null };
      }
    });
    await victim.kill(); // SIGKILL
    killed = true;
    const outcomes = await Promise.all(loops);
    for (const { s, err } of outcomes) {
      if (tagOf(s.sandboxId) === victimTag) assert.ok(err, `${s.sandboxId} ran code after its node was killed`);
      else assert.equal(err, null, `${s.sandboxId} failed: ${err?.message}`);
    }
    // its sandboxes answer "lost", through either front
    for (const front of [a, b]) {
      const lost = made.find((s) => tagOf(s.sandboxId) === victimTag);
      const res = await eventually(async () => {
        const r = await fetch(`${front.url}/sandboxes/${lost.sandboxId}`, { headers: { 'X-API-Key': KEY } });
        return r.status === 404 ? r.json() : null;
      });
      assert.ok(res, 'the lost sandbox does not answer 404');
      assert.match(res.message, new RegExp(`was lost with its node 127\\.0\\.0\\.1:${victim.port}`));
    }
    // new sandboxes land on the nodes left
    for (let i = 0; i < 3; i++) {
      const s = await Sandbox.create(opts(b));
      made.push(s);
      assert.notEqual(tagOf(s.sandboxId), victimTag);
      assert.equal((await s.runCode('1 + 1')).text, '2');
    }
  } finally {
    await Promise.allSettled(made.filter((s) => tagOf(s.sandboxId) !== victimTag).map((s) => s.kill()));
  }
  // a node started again on its state folder (as its pod would be) cleans
  // what the killed one left: its sandboxes' cgroups
  const lostIds = made.filter((s) => tagOf(s.sandboxId) === victimTag).map((s) => s.sandboxId);
  const cgroup = (id) => `/sys/fs/cgroup/memory/corral/${id}`;
  assert.ok(lostIds.some((id) => fs.existsSync(cgroup(id))), 'the killed node left nothing to clean');
  const again = await startServer({ apiKeys: [KEY], config: path.join(fleet.dir, 'node.yaml'), gateway: false,
    args: ['--role', 'node', '--state-dir', fleet.dirs[1], '--disk-dir', 'memory'] });
  await again.stop();
  for (const id of lostIds) assert.ok(!fs.existsSync(cgroup(id)), `${cgroup(id)} is still there`);
});

test('SIGTERM of a node: it drains, takes no new sandboxes, and exits once its last one ends', T, async () => {
  const [a] = fleet.fronts;
  const node = fleet.nodes[2];
  const tag = fleet.tags[2];
  assert.ok(!node.exitStatus, 'the node to drain is not running');
  const made = [];
  let mine = null;
  try {
    while (!mine) {
      const s = await Sandbox.create(opts(a));
      made.push(s);
      if (tagOf(s.sandboxId) === tag) mine = s;
      assert.ok(made.length <= 12, 'no create landed on the node to drain');
    }
    await mine.runCode('y = 7');
    node.stopping = true;
    node.child.kill('SIGTERM');
    const ready = await eventually(async () => (await fetch(`${node.url}/readyz`)).status === 503);
    assert.ok(ready, 'a draining node still says it is ready');
    assert.ok(await eventually(async () => (await frontNodes(a)).some((n) => n.tag === tag && n.state === 'draining')),
      'the front does not see the node draining');
    for (let i = 0; i < 3; i++) {
      const s = await Sandbox.create(opts(a));
      made.push(s);
      assert.notEqual(tagOf(s.sandboxId), tag, 'a draining node took a new sandbox');
    }
    assert.equal((await mine.runCode('y * 6')).text, '42', 'a draining node stopped its sandbox early');
    await mine.kill();
    const status = await node.exited;
    assert.equal(status.code, 0, `the drained node exited with ${JSON.stringify(status)}`);
  } finally {
    await Promise.allSettled(made.filter((s) => s !== mine).map((s) => s.kill()));
  }
});

test('the fronts are ready while a node is, and say where each node stands', T, async () => {
  const [a] = fleet.fronts;
  assert.equal((await fetch(`${a.url}/healthz`)).status, 200);
  assert.equal((await fetch(`${a.url}/readyz`)).status, 200);
  const unauthorised = await fetch(`${a.url}/fleet/v1/nodes`);
  assert.equal(unauthorised.status, 401);
  const nodes = await frontNodes(a);
  assert.equal(nodes.find((n) => n.tag === fleet.tags[0]).state, 'up');
  assert.equal(nodes.find((n) => n.tag === fleet.tags[1]).state, 'down');
});
