// How the gateway's streams end when something breaks, through the official
// `openai` SDK: a stream that has started always ends with its protocol's
// last word (an error chunk, an `error` event, `response.failed`), never by
// being cut, whether the upstream breaks off in the middle of an event or
// `corral serve` is stopped while the model's code runs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { APIError } from 'openai';

import { CI_TOOL, drain, useGateway } from './gateway-helpers.mjs';

const gw = useGateway();

const T = { timeout: 120_000 };
const LONG_TEXT = 'The answer comes in many small pieces, one after the other. '.repeat(4);


test('a proxied chat stream that the upstream breaks off ends with an error chunk', T, async () => {
  const marker = gw.marker('CUT-CHAT');
  gw.upstream.script(marker, [{ text: LONG_TEXT, cutAfterEvents: 5 }]);
  const stream = await gw.client.chat.completions.create({
    model: 'mock-chat',
    stream: true,
    messages: [{ role: 'user', content: `${marker}: talk` }],
  });
  const { events, thrown } = await drain(stream);
  assert.ok(events.length >= 3, `only ${events.length} chunks before the error`);
  for (const c of events) assert.equal(c.object, 'chat.completion.chunk');
  // The SDK turns the error chunk into an APIError; a cut would be a network error.
  assert.ok(thrown instanceof APIError, `expected an APIError, got ${thrown?.constructor?.name}: ${thrown?.message}`);
  assert.equal(thrown.code, 'upstream_unreachable');
  assert.match(thrown.message, /the upstream model's stream broke off/);
});

test('a proxied responses stream that the upstream breaks off ends with an error event', T, async () => {
  const marker = gw.marker('CUT-RESP');
  gw.upstream.script(marker, [{ text: LONG_TEXT, cutAfterEvents: 6 }]);
  const stream = await gw.client.responses.create({ model: 'mock-responses', stream: true, input: `${marker}: talk` });
  const { events, thrown } = await drain(stream);
  assert.equal(events[0].type, 'response.created');
  // Only whole events came through: the one the upstream broke off in is dropped.
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  // The SDK raises OpenAI's `error` event as an APIError; a cut would be a network error.
  assert.ok(thrown instanceof APIError, `expected an APIError, got ${thrown?.constructor?.name}: ${thrown?.message}`);
  assert.equal(thrown.code, 'upstream_unreachable');
  assert.match(thrown.message, /the upstream model's stream broke off/);
});

test('stopping corral serve while code runs ends the stream with the reason', T, async () => {
  const marker = gw.marker('STOP');
  gw.upstream.script(marker, [
    { code: 'import time\nprint("running", flush=True)\ntime.sleep(60)' },
    { text: 'never reached' },
  ]);
  const stream = await gw.client.responses.create({
    model: 'mock-chat',
    stream: true,
    tools: [CI_TOOL],
    input: `${marker}: wait a minute`,
  });
  const events = [];
  let restarted = null;
  let thrown = null;
  try {
    for await (const e of stream) {
      events.push(e);
      if (e.type === 'response.code_interpreter_call.interpreting' && !restarted) {
        restarted = gw.restart(); // SIGTERM: a clean exit is asserted, then a fresh server
      }
    }
  } catch (err) {
    thrown = err;
  }
  assert.ok(restarted, `the code never ran: ${events.map((e) => e.type).join(', ')}`);
  await restarted;
  const tail = events.slice(-2).map((e) => e.type);
  assert.equal(thrown?.constructor?.name, 'APIError', `the stream ended with ${thrown?.message ?? tail.join(', ')}`);
  assert.equal(thrown.code, 'server_shutting_down');
  assert.match(thrown.message, /shutting down/);
});
