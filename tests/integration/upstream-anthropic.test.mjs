// The gateway in front of Anthropic's Messages API (provider anthropic/):
// the scenarios every native upstream plays (native-scenarios.mjs), through
// the mock's Anthropic dialect (upstream-anthropic.mjs), and what is
// Anthropic's own: the x-api-key and anthropic-version headers, thinking
// blocks replayed, the system prompt, max_tokens always sent, the
// parameters' translation, cache usage, an error event in a stream.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { APIError } from 'openai';

import { CI_TOOL, INCLUDE_OUTPUTS, ciCalls, drain } from './gateway-helpers.mjs';
import { NATIVE_MODEL, nativeScenarioTests, useNativeGateway } from './native-scenarios.mjs';
import { anthropicDialect } from './upstream-anthropic.mjs';

const T = { timeout: 120_000 };
const KEY = 'sk-ant-test';
const dialect = anthropicDialect({ apiKey: KEY });

const gw = useNativeGateway({
  dialect,
  modelLines: (base) => ['model: anthropic/claude-test', `api_base: ${base}`, `api_key: ${KEY}`],
});

nativeScenarioTests(gw, { dialect });

/** The Messages requests the mock answered for marker, in order. */
const bodiesFor = (marker) => gw.upstream.requestsFor(marker).map((r) => r.body);


test('anthropic: the key goes as x-api-key with anthropic-version; a wrong one is a 401 with the upstream\'s message', T, async () => {
  const marker = gw.upstream.script(gw.marker('auth'), [{ text: 'Welcome.' }]);
  const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  assert.equal(c.choices[0].message.content, 'Welcome.');
  const [req] = gw.upstream.requestsFor(marker);
  assert.equal(req.headers['x-api-key'], KEY);
  assert.equal(req.headers['anthropic-version'], '2023-06-01');
  assert.equal(req.headers.authorization, undefined);
  assert.equal(req.path, '/v1/messages');

  dialect.apiKey = 'sk-ant-another';
  try {
    for (const stream of [false, true]) {
      await assert.rejects(
        gw.client.chat.completions.create({ model: NATIVE_MODEL, stream, messages: [{ role: 'user', content: `${marker} hi` }] }).then(async (s) => (stream ? drain(s) : s)),
        (err) => {
          assert.equal(err.status, 401);
          assert.match(err.error?.message ?? err.message, /invalid x-api-key/);
          return true;
        },
      );
    }
    await assert.rejects(gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} hi` }), (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.error?.type, 'authentication_error');
      assert.match(err.error?.message ?? '', /invalid x-api-key/);
      return true;
    });
  } finally {
    dialect.apiKey = KEY;
  }
});

const THINKING = { thinking: 'The product of small primes: compute it.', signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxsig-test==' };

for (const stream of [false, true]) {
  const how = stream ? 'streamed' : 'whole';
  test(`anthropic: a thinking block and its signature come back verbatim on the next turn, ${how}`, T, async () => {
    const marker = gw.upstream.script(gw.marker('thinking'), [
      { thinking: THINKING, text: 'Computing.', code: 'print(6 * 7)' },
      (chat) => {
        const assistant = chat.messages.find((m) => m.role === 'assistant');
        return { text: `replayed: ${JSON.stringify(assistant?.thinking ?? null)}` };
      },
    ]);
    const r = await (stream
      ? gw.client.responses.stream({ model: NATIVE_MODEL, input: `${marker} think`, tools: [CI_TOOL] }).finalResponse()
      : gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} think`, tools: [CI_TOOL] }));
    const seen = gw.upstream.requestsFor(marker);
    assert.equal(seen.length, 2);
    for (const s of seen) assert.equal(s.mockError, undefined, s.mockError);
    const assistant = seen[1].body.messages[1];
    assert.equal(assistant.role, 'assistant');
    assert.deepEqual(assistant.content[0], { type: 'thinking', ...THINKING });
    assert.deepEqual(assistant.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
    assert.equal(r.output_text, `Computing.replayed: ${JSON.stringify([{ type: 'thinking', ...THINKING }])}`);
  });
}

