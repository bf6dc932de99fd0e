// The gateway's stored responses (previous_response_id, GET/DELETE
// /v1/responses/{id}, input_items), its errors in OpenAI's shape, the
// model list, and faithful proxying of requests without code_interpreter;
// through the official `openai` SDK against `corral serve`, with the
// scripted upstream of upstream.mjs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import {
  CI_TOOL,
  INCLUDE_OUTPUTS,
  KINDS,
  MASTER_KEY,
  UPSTREAM_MODEL,
  assertNoLeak,
  checkResponseEvents,
  checkUpstreamRequests,
  ciCalls,
  logsOf,
  normalise,
  useGateway,
} from './gateway-helpers.mjs';
import { contentText } from './upstream.mjs';

const gw = useGateway();

const T = { timeout: 60_000 };

const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? '(no stdout)';

async function streamResponse(body) {
  const events = [];
  const s = gw.client.responses.stream(body);
  s.on('event', (e) => events.push(e));
  const r = await s.finalResponse();
  return { r, events };
}

/** Whether a recorded upstream request's conversation holds `text` (in any message or tool output). */
function conversationHas(req, text) {
  const list = req.api === 'chat' ? req.body.messages : typeof req.body.input === 'string' ? [{ content: req.body.input }] : req.body.input;
  return list.some((m) => contentText(m.content).includes(text) || (typeof m.output === 'string' && m.output.includes(text)));
}

/* ------------------------------------------------------------------------ */
/* previous_response_id and stored responses                                  */

for (const model of KINDS) {
  test(`${model}: previous_response_id continues the conversation in the same container`, T, async () => {
    const a = gw.marker(`${model}-prev-a`);
    gw.upstream.script(a, [{ code: 'memo = "kiwi-" + str(6 * 7)' }, { text: 'Noted the memo.' }]);
    const r1 = await gw.client.responses.create({ model, input: `${a} Remember a memo.`, tools: [CI_TOOL] });
    assert.equal(r1.status, 'completed');
    assert.equal(r1.output_text, 'Noted the memo.');
    const [call1] = ciCalls(r1);

    const answer = [{ code: 'print(memo)' }, (req, ctx) => ({ text: `memo is ${stdoutOf(ctx.lastCodeOutput)}` })];
    const b = gw.marker(`${model}-prev-b`);
    gw.upstream.script(b, answer);
    const r2 = await gw.client.responses.create({
      model,
      previous_response_id: r1.id,
      input: `${b} What is in the memo?`,
      tools: [CI_TOOL],
      include: INCLUDE_OUTPUTS,
    });
    assert.equal(r2.status, 'completed', JSON.stringify(r2.error ?? r2.incomplete_details));
    assertNoLeak(r2);
    assert.equal(r2.previous_response_id, r1.id);
    assert.equal(r2.output_text, 'memo is kiwi-42', 'the variable of the first request is visible in the second');
    const [call2] = ciCalls(r2, { include: true });
    assert.equal(call2.container_id, call1.container_id, 'the conversation keeps its container');
    assert.match(logsOf(call2), /kiwi-42/);

    // The upstream got the whole conversation, every time, and never previous_response_id.
    const seenB = gw.upstream.requestsFor(b);
    checkUpstreamRequests(seenB, model, { rounds: 2 });
    assert.ok(conversationHas(seenB[0], a), 'the first request of the chain is not in the conversation sent upstream');
    assert.ok(conversationHas(seenB[0], 'Noted the memo.'), 'the first answer is not in the conversation sent upstream');

    // The same continuation, streamed (a second branch from r1).
    const c = gw.marker(`${model}-prev-c`);
    gw.upstream.script(c, answer);
    const streamed = await streamResponse({
      model,
      previous_response_id: r1.id,
      input: `${c} What is in the memo?`,
      tools: [CI_TOOL],
      include: INCLUDE_OUTPUTS,
    });
    checkResponseEvents(streamed.events, streamed.r);
    assert.deepEqual(normalise(streamed.r), normalise(r2));
    assert.equal(streamed.r.output[0].container_id, call1.container_id);
  });
}

