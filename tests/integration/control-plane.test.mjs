// The control plane (E2B_API_URL) through the official SDKs: create with
// metadata and envs, list, getInfo, setTimeout, kill, connect, API keys and
// unknown sandboxes, the templates it has, and the features it refuses
// (templates.test.mjs builds templates).
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { test } from 'node:test';

import { AuthenticationError, Sandbox, SandboxNotFoundError } from '@e2b/code-interpreter';
import { NotFoundError, SandboxError, Secret, Template, Volume } from 'e2b';

import { eventually, randomApiKey, startServer, useServer, withSandbox } from './harness.mjs';

useServer();

const T = { timeout: 120_000 };
const UNKNOWN_ID = 'i0000000000000000000'; // the official id shape: 20 chars [a-z0-9]

const near = (actual, expected, tolerance, what) =>
  assert.ok(
    Math.abs(actual - expected) <= tolerance,
    `${what}: ${actual} is not within ${tolerance} of ${expected} (off by ${actual - expected})`,
  );

test('create with metadata and envs: the envs are visible to the code', T, () =>
  withSandbox(
    Sandbox,
    async (sbx) => {
      assert.equal(typeof sbx.sandboxId, 'string');
      assert.ok(sbx.sandboxId.length > 0);
      const execution = await sbx.runCode('import os; os.environ["FOO"]');
      assert.equal(execution.error, undefined, JSON.stringify(execution.error));
      assert.equal(execution.text, 'bar');
    },
    { metadata: { suite: 'control-plane' }, envs: { FOO: 'bar' } },
  ),
);

test('Sandbox.list finds a sandbox by its metadata, and only the matching ones', T, async () => {
  const tag = crypto.randomUUID();
  await withSandbox(
    Sandbox,
    (tagged) =>
      withSandbox(Sandbox, async (other) => {
        const paginator = Sandbox.list({ query: { metadata: { run: tag } } });
        const items = await paginator.nextItems();
        const ids = items.map((s) => s.sandboxId);
        assert.ok(ids.includes(tagged.sandboxId), `${tagged.sandboxId} not in ${JSON.stringify(ids)}`);
        assert.ok(!ids.includes(other.sandboxId), 'the metadata filter was ignored');
        const found = items.find((s) => s.sandboxId === tagged.sandboxId);
        assert.deepEqual(found.metadata, { run: tag, suite: 'control-plane' });
        // The official API answers with the template's ID, not necessarily the name asked for.
        assert.ok(typeof found.templateId === 'string' && found.templateId.length > 0, 'no templateId');
        assert.equal(found.state, 'running');
        assert.ok(!Number.isNaN(found.startedAt.getTime()), 'startedAt is not a date');
        assert.ok(!Number.isNaN(found.endAt.getTime()), 'endAt is not a date');
        assert.equal(paginator.hasNext, false, 'one sandbox needs no second page');

        const all = await Sandbox.list().nextItems();
        const allIds = all.map((s) => s.sandboxId);
        assert.ok(allIds.includes(tagged.sandboxId) && allIds.includes(other.sandboxId), 'unfiltered list misses sandboxes');
      }, { metadata: { run: 'someone-else' } }),
    { metadata: { run: tag, suite: 'control-plane' } },
  );
});

test('getInfo describes the sandbox', T, () =>
  withSandbox(
    Sandbox,
    async (sbx) => {
      const before = Date.now();
      const info = await sbx.getInfo();
      assert.equal(info.sandboxId, sbx.sandboxId);
      assert.ok(typeof info.templateId === 'string' && info.templateId.length > 0, 'no templateId');
      assert.deepEqual(info.metadata, { owner: 'getInfo' });
      assert.equal(info.state, 'running');
      assert.equal(typeof info.envdVersion, 'string');
      assert.deepEqual(info.lifecycle, { onTimeout: 'kill', autoResume: false });
      assert.ok(info.startedAt.getTime() <= before + 1_000, 'startedAt is in the future');
      near(info.endAt.getTime() - info.startedAt.getTime(), 120_000, 5_000, 'endAt - startedAt (ms)');
      const same = await Sandbox.getInfo(sbx.sandboxId);
      assert.equal(same.sandboxId, sbx.sandboxId);
    },
    { metadata: { owner: 'getInfo' }, timeoutMs: 120_000 },
  ),
);

test('setTimeout moves the end of the sandbox', T, () =>
  withSandbox(
    Sandbox,
    async (sbx) => {
      await sbx.setTimeout(600_000);
      const info = await sbx.getInfo();
      near(info.endAt.getTime(), Date.now() + 600_000, 10_000, 'endAt after setTimeout(600 s)');
      assert.equal(await sbx.isRunning(), true);
    },
    { timeoutMs: 60_000 },
  ),
);

test('a sandbox past its timeout is killed', T, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 });
  try {
    await sbx.setTimeout(1_000);
    const stopped = await eventually(async () => !(await sbx.isRunning()), { timeoutMs: 15_000, intervalMs: 250 });
    assert.ok(stopped, 'still running 15 s after setTimeout(1 s)');
    await assert.rejects(sbx.getInfo(), SandboxNotFoundError);
  } finally {
    await sbx.kill().catch(() => {});
  }
});

