// The gateway under many concurrent requests, and clients that go away while
// their code runs: every request gets its own sandbox (its own state, its
// own container), and a request whose client disconnects leaves no sandbox
// behind. The harness checks the host once more after the server stops.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { test } from 'node:test';

import OpenAI from 'openai';

import { eventually } from './harness.mjs';
import {
  CI_TOOL,
  INCLUDE_OUTPUTS,
  KINDS as PROVIDER_KINDS,
  checkResponseEvents,
  checkUpstreamRequests,
  ciCalls,
  logsOf,
  sandboxIds,
  sandboxProcesses,
  useGateway,
} from './gateway-helpers.mjs';

const gw = useGateway();

const BOTH_KINDS = ['mock-chat', 'mock-responses'];
const SLEEPER = 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)\nprint("woke up")';
// The tool output in full when it has no stdout: what went wrong shows.
const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? `(no stdout: ${JSON.stringify(out)})`;

/** Sandboxes that were not there in `before`. */
const newSandboxes = (before) => [...sandboxIds()].filter((id) => !before.has(id));

/** After an abort: the request's sandboxes are gone, the loop did not go on, the server still answers. */
async function assertCleanedUp(t, before, marker, model) {
  const t0 = Date.now();
  const gone = await eventually(() => newSandboxes(before).length === 0, { timeoutMs: 15_000, intervalMs: 100 });
  assert.ok(gone, `the aborted request's sandbox is still there 15 s later: ${newSandboxes(before).join(', ')}\n${sandboxProcesses().join('\n')}`);
  t.diagnostic(`sandbox gone ${Date.now() - t0} ms after the abort`);
  if (before.size === 0) {
    assert.deepEqual(sandboxProcesses(), [], 'sandbox processes remain on the host');
  }
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(gw.upstream.requestsFor(marker).length, 1, 'the loop went on after the client left');

  // (Through chat: its sandbox ends with the request, no container lives on.)
  const m = gw.marker(`${model}-after-abort`);
  gw.upstream.script(m, [{ code: 'print(6 * 7)' }, (req, ctx) => ({ text: `got ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const c = await gw.client.chat.completions.create({ model, messages: [{ role: 'user', content: `${m} go` }], tools: [CI_TOOL] });
  assert.equal(c.choices[0].message.content, 'got 42', 'the server does not answer properly after the abort');
  await eventually(() => newSandboxes(before).length === 0, { timeoutMs: 5_000 }); // a clean start for the next test
}

/** Waits until a sandbox that was not in `before` runs (the code started). */
async function waitForSandbox(before) {
  const started = await eventually(() => newSandboxes(before).length > 0, { timeoutMs: 20_000, intervalMs: 50 });
  assert.ok(started, 'no sandbox appeared for the request');
}

for (const model of PROVIDER_KINDS) {
  test(`${model}: a client that aborts a Responses stream while the code runs leaves nothing behind`, { timeout: 60_000 }, async (t) => {
    const before = sandboxIds();
    const m = gw.marker(`${model}-abort-responses`);
    gw.upstream.script(m, [{ code: SLEEPER }, { text: 'should never be asked' }]);
    const stream = gw.client.responses.stream({ model, input: `${m} sleep`, tools: [CI_TOOL] });
    const events = [];
    let interpreting;
    const reached = new Promise((resolve) => {
      interpreting = resolve;
    });
    stream.on('event', (e) => {
      events.push(e);
      if (e.type === 'response.code_interpreter_call.interpreting') interpreting();
    });
    const outcome = stream.finalResponse().then(
      (r) => ({ r }),
      (err) => ({ err }),
    );
    const first = await Promise.race([reached.then(() => 'interpreting'), outcome.then(() => 'ended')]);
    if (first !== 'interpreting') {
      const { err } = await outcome;
      assert.fail(`the stream ended before the code ran: ${err?.message ?? events.map((e) => e.type).join(', ')}`);
    }
    await waitForSandbox(before);
    await new Promise((resolve) => setTimeout(resolve, 200)); // well inside time.sleep(60)
    stream.abort();
    const { r, err } = await outcome;
    assert.equal(r, undefined, 'the stream completed');
    assert.ok(err instanceof OpenAI.APIUserAbortError, `${err?.constructor?.name}: ${err?.message}`);
    assert.ok(!events.some((e) => e.type === 'response.code_interpreter_call.completed'), 'the sleeping code completed');
    await assertCleanedUp(t, before, m, model);
  });

  test(`${model}: a client that aborts a chat stream while the code runs leaves nothing behind`, { timeout: 60_000 }, async (t) => {
    const before = sandboxIds();
    const m = gw.marker(`${model}-abort-chat`);
    gw.upstream.script(m, [{ code: SLEEPER }, { text: 'should never be asked' }]);
    const stream = gw.client.chat.completions.stream({
      model,
      messages: [{ role: 'user', content: `${m} sleep` }],
      tools: [CI_TOOL],
      stream_options: { include_usage: true },
    });
    const outcome = stream.finalChatCompletion().then(
      (c) => ({ c }),
      (err) => ({ err }),
    );
    await waitForSandbox(before);
    await eventually(() => (gw.upstream.requestsFor(m)[0]?.reply ?? null) !== null, { timeoutMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    stream.abort();
    const { c, err } = await outcome;
    assert.equal(c, undefined, 'the stream completed');
    assert.ok(err instanceof OpenAI.APIUserAbortError, `${err?.constructor?.name}: ${err?.message}`);
    await assertCleanedUp(t, before, m, model);
  });
}

test('mock-chat: a client that gives up on a plain (non-streamed) request while the code runs leaves nothing behind', { timeout: 60_000 }, async (t) => {
  const before = sandboxIds();
  const m = gw.marker('abort-plain');
  gw.upstream.script(m, [{ code: SLEEPER }, { text: 'should never be asked' }]);
  const controller = new AbortController();
  const outcome = gw.client.responses
    .create({ model: 'mock-chat', input: `${m} sleep`, tools: [CI_TOOL] }, { signal: controller.signal })
    .then(
      (r) => ({ r }),
      (err) => ({ err }),
    );
  await waitForSandbox(before);
  await new Promise((resolve) => setTimeout(resolve, 300));
  controller.abort();
  const { r, err } = await outcome;
  assert.equal(r, undefined, 'the request completed');
  assert.ok(err instanceof OpenAI.APIUserAbortError, `${err?.constructor?.name}: ${err?.message}`);
  await assertCleanedUp(t, before, m, 'mock-chat');
});

test('100 concurrent requests each see only their own state, in their own container', { timeout: 180_000 }, async (t) => {
  const N = 100;
  const jobs = Array.from({ length: N }, (_, i) => {
    const value = `v${i}-${crypto.randomBytes(6).toString('hex')}`;
    const model = BOTH_KINDS[i % 2];
    const stream = i % 4 >= 2;
    const marker = gw.marker(`concurrent-${i}`);
    gw.upstream.script(marker, [
      { code: `secret = ${JSON.stringify(value)}` },
      { code: 'import time\ntime.sleep(0.05)\nprint(secret)' },
      (req, ctx) => ({ text: `secret is ${stdoutOf(ctx.lastCodeOutput)}` }),
    ]);
    return { i, value, model, stream, marker };
  });
  const t0 = Date.now();
  const settled = await Promise.allSettled(
    jobs.map(async (job) => {
      const body = { model: job.model, input: `${job.marker} Keep a secret.`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS };
      if (!job.stream) return { r: await gw.client.responses.create(body), events: null };
      const events = [];
      const s = gw.client.responses.stream(body);
      s.on('event', (e) => events.push(e));
      return { r: await s.finalResponse(), events };
    }),
  );
  t.diagnostic(`${N} concurrent requests (2 code calls each) in ${Date.now() - t0} ms`);
  const failures = settled.map((s, i) => [i, s]).filter(([, s]) => s.status === 'rejected');
  assert.deepEqual(
    failures.slice(0, 5).map(([i, s]) => `#${i}: ${s.reason?.message ?? s.reason}`),
    [],
    `${failures.length} of ${N} requests failed`,
  );
  const containers = new Set();
  for (const [i, s] of settled.entries()) {
    const job = jobs[i];
    const { r, events } = s.value;
    const label = `request #${i} (${job.model}${job.stream ? ', streamed' : ''})`;
    assert.equal(r.status, 'completed', label);
    const calls = ciCalls(r, { include: true });
    assert.equal(calls.length, 2, label);
    assert.deepEqual(calls.map((c) => c.status), ['completed', 'completed'], `${label}: ${JSON.stringify(calls)}`);
    assert.equal(calls[0].container_id, calls[1].container_id, `${label}: two containers in one request`);
    assert.equal(logsOf(calls[1]).trim(), job.value, `${label}: ${JSON.stringify(calls)}`);
    assert.equal(r.output_text, `secret is ${job.value}`, `${label} saw another state`);
    containers.add(calls[0].container_id);
    if (events) checkResponseEvents(events, r);
    checkUpstreamRequests(gw.upstream.requestsFor(job.marker), job.model, { rounds: 3 });
  }
  assert.equal(containers.size, N, 'container ids are not distinct');
});