test('store: false reaches a Responses upstream on every turn, with the reasoning it needs back; the response is not kept', T, async () => {
  for (const store of [false, undefined]) {
    const m = gw.marker(`store-${store}`);
    gw.upstream.script(m, [{ code: 'print(6 * 7)' }, (req, ctx) => ({ text: `got ${stdoutOf(ctx.lastCodeOutput)}` })]);
    const r = await gw.client.responses.create({ model: 'mock-responses', input: `${m} go`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS, store });
    assert.equal(r.output_text, 'got 42');
    const seen = gw.upstream.requestsFor(m);
    assert.equal(seen.length, 2);
    for (const q of seen) {
      assert.equal(q.body.store, store, 'store as the client sent it');
      assert.deepEqual(q.body.include, store === false ? ['reasoning.encrypted_content'] : undefined, 'the upstream\'s include');
    }
    if (store === false) {
      await assert.rejects(gw.client.responses.retrieve(r.id), (err) => err instanceof OpenAI.NotFoundError);
    } else {
      assert.equal((await gw.client.responses.retrieve(r.id)).output_text, 'got 42');
    }
  }
});

test('GET and DELETE /v1/responses/{id}, GET .../input_items', T, async () => {
  const m = gw.marker('stored');
  gw.upstream.script(m, [{ code: 'print(2 ** 10)' }, (req, ctx) => ({ text: `2**10 = ${stdoutOf(ctx.lastCodeOutput)}` })]);
  const r = await gw.client.responses.create({ model: 'mock-chat', input: `${m} Compute 2**10.`, tools: [CI_TOOL] });
  assert.equal(r.output_text, '2**10 = 1024');

  const got = await gw.client.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  assert.equal(got.object, 'response');
  assert.equal(got.status, 'completed');
  assert.equal(got.output_text, r.output_text);
  assert.deepEqual(
    got.output.map((o) => [o.type, o.id, o.code ?? null, o.container_id ?? null]),
    r.output.map((o) => [o.type, o.id, o.code ?? null, o.container_id ?? null]),
  );
  assert.deepEqual(got.usage, r.usage);
  assertNoLeak(got);
  // the code's outputs only when include asks for them (kept whatever the create's include)
  assert.equal(got.output.find((o) => o.type === 'code_interpreter_call').outputs, null);
  const full = await gw.client.responses.retrieve(r.id, { include: ['code_interpreter_call.outputs'] });
  assert.deepEqual(full.output.find((o) => o.type === 'code_interpreter_call').outputs, [{ type: 'logs', logs: '1024\n' }]);

  const items = [];
  for await (const item of gw.client.responses.inputItems.list(r.id)) items.push(item);
  assert.ok(items.length >= 1, 'no input items');
  const user = items.find((i) => i.type === 'message' && i.role === 'user');
  assert.ok(user, `no user message among ${JSON.stringify(items)}`);
  assert.ok(typeof user.id === 'string' && user.id.length > 0, 'input item without id');
  assert.match(contentText(user.content), new RegExp(`Compute 2\\*\\*10`));
  assertNoLeak(items, 'the input items');

  await gw.client.responses.delete(r.id);
  await assert.rejects(gw.client.responses.retrieve(r.id), (err) => err instanceof OpenAI.NotFoundError && err.status === 404);
  await assert.rejects(gw.client.responses.delete(r.id), (err) => err instanceof OpenAI.NotFoundError);
  await assert.rejects(
    gw.client.responses.create({ model: 'mock-chat', previous_response_id: r.id, input: `${m} again`, tools: [CI_TOOL] }),
    (err) => err instanceof OpenAI.BadRequestError && err.code === 'previous_response_not_found',
  );
});

/* ------------------------------------------------------------------------ */
/* Errors                                                                     */

