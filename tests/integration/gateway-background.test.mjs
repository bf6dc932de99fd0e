// Background responses and the events of responses, through the official
// `openai` SDK: `background: true` answers at once with a queued response
// that runs on (polled with retrieve, cancelled with cancel, its code
// stopped), `retrieve(id, {stream: true, starting_after})` replays a
// response's events and follows the live ones, and a gateway that stops
// while a background response runs leaves it failed, saying why; beyond
// gateway.background_max (1 here) a background response waits, queued.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { APIError } from 'openai';

import { eventually } from './harness.mjs';
import { CI_TOOL, PROVIDER, sandboxIds, sandboxProcesses, useGateway } from './gateway-helpers.mjs';

const gw = useGateway({ gatewayLines: ['background_max: 1'] });

const T = { timeout: 120_000 };
const MODEL = 'mock-chat';
const SLEEPER = 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)\nprint("woke up")';
const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? `(no stdout: ${JSON.stringify(out)})`;

/** Every event of a stream, and what ended it (null: it ended cleanly). */
async function drain(stream, { until = null } = {}) {
  const events = [];
  try {
    for await (const e of stream) {
      events.push(e);
      if (until && until(e)) {
        stream.controller.abort();
        break;
      }
    }
    return { events, thrown: null };
  } catch (err) {
    return { events, thrown: err };
  }
}

/** Polls the response until it has left queued and in_progress; the statuses seen on the way. */
async function settle(id) {
  const seen = [];
  let r = null;
  await eventually(
    async () => {
      r = await gw.client.responses.retrieve(id);
      if (seen.at(-1) !== r.status) seen.push(r.status);
      return !['queued', 'in_progress'].includes(r.status);
    },
    { timeoutMs: 60_000, intervalMs: 20 },
  );
  return { r, seen };
}

/** The status and OpenAI error of a request that must fail. */
async function refusal(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof APIError, `expected an APIError, got ${err}`);
    return err;
  }
  assert.fail('the request succeeded');
}

