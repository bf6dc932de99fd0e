// The scripted upstream of the gateway tests (upstream.mjs), driven directly
// by the official `openai` SDK: it documents that the mock speaks OpenAI's
// wire formats faithfully enough for the SDK's strict stream helpers, so a
// gateway test that fails does so because of the gateway. No corral server.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import OpenAI from 'openai';

import { startUpstream, expectedUsage } from './upstream.mjs';

const T = { timeout: 30_000 };
const CODE_DESCRIPTION = 'Execute Python code in a stateful sandbox (files in /mnt/data).';
const CODE_PARAMETERS = {
  type: 'object',
  properties: { code: { type: 'string', description: 'The Python code to run.' } },
  required: ['code'],
};
const chatCodeTool = (name = 'python') => ({ type: 'function', function: { name, description: CODE_DESCRIPTION, parameters: CODE_PARAMETERS } });
const respCodeTool = (name = 'python') => ({ type: 'function', name, description: CODE_DESCRIPTION, parameters: CODE_PARAMETERS, strict: false });
const weatherChat = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
};
const weatherResp = { type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false };

let upstream;
let client;

before(async () => {
  upstream = await startUpstream({ apiKey: 'sk-upstream' });
  client = new OpenAI({ baseURL: upstream.url, apiKey: 'sk-upstream', maxRetries: 0 });
});
after(() => upstream?.close());

const LONG_CODE = 'import math\nprimes = [2, 3, 5, 7, 11, 13]\nresult = math.prod(primes)\nprint("product:", result)\nresult';

function script(marker) {
  upstream.script(marker, [
    { text: 'Let me compute it.', code: LONG_CODE },
    (req, ctx) => ({ text: `The product is ${ctx.lastCodeOutput} (saw ${ctx.toolOutputs.length} output).` }),
  ]);
}

/** Ids and timestamps replaced, so that two answers can be compared. */
function normalise(value) {
  return JSON.parse(
    JSON.stringify(value, (key, v) => {
      if (['id', 'call_id', 'created', 'created_at', 'completed_at', 'tool_call_id', 'item_id'].includes(key)) return v == null ? v : '<x>';
      if (['parsed', 'parsed_arguments', 'output_parsed'].includes(key)) return undefined; // added by the SDK's stream helpers
      return v;
    }),
  );
}

test('chat: a text turn, a code call, then an answer that read the tool output', T, async () => {
  const marker = 'MOCK-CHAT-1';
  script(marker);
  const messages = [{ role: 'user', content: `${marker}: multiply the first 6 primes` }];
  const first = await client.chat.completions.create({ model: 'mock-model', messages, tools: [chatCodeTool(), weatherChat] });
  assert.equal(first.object, 'chat.completion');
  assert.equal(first.model, 'mock-model');
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, 'Let me compute it.');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'python');
  assert.deepEqual(JSON.parse(call.function.arguments), { code: LONG_CODE });
  assert.deepEqual(
    { p: first.usage.prompt_tokens, c: first.usage.completion_tokens, t: first.usage.total_tokens },
    { p: 100, c: 20, t: 120 },
  );

  messages.push(choice.message, { role: 'tool', tool_call_id: call.id, content: 'stdout:\nproduct: 30030\n\nresult:\n30030' });
  const second = await client.chat.completions.create({ model: 'mock-model', messages, tools: [chatCodeTool(), weatherChat] });
  assert.equal(second.choices[0].finish_reason, 'stop');
  assert.match(second.choices[0].message.content, /^The product is stdout:\nproduct: 30030\n\nresult:\n30030 \(saw 1 output\)\.$/);
  assert.equal(second.usage.prompt_tokens, 110);
  assert.equal(second.usage.completion_tokens, 21);

  const seen = upstream.requestsFor(marker);
  assert.equal(seen.length, 2);
  assert.deepEqual(seen.map((r) => r.round), [0, 1]);
  assert.equal(seen[0].headers.authorization, 'Bearer sk-upstream');
  assert.equal(seen[0].path, '/v1/chat/completions');
  assert.equal(seen[1].ctx.lastCodeOutput, messages.at(-1).content);
});