test('kill stops the sandbox; a second kill returns false', T, async () => {
  const sbx = await Sandbox.create();
  assert.equal(await sbx.isRunning(), true);
  assert.equal(await sbx.kill(), true);
  assert.equal(await sbx.isRunning(), false);
  assert.equal(await sbx.kill(), false);
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError);
});

test('Sandbox.connect(id) reaches a running sandbox and its state', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.runCode('v = 7');
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal(again.sandboxId, sbx.sandboxId);
    assert.equal((await again.runCode('v')).text, '7');
    assert.equal(await again.isRunning(), true);
    await sbx.connect(); // the instance method calls the same endpoint
  }),
);

test('unknown sandbox ids are reported as not found', T, async () => {
  await assert.rejects(Sandbox.getInfo(UNKNOWN_ID), SandboxNotFoundError);
  await assert.rejects(Sandbox.connect(UNKNOWN_ID), SandboxNotFoundError);
  await assert.rejects(Sandbox.setTimeout(UNKNOWN_ID, 60_000), SandboxNotFoundError);
  assert.equal(await Sandbox.kill(UNKNOWN_ID), false);
});

test('with --api-key, a wrong key is refused with AuthenticationError', T, async () => {
  const key = randomApiKey();
  const server = await startServer({ apiKeys: [key] });
  let failed = true;
  try {
    const wrong = server.sdkOpts({ apiKey: randomApiKey() });
    await assert.rejects(Sandbox.create(wrong), AuthenticationError);
    await assert.rejects(Sandbox.list(wrong).nextItems(), AuthenticationError);
    await assert.rejects(Sandbox.getInfo(UNKNOWN_ID, wrong), AuthenticationError);
    await assert.rejects(Sandbox.kill(UNKNOWN_ID, wrong), AuthenticationError);

    // The right key works, for the control plane and (without X-API-Key,
    // which the SDK only sends to the control plane) for the data plane.
    const sbx = await Sandbox.create(server.sdkOpts());
    try {
      assert.equal((await sbx.runCode('1 + 1')).text, '2');
      await assert.rejects(Sandbox.kill(sbx.sandboxId, wrong), AuthenticationError);
    } finally {
      assert.equal(await sbx.kill(), true);
    }
    failed = false;
  } finally {
    try {
      await server.stop();
    } catch (err) {
      if (!failed) throw err;
    }
  }
});

test('pause freezes a sandbox; connect resumes it with its state', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.runCode('counter = 41');
    assert.equal(await sbx.pause(), true);
    assert.equal(await sbx.pause(), false, 'a second pause reports it was paused already');
    assert.equal((await sbx.getInfo()).state, 'paused');
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused');
    const resumed = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await resumed.getInfo()).state, 'running');
    assert.equal((await resumed.runCode('counter + 1')).text, '42');
  }),
);

test('lifecycle onTimeout pause: the sandbox pauses at its timeout, its clock stops, connect resumes it', T, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause' } });
  try {
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
    await sbx.runCode('kept = 5');
    await sbx.setTimeout(1_000);
    const paused = await eventually(async () => (await sbx.getInfo()).state === 'paused', {
      timeoutMs: 15_000,
      intervalMs: 100,
    });
    assert.ok(paused, 'not paused 15 s after a timeout of 1 s');
    // Paused, its timeout no longer runs: it is still there, paused, after another.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    assert.equal((await sbx.getInfo()).state, 'paused');
    // Without autoResume a request does not resume it.
    await assert.rejects(sbx.runCode('kept'));
    assert.equal((await sbx.getInfo()).state, 'paused');
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 });
    assert.equal((await again.getInfo()).state, 'running');
    assert.equal((await again.runCode('kept')).text, '5');
  } finally {
    await sbx.kill().catch(() => {});
  }
});

test('lifecycle autoResume: a request to a paused sandbox resumes it', T, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
  try {
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true });
    await sbx.runCode('kept = 6');
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.getInfo()).state, 'paused');
    assert.equal((await sbx.runCode('kept + 1')).text, '7');
    assert.equal((await sbx.getInfo()).state, 'running');
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.commands.run('echo resumed')).stdout, 'resumed\n');
  } finally {
    await sbx.kill().catch(() => {});
  }
});

test('a pause that drops memory and a resume by reboot are refused by name', T, async () => {
  await assert.rejects(
    Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }),
    (e) => e.message.includes('filesystem-only snapshot') && e.message.includes('not supported by this server'),
  );
  await withSandbox(Sandbox, async (sbx) => {
    assert.equal(await sbx.pause(), true);
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' }), (e) =>
      e.message.includes('rebooting it') && e.message.includes('not supported by this server'),
    );
    assert.equal((await sbx.getInfo()).state, 'paused', 'the refused connect did not resume it');
  });
});

