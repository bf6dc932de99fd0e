// Gemini's API as a native upstream (gemini/ models): the shared scenarios
// (native-scenarios.mjs) through the generateContent dialect
// (upstream-gemini.mjs), and Gemini's own: the API key header, the
// parameters and tools as Gemini takes them, thought signatures sent back,
// an error in the middle of a stream.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CI_TOOL } from './gateway-helpers.mjs';
import { NATIVE_MODEL, nativeScenarioTests, useNativeGateway } from './native-scenarios.mjs';
import { geminiDialect } from './upstream-gemini.mjs';

const KEY = 'test-gemini-key';
const T = { timeout: 120_000 };
const dialect = geminiDialect({ apiKey: KEY });
const gw = useNativeGateway({
  dialect,
  modelLines: (base) => ['model: gemini/gemini-test', `api_base: ${base}`, `api_key: ${KEY}`],
});

nativeScenarioTests(gw, { dialect });

test('gemini: the key goes in x-goog-api-key, to models/M:generateContent or :streamGenerateContent?alt=sse', T, async () => {
  const marker = gw.upstream.script(gw.marker('auth'), [{ text: 'ok' }]);
  await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  const s = gw.client.chat.completions.stream({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  assert.equal((await s.finalChatCompletion()).choices[0].message.content, 'ok');
  const seen = gw.upstream.requestsFor(marker);
  assert.deepEqual(seen.map((r) => r.path), ['/v1beta/models/gemini-test:generateContent', '/v1beta/models/gemini-test:streamGenerateContent']);
  for (const r of seen) {
    assert.equal(r.headers['x-goog-api-key'], KEY);
    assert.equal(r.headers.authorization, undefined);
    assert.equal(r.status, 200);
  }
});

test('gemini: parameters, a system prompt and a client tool in Gemini\'s shape', T, async () => {
  const marker = gw.upstream.script(gw.marker('params'), [{ calls: [{ fn: { name: 'lookup', arguments: { q: 'x', n: 2 } } }] }]);
  const tool = {
    type: 'function',
    function: {
      name: 'lookup',
      description: 'Look a thing up',
      strict: true,
      parameters: {
        $schema: 'http://json-schema.org/draft-07/schema#',
        type: 'object',
        additionalProperties: false,
        properties: { q: { type: 'string' }, n: { type: ['integer', 'null'] }, opts: { $ref: '#/$defs/Opts' } },
        required: ['q', 'n'],
        $defs: { Opts: { type: 'object', additionalProperties: false, properties: { deep: { type: 'boolean' } } } },
      },
    },
  };
  const c = await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: `${marker} look it up` }],
    tools: [tool],
    tool_choice: { type: 'function', function: { name: 'lookup' } },
    temperature: 0.25,
    top_p: 0.5,
    max_completion_tokens: 300,
    stop: ['END'],
    seed: 7,
  });
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const call = c.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'lookup');
  assert.deepEqual(JSON.parse(call.function.arguments), { q: 'x', n: 2 });
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  const [req] = gw.upstream.requestsFor(marker);
  assert.equal(req.mockError, undefined, req.mockError);
  const body = req.body;
  assert.deepEqual(body.systemInstruction, { parts: [{ text: 'Be brief.' }] });
  assert.deepEqual(body.generationConfig, { candidateCount: 1, temperature: 0.25, topP: 0.5, maxOutputTokens: 300, stopSequences: ['END'], seed: 7 });
  assert.deepEqual(body.toolConfig, { functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['lookup'] } });
  const decl = body.tools[0].functionDeclarations.find((d) => d.name === 'lookup');
  assert.deepEqual(decl.parameters, {
    type: 'object',
    properties: { q: { type: 'string' }, n: { type: 'integer', nullable: true }, opts: { type: 'object', properties: { deep: { type: 'boolean' } } } },
    required: ['q', 'n'],
  });
});

test('gemini: the thought signature of a call goes back as it came', T, async () => {
  const marker = gw.upstream.script(gw.marker('signature'), [{ code: 'print(6 * 7)' }, { text: 'done' }]);
  for (const stream of [false, true]) {
    const body = { model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} go` }], tools: [CI_TOOL] };
    const c = stream ? await gw.client.chat.completions.stream(body).finalChatCompletion() : await gw.client.chat.completions.create(body);
    assert.equal(c.choices[0].message.content, 'done');
  }
  const seen = gw.upstream.requestsFor(marker);
  assert.equal(seen.length, 4);
  for (const [first, second] of [seen.slice(0, 2), seen.slice(2)]) {
    assert.equal(second.mockError, undefined, second.mockError);
    const given = first.reply.events ? first.reply.events.flatMap((e) => e.candidates[0].content.parts) : first.reply.candidates[0].content.parts;
    const sig = given.find((p) => p.functionCall).thoughtSignature;
    assert.ok(sig);
    const model = second.body.contents.find((c) => c.role === 'model');
    assert.equal(model.parts.find((p) => p.functionCall).thoughtSignature, sig);
    const user = second.body.contents[second.body.contents.indexOf(model) + 1];
    assert.equal(user.parts[0].functionResponse.name, 'python');
    assert.match(user.parts[0].functionResponse.response.content, /42/);
  }
});

test('gemini: an error event in the middle of a stream reaches the client with its message', T, async () => {
  const marker = gw.upstream.script(gw.marker('stream-error'), [{ text: 'This answer will not finish, it is long enough to stream.' }]);
  dialect.failNextStream = 'mock: the model is overloaded';
  const s = gw.client.chat.completions.stream({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  await assert.rejects(s.finalChatCompletion(), (err) => {
    assert.match(err.message, /mock: the model is overloaded/);
    return true;
  });
  dialect.failNextStream = 'mock: the model is overloaded again';
  const r = gw.client.responses.stream({ model: NATIVE_MODEL, input: `${marker} hi` });
  await assert.rejects(r.finalResponse(), (err) => {
    assert.match(err.message, /mock: the model is overloaded again/);
    return true;
  });
});

test('gemini: a request Gemini cannot take is refused before it is sent', T, async () => {
  const marker = gw.upstream.script(gw.marker('refused'), [{ text: 'never' }]);
  await assert.rejects(
    gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }], reasoning_effort: 'extreme' }),
    (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /reasoning_effort/);
      return true;
    },
  );
  assert.equal(gw.upstream.requestsFor(marker).length, 0);
});