test('background: queued at once, then polled to completion; the code ran and the answer is stored', T, async () => {
  const m = gw.marker('bg-poll');
  gw.upstream.script(m, [{ code: 'print(6 * 7)', delayMs: 300 }, (req, ctx) => ({ text: `got ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} go`, tools: [CI_TOOL], background: true });
  assert.equal(r.status, 'queued');
  assert.equal(r.background, true);
  assert.deepEqual(r.output, []);
  assert.match(r.id, /^resp_/);
  const { r: done, seen } = await settle(r.id);
  assert.equal(done.status, 'completed', JSON.stringify(done.error));
  assert.equal(done.background, true);
  assert.equal(done.output_text, 'got 42');
  const call = done.output.find((o) => o.type === 'code_interpreter_call');
  assert.equal(call?.status, 'completed');
  assert.ok(seen.includes('in_progress'), `statuses seen while polling: ${seen.join(', ')}`);
  // continued like any stored response
  const n = gw.marker('bg-next');
  gw.upstream.script(n, [{ text: 'next' }]);
  const next = await gw.client.responses.create({ model: MODEL, input: `${n} more`, previous_response_id: r.id });
  assert.equal(next.output_text, 'next');
});

test('background: cancel stops the running code and the upstream loop; cancelled stays cancelled', T, async () => {
  const m = gw.marker('bg-cancel');
  gw.upstream.script(m, [{ code: SLEEPER }, { text: 'never reached' }]);
  const before = PROVIDER === 'local' ? sandboxIds() : null;
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} wait`, tools: [CI_TOOL], background: true });
  // a reader of its events sees the code start, and then the cancellation
  const stream = await gw.client.responses.retrieve(r.id, { stream: true });
  const events = [];
  let cancelled = null;
  let thrown = null;
  try {
    for await (const e of stream) {
      events.push(e);
      if (e.type === 'response.code_interpreter_call.interpreting' && !cancelled) {
        cancelled = gw.client.responses.cancel(r.id);
      }
    }
  } catch (err) {
    thrown = err;
  }
  assert.ok(cancelled, `the code never ran: ${events.map((e) => e.type).join(', ')}`);
  const c = await cancelled;
  assert.equal(c.status, 'cancelled');
  assert.equal(c.background, true);
  assert.ok(thrown instanceof APIError, `the reader's stream ended with ${thrown ?? events.at(-1)?.type}`);
  assert.equal(thrown.code, 'response_cancelled');
  assert.equal((await gw.client.responses.retrieve(r.id)).status, 'cancelled');
  assert.equal((await gw.client.responses.cancel(r.id)).status, 'cancelled', 'a second cancel answers the same');
  assert.equal(gw.upstream.requestsFor(m).length, 1, 'the loop went on after the cancel');
  if (before) {
    // the container lives on (its sandbox started again when next used); the code's processes are gone
    const running = () => sandboxProcesses().filter((p) => !before.has(/ sandbox (\S+)$/.exec(p)?.[1]));
    const gone = await eventually(() => running().length === 0, { timeoutMs: 15_000 });
    assert.ok(gone, `the cancelled code still runs: ${running().join('\n')}`);
  }
});

test('background with stream: the creator reads queued, in_progress and the rest; a reader resumes after any sequence number', T, async () => {
  const m = gw.marker('bg-stream');
  gw.upstream.script(m, [{ code: 'print(2 + 2)' }, (req, ctx) => ({ text: `sum ${stdoutOf(ctx.lastCodeOutput)}`, chunkDelayMs: 5 })]);
  const stream = await gw.client.responses.create({ model: MODEL, input: `${m} add`, tools: [CI_TOOL], background: true, stream: true });
  const { events: all, thrown } = await drain(stream);
  assert.equal(thrown, null, `${thrown}`);
  assert.deepEqual(all.map((e) => e.sequence_number), all.map((_, i) => i));
  assert.deepEqual(all.slice(0, 3).map((e) => [e.type, e.response.status]), [
    ['response.created', 'queued'],
    ['response.queued', 'queued'],
    ['response.in_progress', 'in_progress'],
  ]);
  assert.ok(all.every((e) => !e.response || e.response.background === true));
  assert.equal(all.at(-1).type, 'response.completed');
  const id = all[0].response.id;
  for (const after of [0, 4, all.length - 2]) {
    const { events } = await drain(await gw.client.responses.retrieve(id, { stream: true, starting_after: after }));
    assert.deepEqual(events, all.slice(after + 1), `replayed after ${after}`);
  }
  assert.deepEqual((await drain(await gw.client.responses.retrieve(id, { stream: true }))).events, all);
});

test('background: a creator that goes away leaves the run alone; it resumes the stream where it stopped', T, async () => {
  const m = gw.marker('bg-leave');
  gw.upstream.script(m, [{ code: 'import time\ntime.sleep(1)\nprint("slept")' }, (req, ctx) => ({ text: `done ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const stream = await gw.client.responses.create({ model: MODEL, input: `${m} sleep`, tools: [CI_TOOL], background: true, stream: true });
  const { events: first } = await drain(stream, { until: (e) => e.type === 'response.in_progress' });
  const id = first[0].response.id;
  const last = first.at(-1).sequence_number;
  const { events: rest, thrown } = await drain(await gw.client.responses.retrieve(id, { stream: true, starting_after: last }));
  assert.equal(thrown, null, `${thrown}`);
  assert.equal(rest[0].sequence_number, last + 1);
  assert.equal(rest.at(-1).type, 'response.completed');
  assert.equal(rest.at(-1).response.output_text ?? rest.at(-1).response.output.at(-1).content[0].text, 'done slept');
  assert.equal((await gw.client.responses.retrieve(id)).status, 'completed');
});

test('background_max: a background response beyond it waits queued, runs when the running one ends, and is cancelled without ever running', T, async () => {
  // A takes the only turn; its model's answer waits until the test lets it go
  let letGo;
  const gate = new Promise((resolve) => {
    letGo = resolve;
  });
  const a = gw.marker('bg-slot-a');
  gw.upstream.script(a, [{ text: 'a done', until: gate }]);
  const ra = await gw.client.responses.create({ model: MODEL, input: `${a} go`, tools: [CI_TOOL], background: true });
  await eventually(() => gw.upstream.requestsFor(a).length === 1, { timeoutMs: 60_000, intervalMs: 20 });
  assert.equal((await gw.client.responses.retrieve(ra.id)).status, 'in_progress');
  // B waits, queued, and a cancel ends it before it ever reaches the model
  const b = gw.marker('bg-slot-b');
  gw.upstream.script(b, [{ text: 'never' }]);
  const rb = await gw.client.responses.create({ model: MODEL, input: `${b} go`, tools: [CI_TOOL], background: true });
  assert.equal(rb.status, 'queued');
  assert.equal((await gw.client.responses.retrieve(rb.id)).status, 'queued');
  const cancelled = await gw.client.responses.cancel(rb.id);
  assert.equal(cancelled.status, 'cancelled');
  // C waits too, and runs once A is done
  const c = gw.marker('bg-slot-c');
  gw.upstream.script(c, [{ text: 'c ran' }]);
  const rc = await gw.client.responses.create({ model: MODEL, input: `${c} go`, tools: [CI_TOOL], background: true });
  assert.equal((await gw.client.responses.retrieve(rc.id)).status, 'queued');
  assert.equal(gw.upstream.requestsFor(c).length, 0, 'C reached the model while A ran');
  const released = Date.now();
  letGo();
  const { r: doneA } = await settle(ra.id);
  assert.equal(doneA.status, 'completed', JSON.stringify(doneA.error));
  assert.equal(doneA.output_text, 'a done');
  const { r: doneC } = await settle(rc.id);
  assert.equal(doneC.status, 'completed', JSON.stringify(doneC.error));
  assert.equal(doneC.output_text, 'c ran');
  assert.ok(gw.upstream.requestsFor(c)[0].time >= released, 'C reached the model before A was let go');
  assert.equal(gw.upstream.requestsFor(b).length, 0, 'the cancelled B reached the model');
  assert.equal((await gw.client.responses.retrieve(rb.id)).status, 'cancelled');
});

test('a streamed response (not background) is streamed again by retrieve, from its start or after a sequence number', T, async () => {
  const m = gw.marker('re-stream');
  gw.upstream.script(m, [{ code: 'print(3 * 3)' }, (req, ctx) => ({ text: `nine? ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const { events: all } = await drain(await gw.client.responses.create({ model: MODEL, input: `${m} go`, tools: [CI_TOOL], stream: true }));
  assert.equal(all.at(-1).type, 'response.completed');
  assert.equal(all[0].response.background, false);
  const id = all[0].response.id;
  assert.deepEqual((await drain(await gw.client.responses.retrieve(id, { stream: true }))).events, all);
  assert.deepEqual((await drain(await gw.client.responses.retrieve(id, { stream: true, starting_after: 2 }))).events, all.slice(3));
});

test('refusals: cancelling a synchronous response, streaming one that kept no events, bad parameters, unknown ids', T, async () => {
  const m = gw.marker('sync');
  gw.upstream.script(m, [{ text: 'plain' }]);
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} hi`, tools: [CI_TOOL] });
  let e = await refusal(gw.client.responses.cancel(r.id));
  assert.equal(e.status, 400);
  assert.equal(e.error?.message, 'Cannot cancel a synchronous response.');
  e = await refusal(gw.client.responses.retrieve(r.id, { stream: true }));
  assert.equal(e.status, 400);
  assert.equal(e.code, 'events_not_kept');
  assert.equal(e.param, 'stream');
  e = await refusal(gw.client.responses.retrieve(r.id, { stream: true, starting_after: 'x' }));
  assert.equal(e.status, 400);
  assert.equal(e.param, 'starting_after');
  e = await refusal(gw.client.responses.create({ model: MODEL, input: 'hi', background: true, store: false }));
  assert.equal(e.status, 400);
  assert.equal(e.param, 'background');
  e = await refusal(gw.client.responses.create({ model: MODEL, input: 'hi', background: 'yes' }));
  assert.equal(e.status, 400);
  assert.equal(e.code, 'invalid_type');
  e = await refusal(gw.client.responses.create({ model: 'no-such-model', input: 'hi', background: true }));
  assert.equal(e.status, 404, 'an error found before the run starts is the creator\'s answer');
  for (const p of [gw.client.responses.cancel('resp_nothing'), gw.client.responses.retrieve('resp_nothing', { stream: true })]) {
    e = await refusal(p);
    assert.equal(e.status, 404);
  }
});

test('a background response running when the server is killed is failed after the restart, saying why', T, async () => {
  const m = gw.marker('bg-killed');
  gw.upstream.script(m, [{ text: 'too late', delayMs: 30_000 }]);
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} slow`, background: true });
  await eventually(() => gw.upstream.requestsFor(m).length === 1, { timeoutMs: 20_000 });
  await gw.restart({ kill: true });
  const after = await gw.client.responses.retrieve(r.id);
  assert.equal(after.status, 'failed');
  assert.equal(after.error.code, 'server_error');
  assert.match(after.error.message, /stopped while this background response ran/);
});

test('background responses running or queued when the server stops end failed: the gateway is shutting down', T, async () => {
  const m = gw.marker('bg-stopped');
  gw.upstream.script(m, [{ code: SLEEPER }, { text: 'never reached' }]);
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} wait`, tools: [CI_TOOL], background: true });
  const { events } = await drain(await gw.client.responses.retrieve(r.id, { stream: true }), {
    until: (e) => e.type === 'response.code_interpreter_call.interpreting',
  });
  assert.equal(events.at(-1)?.type, 'response.code_interpreter_call.interpreting');
  const q = gw.marker('bg-stopped-queued');
  gw.upstream.script(q, [{ text: 'never reached' }]);
  const queued = await gw.client.responses.create({ model: MODEL, input: `${q} wait`, tools: [CI_TOOL], background: true });
  assert.equal((await gw.client.responses.retrieve(queued.id)).status, 'queued'); // background_max: 1
  await gw.restart(); // SIGTERM: a clean exit is asserted, then a fresh server
  for (const id of [r.id, queued.id]) {
    const after = await gw.client.responses.retrieve(id);
    assert.equal(after.status, 'failed', id);
    assert.equal(after.error.code, 'server_shutting_down', id);
  }
  assert.equal(gw.upstream.requestsFor(q).length, 0, 'the queued one reached the model');
});
