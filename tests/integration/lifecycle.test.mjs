// 1,000 create/kill cycles through the official `e2b` SDK, 8 at a time.
// They must leave nothing behind: the harness checks the host once the server
// has stopped, and this test checks that the server's own descriptors do not
// grow. CORRAL_QUICK=1 skips it (for local iteration only).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Sandbox } from 'e2b';

import { useServer } from './harness.mjs';

const ctx = useServer();

const CYCLES = 1_000;
const CONCURRENCY = 8;
const WARMUP = 2 * CONCURRENCY;
const FD_SLACK = 4; // "a few"
const TAG = { suite: 'corral-lifecycle' };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function cycle(i) {
  const sbx = await Sandbox.create({ metadata: TAG, timeoutMs: 120_000 });
  try {
    assert.equal(await sbx.isRunning(), true, `cycle ${i}: a new sandbox is not running`);
  } finally {
    assert.equal(await sbx.kill(), true, `cycle ${i}: kill() did not find the sandbox`);
  }
}

/** Runs cycle(0..count-1) with `concurrency` workers; stops at the first failure. */
async function runCycles(count, concurrency) {
  let next = 0;
  let failure = null;
  const worker = async () => {
    while (!failure && next < count) {
      const i = next++;
      try {
        await cycle(i);
      } catch (err) {
        failure ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failure) throw failure;
}

/** The server's own descriptors once they have settled (teardown can lag a little). */
async function settledFds(server, ceiling) {
  let fds = server.openFds();
  const deadline = Date.now() + 10_000;
  while (ceiling !== undefined && fds.own > ceiling && Date.now() < deadline) {
    await sleep(200);
    fds = server.openFds();
  }
  return fds;
}

test(
  `${CYCLES} create/kill cycles, ${CONCURRENCY} at a time, leak nothing`,
  { timeout: 30 * 60_000, skip: process.env.CORRAL_QUICK === '1' ? 'CORRAL_QUICK=1' : false },
  async (t) => {
    const { server } = ctx;
    await runCycles(WARMUP, CONCURRENCY); // pools, threads and caches reach their steady state
    await sleep(1_000);
    const before = await settledFds(server);

    const t0 = Date.now();
    await runCycles(CYCLES, CONCURRENCY);
    const seconds = (Date.now() - t0) / 1000;
    t.diagnostic(`${CYCLES} cycles in ${seconds.toFixed(1)} s (${(CYCLES / seconds).toFixed(1)} per second)`);

    const left = await Sandbox.list({ query: { metadata: TAG } }).nextItems();
    assert.deepEqual(left.map((s) => s.sandboxId), [], 'killed sandboxes are still listed');

    const after = await settledFds(server, before.own + FD_SLACK);
    t.diagnostic(`server descriptors: ${before.own} before, ${after.own} after (plus client connections: ${before.clients}, ${after.clients})`);
    assert.ok(
      after.own <= before.own + FD_SLACK,
      `the server's descriptors grew from ${before.own} to ${after.own} ` +
        `(not counting client connections: ${before.clients} before, ${after.clients} after)`,
    );
  },
);