test('chat: the stream helper ends with what the non-streaming call returns', T, async () => {
  const marker = 'MOCK-CHAT-2';
  script(marker);
  const messages = [{ role: 'user', content: `${marker}: go` }];
  const tools = [chatCodeTool('python_1'), weatherChat];
  const plain = await client.chat.completions.create({ model: 'mock-model', messages, tools });
  const stream = client.chat.completions.stream({ model: 'mock-model', messages, tools, stream_options: { include_usage: true } });
  const argDeltas = [];
  stream.on('tool_calls.function.arguments.delta', (e) => argDeltas.push(e.arguments_delta));
  const streamed = await stream.finalChatCompletion();
  assert.ok(argDeltas.length > 5, `arguments came in ${argDeltas.length} fragments`);
  assert.equal(argDeltas.join(''), JSON.stringify({ code: LONG_CODE }));
  assert.equal(streamed.choices[0].message.tool_calls[0].function.name, 'python_1');
  assert.deepEqual(normalise(streamed.usage), normalise(plain.usage));
  const pick = (c) => ({
    content: c.choices[0].message.content,
    finish: c.choices[0].finish_reason,
    calls: c.choices[0].message.tool_calls.map((t) => ({ type: t.type, name: t.function.name, arguments: t.function.arguments })),
  });
  assert.deepEqual(pick(streamed), pick(plain));

  const req = upstream.requestsFor(marker).at(-1);
  assert.equal(req.stream, true);
  const chunks = req.reply.events;
  assert.equal(chunks.at(-1), '[DONE]');
  const usageChunk = chunks.at(-2);
  assert.deepEqual(usageChunk.choices, []);
  assert.equal(usageChunk.usage.total_tokens, 120);
  assert.ok(req.reply.raw.endsWith('data: [DONE]\n\n'));

  // A text-only stream without include_usage: no usage chunk.
  messages.push(plain.choices[0].message, { role: 'tool', tool_call_id: plain.choices[0].message.tool_calls[0].id, content: '30030' });
  const textStream = client.chat.completions.stream({ model: 'mock-model', messages, tools });
  const deltas = [];
  textStream.on('content', (d) => deltas.push(d));
  const final = await textStream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'The product is 30030 (saw 1 output).');
  assert.ok(deltas.length > 3);
  assert.ok(!upstream.requestsFor(marker).at(-1).reply.events.some((c) => c !== '[DONE]' && c.choices.length === 0));
});

test('responses: a function call of the code tool, then the answer; stream helper agrees', T, async () => {
  const marker = 'MOCK-RESP-1';
  script(marker);
  const tools = [respCodeTool(), weatherResp];
  const input = [{ role: 'user', content: [{ type: 'input_text', text: `${marker}: the product please` }] }];
  const first = await client.responses.create({ model: 'mock-model', input, tools, tool_choice: { type: 'function', name: 'python' } });
  assert.equal(first.object, 'response');
  assert.equal(first.status, 'completed');
  assert.deepEqual(first.output.map((o) => o.type), ['message', 'function_call']);
  const fc = first.output[1];
  assert.equal(fc.name, 'python');
  assert.match(fc.call_id, /^call_/);
  assert.match(fc.id, /^fc_/);
  assert.deepEqual(JSON.parse(fc.arguments), { code: LONG_CODE });
  assert.equal(first.output_text, 'Let me compute it.');
  assert.deepEqual(first.tool_choice, { type: 'function', name: 'python' });
  assert.equal(first.usage.input_tokens, 100);
  assert.equal(first.usage.output_tokens, 20);

  const stream = client.responses.stream({ model: 'mock-model', input, tools });
  const events = [];
  stream.on('event', (e) => events.push(e));
  const streamed = await stream.finalResponse();
  assert.deepEqual(normalise({ ...streamed, tool_choice: null }), normalise({ ...first, tool_choice: null }));
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events.at(-1).type, 'response.completed');
  const argDeltas = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta);
  assert.ok(argDeltas.length > 5);
  assert.equal(argDeltas.join(''), fc.arguments);
  assert.ok(!upstream.requestsFor(marker).at(-1).reply.raw.includes('[DONE]'));

  // Second round: the output of the call goes back as function_call_output.
  const next = [...input, ...first.output, { type: 'function_call_output', call_id: fc.call_id, output: 'result:\n30030' }];
  const second = await client.responses.create({ model: 'mock-model', input: next, tools });
  assert.equal(second.output_text, 'The product is result:\n30030 (saw 1 output).');
  const third = await client.responses.stream({ model: 'mock-model', input: next, tools }).finalResponse();
  assert.equal(third.output_text, second.output_text);
  assert.deepEqual(third.usage, second.usage);
  assert.deepEqual(upstream.requestsFor(marker).map((r) => r.round), [0, 0, 1, 1]);
  const sum = expectedUsage(2);
  assert.equal(first.usage.total_tokens + second.usage.total_tokens, sum.total_tokens);
});