test('errors in OpenAI shape: missing container, unknown model, unknown previous_response_id, wrong key', T, async () => {
  const before = gw.upstream.requests.length;
  await assert.rejects(
    gw.client.responses.create({ model: 'mock-chat', input: 'hello', tools: [{ type: 'code_interpreter' }] }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, 400);
      assert.equal(err.param, 'tools[0].container');
      assert.equal(err.code, 'missing_required_parameter');
      assert.equal(err.type, 'invalid_request_error');
      assert.match(err.error.message, /Missing required parameter: 'tools\[0\]\.container'/);
      return true;
    },
  );
  for (const call of [
    () => gw.client.responses.create({ model: 'no-such-model', input: 'hello', tools: [CI_TOOL] }),
    () => gw.client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hello' }] }),
  ]) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.code, 'model_not_found');
      assert.match(err.error.message, /no-such-model/);
      return true;
    });
  }
  const unknown = `resp_${'0'.repeat(48)}`;
  await assert.rejects(
    gw.client.responses.create({ model: 'mock-chat', previous_response_id: unknown, input: 'hello', tools: [CI_TOOL] }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.code, 'previous_response_not_found');
      assert.equal(err.param, 'previous_response_id');
      assert.match(err.error.message, new RegExp(unknown));
      return true;
    },
  );
  const wrong = new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: 'sk-wrong', maxRetries: 0 });
  await assert.rejects(wrong.responses.create({ model: 'mock-chat', input: 'hello' }), (err) => err instanceof OpenAI.AuthenticationError && err.status === 401);
  await assert.rejects(
    wrong.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'hello' }] }),
    (err) => err instanceof OpenAI.AuthenticationError,
  );
  const bare = await fetch(`${gw.server.gatewayUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hello' }] }),
  });
  assert.equal(bare.status, 401, 'no key at all');
  const body = await bare.json();
  assert.equal(typeof body.error?.message, 'string');
  assert.equal(gw.upstream.requests.length, before, 'a refused request reached the upstream');
});

const UPSTREAM_ERRORS = [
  { status: 429, error: { message: 'Rate limit reached for mock-model on requests per min.', type: 'requests', param: null, code: 'rate_limit_exceeded' }, cls: 'RateLimitError' },
  {
    status: 400,
    error: { message: "This model's maximum context length is 8 tokens.", type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' },
    cls: 'BadRequestError',
  },
];

for (const model of KINDS) {
  test(`${model}: upstream errors are passed on with their status and body`, T, async () => {
    for (const { status, error, cls } of UPSTREAM_ERRORS) {
      const attempts = [
        ['responses with code_interpreter', (m) => gw.client.responses.create({ model, input: `${m} hi`, tools: [CI_TOOL] })],
        ['responses streamed', (m) => gw.client.responses.stream({ model, input: `${m} hi`, tools: [CI_TOOL] }).finalResponse()],
        ['plain responses', (m) => gw.client.responses.create({ model, input: `${m} hi` })],
        ['chat with code_interpreter', (m) => gw.client.chat.completions.create({ model, messages: [{ role: 'user', content: `${m} hi` }], tools: [CI_TOOL] })],
        [
          'chat streamed',
          (m) => gw.client.chat.completions.stream({ model, messages: [{ role: 'user', content: `${m} hi` }], tools: [CI_TOOL] }).finalChatCompletion(),
        ],
        ['plain chat', (m) => gw.client.chat.completions.create({ model, messages: [{ role: 'user', content: `${m} hi` }] })],
      ];
      for (const [what, call] of attempts) {
        const m = gw.marker(`${model}-err${status}`);
        gw.upstream.script(m, [{ status, error }]);
        await assert.rejects(call(m), (err) => {
          if (what.endsWith('streamed') && err instanceof OpenAI.APIError && err.status === undefined) {
            // Failed inside a stream that had started (an `error` event): the upstream's words still reach the client.
            assert.match(err.message, new RegExp(error.message.replace(/[.*+?^$()|[\]\\{}]/g, '\\$&')), what);
            return true;
          }
          assert.ok(err instanceof OpenAI[cls], `${what}: ${err.constructor.name}: ${err.message}`);
          assert.equal(err.status, status, what);
          assert.deepEqual(err.error, error, `${what}: the body`);
          return true;
        });
        assert.equal(gw.upstream.requestsFor(m).length, 1, `${what}: the upstream was asked more than once`);
      }
    }
  });
}

/* ------------------------------------------------------------------------ */
/* Requests without code_interpreter: proxied faithfully                      */

/** The payloads of an SSE body: [{event, data}] (data parsed unless [DONE]); comments skipped. */
function parseSse(text) {
  const out = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event = null;
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(':') || line === '') continue;
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (!data.length) continue;
    const joined = data.join('\n');
    out.push({ event, data: joined === '[DONE]' ? joined : JSON.parse(joined) });
  }
  return out;
}

/** A copy with "model" set to `name` wherever it occurs at the top of an object or a response. */
function withModel(value, name) {
  return JSON.parse(JSON.stringify(value, (key, v) => (key === 'model' && typeof v === 'string' ? name : v)));
}

function assertSentFaithfully(req, sent) {
  for (const [key, value] of Object.entries(sent)) {
    if (key === 'model') continue;
    assert.deepEqual(req.body[key], value, `the upstream got a different "${key}"`);
  }
  assert.equal(req.body.model, UPSTREAM_MODEL);
}

test('mock-chat: a chat request without code_interpreter comes back exactly as the upstream answered (plain, streamed)', T, async () => {
  const m = gw.marker('proxy-chat');
  const tool = { type: 'function', function: { name: 'lookup', description: 'Look something up', parameters: { type: 'object', properties: { q: { type: 'string' } } } } };
  gw.upstream.script(m, [{ text: 'Let me look.', calls: [{ fn: { name: 'lookup', arguments: { q: 'kiwi' } } }] }]);
  const body = {
    model: 'mock-chat',
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `${m} What is a kiwi?` }],
    tools: [tool],
    temperature: 0.25,
    max_tokens: 64,
    user: 'user-1',
    seed: 7,
  };
  const raw = await gw.client.chat.completions.create(body).asResponse();
  assert.equal(raw.status, 200);
  const got = await raw.json();
  const [req] = gw.upstream.requestsFor(m);
  assertSentFaithfully(req, body);
  assert.deepEqual(withModel(got, 'x'), withModel(req.reply, 'x'), 'the body differs from the upstream answer');
  assert.ok([UPSTREAM_MODEL, 'mock-chat'].includes(got.model));

  const rawStream = await gw.client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }).asResponse();
  assert.equal(rawStream.status, 200);
  assert.match(rawStream.headers.get('content-type') ?? '', /^text\/event-stream/);
  const chunks = parseSse(await rawStream.text());
  const req2 = gw.upstream.requestsFor(m)[1];
  assertSentFaithfully(req2, { ...body, stream: true, stream_options: { include_usage: true } });
  assert.deepEqual(
    chunks.map((c) => withModel(c.data, 'x')),
    req2.reply.events.map((e) => withModel(e, 'x')),
    'the chunks differ from the upstream stream',
  );
  assert.ok(chunks.every((c) => c.event === null), 'chat chunks carry no event: line');
  const final = await gw.client.chat.completions.stream(body).finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.arguments, '{"q":"kiwi"}');
});

test('mock-responses: a Responses request without code_interpreter comes back exactly as the upstream answered (plain, streamed)', T, async () => {
  const m = gw.marker('proxy-responses');
  const tool = { type: 'function', name: 'lookup', description: 'Look something up', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: false };
  gw.upstream.script(m, [{ text: 'Let me look.', calls: [{ fn: { name: 'lookup', arguments: { q: 'kiwi' } } }] }]);
  const body = {
    model: 'mock-responses',
    instructions: 'Be brief.',
    input: [{ role: 'user', content: [{ type: 'input_text', text: `${m} What is a kiwi?` }] }],
    tools: [tool],
    temperature: 0.25,
    max_output_tokens: 64,
    metadata: { suite: 'corral' },
  };
  const raw = await gw.client.responses.create(body).asResponse();
  assert.equal(raw.status, 200);
  const got = await raw.json();
  const [req] = gw.upstream.requestsFor(m);
  assertSentFaithfully(req, body);
  assert.deepEqual(withModel(got, 'x'), withModel(req.reply, 'x'), 'the body differs from the upstream answer');

  const rawStream = await gw.client.responses.create({ ...body, stream: true }).asResponse();
  assert.equal(rawStream.status, 200);
  assert.match(rawStream.headers.get('content-type') ?? '', /^text\/event-stream/);
  const events = parseSse(await rawStream.text());
  const req2 = gw.upstream.requestsFor(m)[1];
  assert.deepEqual(
    events.map((e) => withModel(e.data, 'x')),
    req2.reply.events.map((e) => withModel(e, 'x')),
    'the events differ from the upstream stream',
  );
  assert.ok(events.every((e) => e.event === e.data.type), 'event: lines match the types');
  const final = await gw.client.responses.stream(body).finalResponse();
  assert.deepEqual(final.output.map((o) => o.type), ['message', 'function_call']);
});

test('plain requests across kinds are translated: responses on a chat upstream, chat on a responses upstream', T, async () => {
  const m1 = gw.marker('cross-responses');
  gw.upstream.script(m1, [{ text: 'A kiwi is a bird.' }]);
  const r = await gw.client.responses.create({ model: 'mock-chat', input: `${m1} What is a kiwi?` });
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'A kiwi is a bird.');
  assert.deepEqual([r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens], [100, 20, 120]);
  assert.equal(gw.upstream.requestsFor(m1)[0].api, 'chat');
  const rs = await streamResponse({ model: 'mock-chat', input: `${m1} What is a kiwi?` });
  checkResponseEvents(rs.events, rs.r);
  assert.equal(rs.r.output_text, 'A kiwi is a bird.');

  const m2 = gw.marker('cross-chat');
  gw.upstream.script(m2, [{ text: 'A kiwi is a fruit.' }]);
  const c = await gw.client.chat.completions.create({ model: 'mock-responses', messages: [{ role: 'user', content: `${m2} What is a kiwi?` }] });
  assert.equal(c.choices[0].message.content, 'A kiwi is a fruit.');
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.deepEqual([c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens], [100, 20, 120]);
  assert.equal(gw.upstream.requestsFor(m2)[0].api, 'responses');
  const cs = await gw.client.chat.completions
    .stream({ model: 'mock-responses', messages: [{ role: 'user', content: `${m2} What is a kiwi?` }], stream_options: { include_usage: true } })
    .finalChatCompletion();
  assert.equal(cs.choices[0].message.content, 'A kiwi is a fruit.');
  assert.equal(cs.usage.total_tokens, 120);
});

test('GET /v1/models lists the configured models', T, async () => {
  const ids = [];
  for await (const model of gw.client.models.list()) ids.push(model.id);
  for (const name of ['mock-chat', 'mock-responses', 'mock-loop']) assert.ok(ids.includes(name), `${name} not in ${JSON.stringify(ids)}`);
  const wrong = new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: `${MASTER_KEY}-not`, maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (err) => err instanceof OpenAI.AuthenticationError);
});

/* ------------------------------------------------------------------------ */
/* conversations                                                              */

for (const model of KINDS) {
  test(`conversations, ${model}: three responses continue one conversation (its items, the code's state); its items listed, added, fetched, deleted`, T, async () => {
    const c = gw.client;
    const conv = await c.conversations.create({
      items: [{ type: 'message', role: 'user', content: 'Remember the word heron.' }],
      metadata: { topic: 'birds' },
    });
    assert.match(conv.id, /^conv_[0-9a-f]{48}$/);
    assert.equal(conv.object, 'conversation');
    assert.deepEqual(conv.metadata, { topic: 'birds' });
    assert.deepEqual(await c.conversations.retrieve(conv.id), conv);

    const a = gw.marker(`${model}-conv-1`);
    gw.upstream.script(a, [{ code: 'x = 6 * 7\nprint(x)' }, (req, ctx) => ({ text: `x is ${stdoutOf(ctx.lastCodeOutput)}` })]);
    const r1 = await c.responses.create({ model, input: `${a} compute`, tools: [CI_TOOL], conversation: conv.id });
    assert.equal(r1.output_text, 'x is 42');
    assert.deepEqual(r1.conversation, { id: conv.id });
    assert.ok(conversationHas(gw.upstream.requestsFor(a)[0], 'Remember the word heron.'), 'the first response did not see the conversation');

    const b = gw.marker(`${model}-conv-2`);
    gw.upstream.script(b, [{ code: 'print(x + 1)' }, (req, ctx) => ({ text: `then ${stdoutOf(ctx.lastCodeOutput)}` })]);
    const r2 = await c.responses.create({ model, input: `${b} more`, tools: [CI_TOOL], conversation: { id: conv.id } });
    assert.equal(r2.output_text, 'then 43', 'the second response ran in the first one\'s container');

    const d = gw.marker(`${model}-conv-3`);
    gw.upstream.script(d, [{ text: 'third' }]);
    const r3 = await c.responses.create({ model, input: `${d} and?`, conversation: conv.id });
    assert.equal(r3.output_text, 'third');
    const seen = gw.upstream.requestsFor(d)[0];
    for (const text of ['Remember the word heron.', `${a} compute`, 'x is 42', `${b} more`, 'then 43']) {
      assert.ok(conversationHas(seen, text), `the third response's upstream request lacks ${JSON.stringify(text)}`);
    }
    assert.ok(conversationHas(seen, '43'), 'what the model read of the earlier code is in the conversation');

    const page = await c.conversations.items.list(conv.id, { order: 'asc', limit: 100 });
    const items = page.data;
    assert.deepEqual(items.map((it) => it.type), [
      'message', 'message', 'code_interpreter_call', 'message', 'message', 'code_interpreter_call', 'message', 'message', 'message',
    ]);
    assert.deepEqual(items.map((it) => it.role ?? null), ['user', 'user', null, 'assistant', 'user', null, 'assistant', 'user', 'assistant']);
    assert.deepEqual(items[0].content, [{ type: 'input_text', text: 'Remember the word heron.' }]);
    assert.equal(items[2].code, 'x = 6 * 7\nprint(x)');
    assert.ok(items.every((it) => !Object.keys(it).some((k) => k.startsWith('_'))), 'an item shows a field of the gateway\'s own');
    assert.equal(new Set(items.map((it) => it.id)).size, items.length, 'item ids are unique');
    // pages, newest first by default
    const newest = await c.conversations.items.list(conv.id, { limit: 2 });
    assert.deepEqual(newest.data.map((it) => it.id), [items[8].id, items[7].id]);
    assert.equal(newest.has_more, true);
    const next = await c.conversations.items.list(conv.id, { limit: 2, after: newest.data[1].id });
    assert.deepEqual(next.data.map((it) => it.id), [items[6].id, items[5].id]);

    const added = await c.conversations.items.create(conv.id, { items: [{ type: 'message', role: 'user', content: 'an extra' }] });
    assert.equal(added.data.length, 1);
    const extra = added.data[0];
    assert.deepEqual(await c.conversations.items.retrieve(extra.id, { conversation_id: conv.id }), extra);
    const afterDelete = await c.conversations.items.delete(extra.id, { conversation_id: conv.id });
    assert.equal(afterDelete.id, conv.id);
    await assert.rejects(c.conversations.items.retrieve(extra.id, { conversation_id: conv.id }), (e) => e.status === 404);

    const updated = await c.conversations.update(conv.id, { metadata: { topic: 'herons' } });
    assert.deepEqual(updated.metadata, { topic: 'herons' });
    assert.deepEqual(await c.conversations.delete(conv.id), { id: conv.id, object: 'conversation.deleted', deleted: true });
    await assert.rejects(c.conversations.retrieve(conv.id), (e) => e.status === 404);
  });
}