test('getMetrics reports CPU, memory and disk', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.files.write('/home/user/ballast.bin', crypto.randomBytes(2 << 20));
    const [m] = await sbx.getMetrics();
    assert.ok(m.timestamp instanceof Date && Math.abs(m.timestamp - Date.now()) < 5000);
    assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0);
    assert.ok(m.memUsed > 0 && m.memUsed < m.memTotal);
    assert.ok(m.diskUsed >= 2 << 20 && m.diskUsed < m.diskTotal, `disk ${m.diskUsed} of ${m.diskTotal}`);
  }),
);

test('Sandbox.list pages with limit and nextToken, in either order, by template and start', T, async () => {
  const suite = `paging-${crypto.randomUUID()}`;
  const made = [];
  try {
    for (let i = 0; i < 3; i++) {
      made.push(await Sandbox.create({ metadata: { suite } }));
      await new Promise((resolve) => setTimeout(resolve, 1100)); // starts a second apart
    }
    const query = { metadata: { suite } };
    const ids = (items) => items.map((s) => s.sandboxId);
    const newest = made.map((s) => s.sandboxId).reverse();
    const pages = Sandbox.list({ query, limit: 2 });
    assert.deepEqual(ids(await pages.nextItems()), newest.slice(0, 2));
    assert.equal(pages.hasNext, true);
    assert.deepEqual(ids(await pages.nextItems()), newest.slice(2));
    assert.equal(pages.hasNext, false);
    const oldest = Sandbox.list({ query, limit: 2, order: 'asc' });
    assert.deepEqual(ids(await oldest.nextItems()), [...newest].reverse().slice(0, 2));
    assert.deepEqual(ids(await oldest.nextItems()), [...newest].reverse().slice(2));
    // a sandbox gone between pages moves nothing else
    const again = Sandbox.list({ query, limit: 1 });
    assert.deepEqual(ids(await again.nextItems()), newest.slice(0, 1));
    await made[1].kill();
    assert.deepEqual(ids(await again.nextItems()), newest.slice(2));
    assert.equal(again.hasNext, false);
    const second = (await Sandbox.getInfo(made[2].sandboxId)).startedAt;
    const later = await Sandbox.list({ query: { ...query, startedAfter: second } }).nextItems();
    assert.deepEqual(ids(later), [made[2].sandboxId]);
    const byTemplate = (template) => Sandbox.list({ query: { ...query, template } }).nextItems();
    assert.equal((await byTemplate('code-interpreter-v1')).length, 2);
    assert.deepEqual(await byTemplate('no-such-template'), []);
    await assert.rejects(Sandbox.list({ query, limit: 101 }).nextItems(), /400: 'limit' must be a whole number from 1 to 100/);
    for (const nextToken of ['forged', '-1_abc', '99999999999999999999999_abc', `1_${made[0].sandboxId}&x`])
      await assert.rejects(
        Sandbox.list({ query, nextToken }).nextItems(),
        /400: 'nextToken' is not a token this server gave/,
        nextToken,
      );
  } finally {
    await Promise.all(made.map((s) => s.kill()));
  }
});

test('Template.exists knows the templates this server has', T, async () => {
  assert.equal(await Template.exists('code-interpreter-v1'), true);
  assert.equal(await Template.exists('base'), true);
  assert.equal(await Template.exists('no-such-template'), false);
});

// What corral does not do is refused with a 501 that names it: never a
// "sandbox not found", a quiet false, or an option silently ignored.
test('snapshots, forks, volumes, secrets and MCP are refused by name', T, async () => {
  const refused = (feature) => (err) => {
    assert.ok(!(err instanceof NotFoundError), `${err.name}: ${err.message}`);
    if (err instanceof SandboxError) assert.equal(err.statusCode, 501, err.message);
    assert.match(err.message, new RegExp(`^501: .*${feature} (is|are) not supported by this server`));
    return true;
  };
  await withSandbox(Sandbox, async (sbx) => {
    await assert.rejects(sbx.createSnapshot(), refused('snapshots'));
    await assert.rejects(sbx.listSnapshots().nextItems(), refused('snapshots'));
    await assert.rejects(sbx.fork(), refused('forking sandboxes'));
    assert.equal((await sbx.runCode('1 + 1')).text, '2', 'the sandbox is untouched');
  });
  await assert.rejects(Sandbox.fork(UNKNOWN_ID), refused('forking sandboxes'));
  await assert.rejects(Sandbox.listSnapshots().nextItems(), refused('snapshots'));
  // E2B deletes a snapshot as a template (DELETE /templates/{id}): no template has that name
  assert.equal(await Sandbox.deleteSnapshot('snapshot-1'), false);
  await assert.rejects(Volume.create('data'), refused('volumes'));
  await assert.rejects(Volume.list(), refused('volumes'));
  await assert.rejects(Secret.create('token', 's3cret'), refused('secrets'));
  await assert.rejects(Secret.list().nextItems(), refused('secrets'));
  await assert.rejects(
    Sandbox.create({ volumeMounts: { '/data': 'data' } }),
    refused('volume mounts'),
  );
  await assert.rejects(
    Sandbox.create({ mcp: { exa: { apiKey: 'k' } } }),
    refused('MCP gateways in sandboxes'),
  );
  assert.deepEqual(await Sandbox.list().nextItems(), [], 'no sandbox was left behind');
});