test('responses: a string input, several calls in one turn, a client function', T, async () => {
  const marker = 'MOCK-RESP-2';
  upstream.script(marker, [
    { calls: [{ code: 'x = 1' }, { fn: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
    { text: 'both done' },
  ]);
  const tools = [weatherResp, respCodeTool('python_x')];
  const r = await client.responses.stream({ model: 'mock-model', input: `${marker} hi`, tools }).finalResponse();
  assert.deepEqual(r.output.map((o) => [o.type, o.name]), [['function_call', 'python_x'], ['function_call', 'get_weather']]);
  assert.deepEqual(JSON.parse(r.output[1].arguments), { city: 'Paris' });
  // The outputs interleaved with the calls still make one round.
  const input = [
    { role: 'user', content: `${marker} hi` },
    r.output[0],
    { type: 'function_call_output', call_id: r.output[0].call_id, output: '(no output)' },
    r.output[1],
    { type: 'function_call_output', call_id: r.output[1].call_id, output: '{"temp": 21}' },
  ];
  const done = await client.responses.create({ model: 'mock-model', input, tools });
  assert.equal(done.output_text, 'both done');
  assert.deepEqual(upstream.requestsFor(marker).at(-1).ctx.codeOutputs, ['(no output)']);
});

test('a later user message with its own marker starts that script', T, async () => {
  upstream.script('MOCK-CHAIN-A', [{ code: 'a = 1' }, { text: 'A done' }]);
  upstream.script('MOCK-CHAIN-B', [{ code: 'a' }, (req, ctx) => ({ text: `B saw ${ctx.lastCodeOutput}` })]);
  const tools = [chatCodeTool()];
  const messages = [{ role: 'user', content: 'MOCK-CHAIN-A' }];
  const a0 = await client.chat.completions.create({ model: 'mock-model', messages, tools });
  messages.push(a0.choices[0].message, { role: 'tool', tool_call_id: a0.choices[0].message.tool_calls[0].id, content: '(no output)' });
  const a1 = await client.chat.completions.create({ model: 'mock-model', messages, tools });
  assert.equal(a1.choices[0].message.content, 'A done');
  messages.push(a1.choices[0].message, { role: 'user', content: 'now MOCK-CHAIN-B' });
  const b0 = await client.chat.completions.create({ model: 'mock-model', messages, tools });
  assert.deepEqual(JSON.parse(b0.choices[0].message.tool_calls[0].function.arguments), { code: 'a' });
  messages.push(b0.choices[0].message, { role: 'tool', tool_call_id: b0.choices[0].message.tool_calls[0].id, content: 'result:\n1' });
  const b1 = await client.chat.completions.create({ model: 'mock-model', messages, tools });
  assert.equal(b1.choices[0].message.content, 'B saw result:\n1');
});

test('error turns and mistakes come back as OpenAI errors', T, async () => {
  upstream.script('MOCK-ERR-429', [
    { status: 429, error: { message: 'Rate limit reached for mock-model', type: 'requests', code: 'rate_limit_exceeded' }, headers: { 'retry-after': '1' } },
  ]);
  await assert.rejects(
    client.responses.create({ model: 'mock-model', input: 'MOCK-ERR-429' }),
    (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, 429);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.equal(err.type, 'requests');
      return true;
    },
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'mock-model', messages: [{ role: 'user', content: 'MOCK-ERR-429' }], stream: true }),
    (err) => err instanceof OpenAI.RateLimitError,
  );
  // A code call when the request declares no code tool.
  upstream.script('MOCK-ERR-NOTOOL', [{ code: '1' }]);
  await assert.rejects(
    client.chat.completions.create({ model: 'mock-model', messages: [{ role: 'user', content: 'MOCK-ERR-NOTOOL' }] }),
    (err) => err instanceof OpenAI.BadRequestError && /^mock: /.test(err.message.replace(/^400 /, '')),
  );
  // No script, and the wrong key.
  await assert.rejects(
    client.chat.completions.create({ model: 'mock-model', messages: [{ role: 'user', content: 'nothing known' }] }),
    (err) => err instanceof OpenAI.BadRequestError && /no script marker/.test(err.message),
  );
  const wrong = new OpenAI({ baseURL: upstream.url, apiKey: 'sk-wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (err) => err instanceof OpenAI.AuthenticationError);
});