test('conversations: the refusals, in OpenAI\'s shape', T, async () => {
  const c = gw.client;
  const conv = await c.conversations.create();
  assert.deepEqual(conv.metadata, {});
  const m = gw.marker('conv-refusals');
  gw.upstream.script(m, [{ text: 'one' }]);
  const r = await c.responses.create({ model: 'mock-chat', input: `${m} hi`, conversation: conv.id });
  for (const [body, status, param, code] of [
    [{ conversation: conv.id, previous_response_id: r.id }, 400, 'conversation', 'mutually_exclusive_parameters'],
    [{ conversation: 'conv_nothing' }, 404, 'conversation', null],
    [{ conversation: 42 }, 400, 'conversation', 'invalid_type'],
  ]) {
    await assert.rejects(c.responses.create({ model: 'mock-chat', input: 'hi', ...body }), (e) => {
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.param, param);
      assert.equal(e.code ?? null, code);
      return true;
    });
  }
  await assert.rejects(c.conversations.items.create(conv.id, { items: [] }), (e) => e.status === 400 && e.param === 'items');
  await assert.rejects(c.conversations.items.create(conv.id, { items: [42] }), (e) => e.status === 400 && e.param === 'items');
  await assert.rejects(c.conversations.create({ metadata: { k: 1 } }), (e) => e.status === 400 && e.param === 'metadata');
  const twice = { type: 'message', role: 'user', content: 'same', id: 'msg_twice' };
  await assert.rejects(c.conversations.create({ items: [twice, twice] }), (e) => e.status === 400 && e.param === 'items');
  await assert.rejects(c.conversations.items.list(conv.id, { limit: 0 }), (e) => e.status === 400 && e.param === 'limit');
  await assert.rejects(c.conversations.retrieve('conv_nothing'), (e) => e.status === 404 && /Conversation with id 'conv_nothing' not found/.test(e.message));
  await c.conversations.delete(conv.id);
});