test('anthropic: a redacted thinking block comes back too, through chat completions', T, async () => {
  const marker = gw.upstream.script(gw.marker('redacted'), [
    { redactedThinking: 'EmwKAhgBEgy3va3pzix/redacted', code: 'print(1)' },
    { text: 'Done.' },
  ]);
  const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} go` }], tools: [CI_TOOL] });
  assert.equal(c.choices[0].message.content, 'Done.');
  const seen = gw.upstream.requestsFor(marker);
  assert.equal(seen[1].mockError, undefined, seen[1].mockError);
  assert.deepEqual(seen[1].body.messages[1].content[0], { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/redacted' });
});

test('anthropic: the system prompt goes as `system`, and max_tokens is sent when the client set none', T, async () => {
  const marker = gw.upstream.script(gw.marker('system'), [{ text: 'Short.' }]);
  await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'developer', content: 'Answer in English.' },
      { role: 'user', content: `${marker} hi` },
    ],
  });
  await gw.client.responses.create({ model: NATIVE_MODEL, instructions: 'Be terse.', input: `${marker} hi` });
  const [chatBody, respBody] = bodiesFor(marker);
  assert.equal(chatBody.system, 'Be brief.\n\nAnswer in English.');
  assert.equal(respBody.system, 'Be terse.');
  for (const b of [chatBody, respBody]) {
    assert.equal(b.max_tokens, 4096);
    assert.equal(b.model, 'claude-test');
    assert.deepEqual(b.messages.map((m) => m.role), ['user']);
  }
});

test('anthropic: the parameters that map are translated', T, async () => {
  const marker = gw.upstream.script(gw.marker('params'), [{ text: 'Fine.' }]);
  const weather = { type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
  await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [{ role: 'user', content: `${marker} hi` }],
    max_completion_tokens: 3000,
    temperature: 0.25,
    top_p: 0.5,
    stop: ['END'],
    user: 'user-42',
    tools: [weather],
    tool_choice: 'required',
    parallel_tool_calls: false,
  });
  const [b] = bodiesFor(marker);
  assert.equal(b.max_tokens, 3000);
  assert.equal(b.temperature, 0.25);
  assert.equal(b.top_p, 0.5);
  assert.deepEqual(b.stop_sequences, ['END']);
  assert.deepEqual(b.metadata, { user_id: 'user-42' });
  assert.equal(b.thinking, undefined);
  assert.deepEqual(b.tool_choice, { type: 'any', disable_parallel_tool_use: true });
  assert.deepEqual(b.tools, [{ name: 'get_weather', description: 'The weather', input_schema: weather.function.parameters }]);

  // with thinking on, what the API refuses beside it is left out: the temperature, a
  // top_p under 0.95, a forced tool (the dialect refuses those as the API does)
  const thinking = gw.upstream.script(gw.marker('params-thinking'), [{ text: 'Fine.' }]);
  const c = await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [{ role: 'user', content: `${thinking} hi` }],
    max_completion_tokens: 3000,
    temperature: 0.25,
    top_p: 0.5,
    tools: [weather],
    tool_choice: 'required',
    parallel_tool_calls: false,
    reasoning_effort: 'low',
  });
  assert.equal(c.choices[0].message.content, 'Fine.');
  const [t] = bodiesFor(thinking);
  assert.deepEqual(t.thinking, { type: 'enabled', budget_tokens: 1024 });
  assert.equal(t.temperature, undefined);
  assert.equal(t.top_p, undefined);
  assert.deepEqual(t.tool_choice, { type: 'auto', disable_parallel_tool_use: true });
});

test('anthropic: a parameter Anthropic cannot take is refused with a 400 naming it', T, async () => {
  await assert.rejects(
    gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: 'hi' }], temperature: 1.5 }),
    (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /'temperature'/);
      return true;
    },
  );
});

test('anthropic: cached input tokens count in the prompt and as cached', T, async () => {
  const marker = gw.upstream.script(gw.marker('cache'), [{ text: 'Cached.', cachedTokens: 60, usage: { prompt_tokens: 100, completion_tokens: 7 } }]);
  const r = await gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} hi` });
  assert.equal(r.usage.input_tokens, 100);
  assert.equal(r.usage.input_tokens_details.cached_tokens, 60);
  assert.equal(r.usage.output_tokens, 7);
  const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: `${marker} hi` }] });
  const { events } = await drain(c);
  const usage = events.findLast((e) => e.usage)?.usage;
  assert.equal(usage.prompt_tokens, 100);
  assert.equal(usage.prompt_tokens_details.cached_tokens, 60);
});

test('anthropic: an error event in the stream reaches the streamed client with its message', T, async () => {
  const marker = gw.upstream.script(gw.marker('overloaded'), [{ text: 'This answer breaks off.', streamError: { type: 'overloaded_error', message: 'Overloaded' } }]);
  const s = await gw.client.responses.create({ model: NATIVE_MODEL, stream: true, input: `${marker} hi` });
  const { events, thrown } = await drain(s);
  assert.equal(events[0].type, 'response.created');
  assert.ok(thrown instanceof APIError, `expected an APIError, got ${thrown?.constructor?.name}: ${thrown?.message}`);
  assert.match(thrown.message, /Overloaded/);
  assert.match(thrown.message, /overloaded_error/);

  const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, stream: true, messages: [{ role: 'user', content: `${marker} hi` }] });
  const chat = await drain(c);
  assert.ok(chat.thrown instanceof APIError, `expected an APIError, got ${chat.thrown?.constructor?.name}: ${chat.thrown?.message}`);
  assert.match(chat.thrown.message, /Overloaded/);
});

test('anthropic: an image the client sends by http(s) URL goes as a url source', T, async () => {
  const marker = gw.upstream.script(gw.marker('image-url'), [{ text: 'A cat.' }]);
  await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [{ role: 'user', content: [{ type: 'text', text: `${marker} what is it?` }, { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }],
  });
  const [b] = bodiesFor(marker);
  assert.deepEqual(b.messages[0].content[1], { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } });
});

test('anthropic: a stop at max_tokens is an incomplete response', T, async () => {
  const marker = gw.upstream.script(gw.marker('length'), [{ text: 'Cut', stopReason: 'max_tokens' }]);
  const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  assert.equal(c.choices[0].finish_reason, 'length');
  const r = await gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} hi`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS });
  assert.equal(r.status, 'incomplete');
  assert.equal(ciCalls(r).length, 0);
});
