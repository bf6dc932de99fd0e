// Anthropic's Messages API on the gateway (/v1/messages), with Anthropic's
// code execution tool run in corral's containers, through the official
// `@anthropic-ai/sdk` client. The upstream is the scripted mock: its
// Anthropic dialect for a model of provider anthropic/, and its Chat
// Completions side for an OpenAI-compatible one (reached by translation).
// The model sees the tool's calls as client tools (bash_code_execution,
// text_editor_code_execution; code_execution for the older version); the
// client sees server_tool_use blocks and their results, as Anthropic's API
// gives them.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import Anthropic, { toFile } from '@anthropic-ai/sdk';

import { MASTER_KEY } from './gateway-helpers.mjs';
import { NATIVE_MODEL, useNativeGateway } from './native-scenarios.mjs';
import { anthropicDialect } from './upstream-anthropic.mjs';

const T = { timeout: 180_000 };
const KEY = 'sk-ant-test';
const CHAT_MODEL = 'chat-model';
const LOOP_MODEL = 'loop-model';
const BETA = ['code-execution-2025-08-25'];
const TOOL = { type: 'code_execution_20250825', name: 'code_execution' };
const OLD_TOOL = { type: 'code_execution_20250522', name: 'code_execution' };
const SEED = 'What is the product of the first 6 primes? Use code.';
const PRIMES_PY = 'import math\nprint(math.prod([2, 3, 5, 7, 11, 13]))';
const EXEC_TIMEOUT = 10; // seconds a call may run (gateway.exec_timeout)

const dialect = anthropicDialect({ apiKey: KEY });
const gw = useNativeGateway({
  dialect,
  modelLines: (base) => ['model: anthropic/claude-test', `api_base: ${base}`, `api_key: ${KEY}`],
  topLines: (base) => [
    `  - model_name: ${CHAT_MODEL}`,
    '    litellm_params:',
    '      model: openai/mock-model',
    `      api_base: ${base}/v1`,
    '      api_key: sk-upstream',
    `  - model_name: ${LOOP_MODEL}`,
    '    litellm_params:',
    '      model: anthropic/claude-test',
    `      api_base: ${base}`,
    `      api_key: ${KEY}`,
    '      max_agentic_loops: 2',
  ],
  gatewayLines: [`exec_timeout: ${EXEC_TIMEOUT}`],
});

let client = null;
const anthropic = () => {
  client ??= new Anthropic({ baseURL: gw.server.gatewayUrl.replace(/\/v1$/, ''), apiKey: MASTER_KEY, maxRetries: 0, timeout: 120_000 });
  return client;
};

/** A bash call of the mock's (a function call of the tool the gateway declared). */
const bash = (command) => ({ calls: [{ fn: { name: 'bash_code_execution', arguments: JSON.stringify({ command }) } }] });
const editor = (input) => ({ calls: [{ fn: { name: 'text_editor_code_execution', arguments: JSON.stringify(input) } }] });
const python = (code) => ({ calls: [{ fn: { name: 'code_execution', arguments: JSON.stringify({ code }) } }] });
/** The last tool result the model was given, as text. */
const lastOutput = (ctx) => String(ctx.lastToolOutput ?? '');

/**
 * A message through the SDK, whole or streamed. A stream's events are
 * checked against the contract: message_start first, each block's start,
 * deltas and stop in order with indexes from 0, message_delta then
 * message_stop last; the message the SDK assembles from them is returned.
 */
async function send(params, stream) {
  const c = anthropic().beta.messages;
  if (!stream) return c.create({ betas: BETA, ...params });
  const events = [];
  const s = c.stream({ betas: BETA, ...params });
  s.on('streamEvent', (e) => events.push(e));
  const message = await s.finalMessage();
  checkEvents(events, message);
  Object.defineProperty(message, 'events', { value: events });
  return message;
}

function checkEvents(events, message) {
  assert.equal(events[0].type, 'message_start');
  assert.equal(events.at(-1).type, 'message_stop');
  assert.equal(events.at(-2).type, 'message_delta');
  assert.equal(events.at(-2).delta.stop_reason, message.stop_reason);
  let open = null;
  let next = 0;
  for (const e of events.slice(1, -2)) {
    if (e.type === 'content_block_start') {
      assert.equal(open, null, 'a block starts while another is open');
      assert.equal(e.index, next++);
      open = e.index;
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, open);
    } else if (e.type === 'content_block_stop') {
      assert.equal(e.index, open);
      open = null;
    } else {
      assert.equal(e.type, 'ping', `unexpected event ${e.type}`);
    }
  }
  assert.equal(open, null);
  assert.equal(next, message.content.length);
}

/** The message's blocks of a type. */
const blocks = (m, type) => m.content.filter((b) => b.type === type);

for (const stream of [false, true]) {
  const how = stream ? 'streamed' : 'whole';

  test(`messages: the seed question through bash (code_execution_20250825), ${how}`, T, async () => {
    const marker = gw.upstream.script(gw.marker('seed-bash'), [
      bash(`python3 -c "${PRIMES_PY.replace('\n', '; ')}"`),
      (req, ctx) => ({ text: `The product is ${lastOutput(ctx).match(/\d{5}/)[0]}.` }),
    ]);
    const betas = [...BETA, 'files-api-2025-04-14', 'context-management-2025-06-27'];
    const m = await send({ model: NATIVE_MODEL, max_tokens: 1024, betas, tools: [TOOL], messages: [{ role: 'user', content: `${marker} ${SEED}` }] }, stream);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, NATIVE_MODEL);
    assert.equal(m.stop_reason, 'end_turn');
    assert.deepEqual(m.content.map((b) => b.type), ['server_tool_use', 'bash_code_execution_tool_result', 'text']);
    const [use, result, text] = m.content;
    assert.equal(use.name, 'bash_code_execution');
    assert.match(use.id, /^srvtoolu_/);
    assert.match(use.input.command, /math\.prod/);
    assert.equal(result.tool_use_id, use.id);
    assert.equal(result.content.type, 'bash_code_execution_result');
    assert.equal(result.content.stdout, '30030\n');
    assert.equal(result.content.stderr, '');
    assert.equal(result.content.return_code, 0);
    assert.deepEqual(result.content.content, []);
    assert.equal(text.text, 'The product is 30030.');
    if (stream) {
      // the upstream's text came on as it streamed: in its pieces, not whole at the end
      const deltas = m.events.filter((e) => e.type === 'content_block_delta' && e.index === 2);
      assert.ok(deltas.length > 1, `the text came in ${deltas.length} delta(s)`);
      assert.equal(deltas.map((e) => e.delta.text).join(''), text.text);
    }
    assert.match(m.container.id, /^cntr_/);
    assert.ok(Date.parse(m.container.expires_at) > Date.now());
    // the two turns' usage, summed (the mock's rounds 0 and 1)
    assert.equal(m.usage.input_tokens, 100 + 110);
    assert.equal(m.usage.output_tokens, 20 + 21);
    // the upstream saw a client tool, and the result as a tool_result
    const seen = gw.upstream.requestsFor(marker);
    assert.equal(seen.length, 2);
    for (const r of seen) assert.equal(r.status, 200, JSON.stringify(r.reply)?.slice(0, 300));
    assert.deepEqual(seen[0].body.tools.map((t) => t.name), ['bash_code_execution', 'text_editor_code_execution']);
    // the betas of what the gateway runs itself stay with it; the others go on
    assert.equal(seen[0].headers['anthropic-beta'], 'context-management-2025-06-27');
    const last = seen[1].body.messages.at(-1);
    assert.equal(last.role, 'user');
    assert.equal(last.content[0].type, 'tool_result');
    assert.match(last.content[0].content, /exit code: 0\nstdout:\n30030/);
  });

  test(`messages: the seed question through Python (code_execution_20250522), ${how}`, T, async () => {
    const marker = gw.upstream.script(gw.marker('seed-python'), [
      python(PRIMES_PY),
      (req, ctx) => ({ text: `The product is ${lastOutput(ctx).match(/\d{5}/)[0]}.` }),
    ]);
    const m = await send({ model: NATIVE_MODEL, max_tokens: 1024, tools: [OLD_TOOL], messages: [{ role: 'user', content: `${marker} ${SEED}` }] }, stream);
    assert.deepEqual(m.content.map((b) => b.type), ['server_tool_use', 'code_execution_tool_result', 'text']);
    const [use, result, text] = m.content;
    assert.equal(use.name, 'code_execution');
    assert.equal(use.input.code, PRIMES_PY);
    assert.deepEqual(result.content, { type: 'code_execution_result', stdout: '30030\n', stderr: '', return_code: 0, content: [] });
    assert.equal(text.text, 'The product is 30030.');
    assert.equal(m.stop_reason, 'end_turn');
  });

  test(`messages: an OpenAI-compatible upstream, reached by translation, ${how}`, T, async () => {
    const marker = gw.upstream.script(gw.marker('seed-chat'), [
      bash(`python3 -c "${PRIMES_PY.replace('\n', '; ')}"`),
      (req, ctx) => ({ text: `The product is ${lastOutput(ctx).match(/\d{5}/)[0]}.` }),
    ]);
    const m = await send({ model: CHAT_MODEL, max_tokens: 1024, tools: [TOOL], system: 'You are terse.', messages: [{ role: 'user', content: `${marker} ${SEED}` }] }, stream);
    assert.deepEqual(m.content.map((b) => b.type), ['server_tool_use', 'bash_code_execution_tool_result', 'text']);
    assert.equal(m.content[1].content.stdout, '30030\n');
    assert.equal(m.content[2].text, 'The product is 30030.');
    assert.equal(m.model, CHAT_MODEL);
    const seen = gw.upstream.requestsFor(marker);
    assert.deepEqual(seen.map((r) => r.path), ['/v1/chat/completions', '/v1/chat/completions']);
    assert.equal(seen[0].body.messages[0].role, 'system');
    assert.equal(seen[0].body.messages[0].content, 'You are terse.');
    assert.equal(seen[0].body.max_tokens, 1024);
    assert.deepEqual(seen[0].body.tools.map((t) => t.function.name), ['bash_code_execution', 'text_editor_code_execution']);
    assert.equal(seen[1].body.messages.at(-1).role, 'tool');
    assert.equal(m.usage.input_tokens, 100 + 110);
  });

  test(`messages: without the tool, the request goes to the upstream as it is, ${how}`, T, async () => {
    const marker = gw.upstream.script(gw.marker('plain'), [{ text: 'Hello there.' }]);
    const m = await send({ model: NATIVE_MODEL, max_tokens: 64, messages: [{ role: 'user', content: `${marker} hi` }] }, stream);
    assert.deepEqual(m.content.map((b) => [b.type, b.text]), [['text', 'Hello there.']]);
    assert.equal(m.stop_reason, 'end_turn');
    const [seen] = gw.upstream.requestsFor(marker);
    assert.equal(seen.body.model, 'claude-test');
    assert.equal(seen.body.max_tokens, 64);
    assert.equal(seen.body.stream ?? false, stream);
    assert.equal(seen.headers['anthropic-beta'], BETA.join(','));
  });
}

test('messages: the text editor creates, views and edits a file', T, async () => {
  const marker = gw.upstream.script(gw.marker('editor'), [
    editor({ command: 'create', path: 'notes/todo.txt', file_text: 'one\ntwo\nthree\n' }),
    editor({ command: 'view', path: 'notes/todo.txt', view_range: [2, -1] }),
    editor({ command: 'str_replace', path: 'notes/todo.txt', old_str: 'two', new_str: 'TWO\nand a half' }),
    editor({ command: 'create', path: 'notes/todo.txt', file_text: 'replaced\n' }),
    bash('cat /mnt/data/notes/todo.txt'),
    { text: 'Done.' },
  ]);
  const m = await send({ model: NATIVE_MODEL, max_tokens: 1024, tools: [TOOL], messages: [{ role: 'user', content: `${marker} edit` }] }, false);
  const results = blocks(m, 'text_editor_code_execution_tool_result').map((b) => b.content);
  assert.equal(results.length, 4);
  assert.deepEqual(results[0], { type: 'text_editor_code_execution_create_result', is_file_update: false });
  assert.deepEqual(results[1], { type: 'text_editor_code_execution_view_result', content: 'two\nthree', file_type: 'text', num_lines: 2, start_line: 2, total_lines: 3 });
  assert.deepEqual(results[2], {
    type: 'text_editor_code_execution_str_replace_result', old_start: 2, old_lines: 1, new_start: 2, new_lines: 2, lines: ['-two', '+TWO', '+and a half'],
  });
  assert.deepEqual(results[3], { type: 'text_editor_code_execution_create_result', is_file_update: true });
  assert.equal(blocks(m, 'bash_code_execution_tool_result')[0].content.stdout, 'replaced\n');
  // the model read the view with its lines numbered
  const seen = gw.upstream.requestsFor(marker);
  assert.match(seen[2].body.messages.at(-1).content[0].content, /\(lines 2 to 3 of 3\)\n\s+2\ttwo\n\s+3\tthree/);
});

test('messages: errors the model reads and then mends', T, async () => {
  const marker = gw.upstream.script(gw.marker('mend'), [
    bash('python3 -c "print(undefined_name)"'),
    (req, ctx) => {
      assert.match(lastOutput(ctx), /exit code: 1\n[\s\S]*NameError/);
      return editor({ command: 'view', path: 'missing.txt' });
    },
    (req, ctx) => {
      assert.match(lastOutput(ctx), /^error: file_not_found/);
      return bash('python3 -c "print(6 * 7)"');
    },
    { text: 'Fixed: 42.' },
  ]);
  const m = await send({ model: NATIVE_MODEL, max_tokens: 1024, tools: [TOOL], messages: [{ role: 'user', content: `${marker} try` }] }, true);
  const [first, second] = blocks(m, 'bash_code_execution_tool_result').map((b) => b.content);
  assert.equal(first.return_code, 1);
  assert.match(first.stderr, /NameError: name 'undefined_name' is not defined/);
  assert.equal(second.stdout, '42\n');
  const [view] = blocks(m, 'text_editor_code_execution_tool_result');
  assert.equal(view.content.type, 'text_editor_code_execution_tool_result_error');
  assert.equal(view.content.error_code, 'file_not_found');
  assert.match(view.content.error_message, /missing\.txt/);
  assert.equal(m.content.at(-1).text, 'Fixed: 42.');
  const seen = gw.upstream.requestsFor(marker);
  assert.equal(seen[2].body.messages.at(-1).content[0].is_error, true);
});

test('messages: a container is reused by id across requests, and shared with the Containers API', T, async () => {
  const first = gw.upstream.script(gw.marker('reuse-1'), [bash('echo kept > state.txt && echo written'), { text: 'Saved.' }]);
  const m1 = await send({ model: NATIVE_MODEL, max_tokens: 256, tools: [TOOL], messages: [{ role: 'user', content: `${first} save` }] }, false);
  const id = m1.container.id;
  const second = gw.upstream.script(gw.marker('reuse-2'), [bash('cat state.txt'), (req, ctx) => ({ text: `It says ${lastOutput(ctx).match(/kept/)[0]}.` })]);
  const m2 = await send({ model: NATIVE_MODEL, max_tokens: 256, tools: [TOOL], container: id, messages: [{ role: 'user', content: `${second} read` }] }, true);
  assert.equal(m2.container.id, id);
  assert.equal(blocks(m2, 'bash_code_execution_tool_result')[0].content.stdout, 'kept\n');
  // the same container, seen through OpenAI's Containers API
  const listed = await gw.client.containers.files.list(id);
  assert.ok(listed.data.some((f) => f.path === '/mnt/data/state.txt'), JSON.stringify(listed.data));
  // a container that does not exist is a 404 in Anthropic's shape
  await assert.rejects(send({ model: NATIVE_MODEL, max_tokens: 256, tools: [TOOL], container: 'cntr_nope', messages: [{ role: 'user', content: 'x' }] }, false), (err) => {
    assert.ok(err instanceof Anthropic.NotFoundError, String(err));
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'not_found_error');
    assert.match(err.error.error.message, /cntr_nope/);
    return true;
  });
});

test('messages: a container the request names that is deleted during it is not replaced by another', T, async () => {
  const doomed = await gw.client.containers.create({ name: 'doomed' });
  const marker = gw.upstream.script(gw.marker('doomed'), [
    bash('echo first'),
    // (answered once the container is deleted)
    () => ({ ...bash('echo second'), until: gw.client.containers.delete(doomed.id) }),
    (req, ctx) => ({ text: `Told: ${lastOutput(ctx).split('\n')[0]}` }),
  ]);
  const m = await send({ model: NATIVE_MODEL, max_tokens: 256, tools: [TOOL], container: doomed.id, messages: [{ role: 'user', content: `${marker} go` }] }, false);
  const [first, second] = blocks(m, 'bash_code_execution_tool_result').map((b) => b.content);
  assert.equal(first.stdout, 'first\n');
  assert.deepEqual(second, { type: 'bash_code_execution_tool_result_error', error_code: 'unavailable' });
  assert.equal(m.content.at(-1).text, 'Told: error: unavailable');
  await assert.rejects(gw.client.containers.retrieve(doomed.id), (err) => err.status === 404);
});

test('messages: a file uploaded, analysed in the container, and its output downloaded', T, async () => {
  const csv = 'city,people\nLyon,522\nNice,342\nLille,236\n';
  const uploaded = await anthropic().beta.files.upload({ file: await toFile(Buffer.from(csv), 'cities.csv', { type: 'text/csv' }) }, { betas: ['files-api-2025-04-14'] });
  const marker = gw.upstream.script(gw.marker('files'), [
    bash("python3 -c \"import csv; rows = list(csv.DictReader(open('cities.csv'))); open('total.txt', 'w').write(str(sum(int(r['people']) for r in rows)))\" && cat total.txt"),
    (req, ctx) => ({ text: `The total is ${lastOutput(ctx).match(/stdout:\n(\d+)/)[1]}.` }),
  ]);
  const m = await send({
    model: NATIVE_MODEL,
    max_tokens: 1024,
    tools: [TOOL],
    messages: [{ role: 'user', content: [{ type: 'text', text: `${marker} Sum the people.` }, { type: 'container_upload', file_id: uploaded.id }] }],
  }, false);
  const [result] = blocks(m, 'bash_code_execution_tool_result');
  assert.equal(result.content.stdout, '1100');
  assert.equal(m.content.at(-1).text, 'The total is 1100.');
  const outputs = result.content.content;
  assert.equal(outputs.length, 1);
  assert.equal(outputs[0].type, 'bash_code_execution_output');
  const meta = await anthropic().beta.files.retrieveMetadata(outputs[0].file_id, { betas: ['files-api-2025-04-14'] });
  assert.equal(meta.filename, 'total.txt');
  const bytes = await (await anthropic().beta.files.download(outputs[0].file_id, { betas: ['files-api-2025-04-14'] })).text();
  assert.equal(bytes, '1100');
  // the model was told where the upload is
  const [seen] = gw.upstream.requestsFor(marker);
  assert.match(JSON.stringify(seen.body.messages[0].content), /uploaded into the code execution container, in \/mnt\/data/);
});

test('messages: the loop limit pauses the turn; sent back, it goes on', T, async () => {
  const marker = gw.upstream.script(gw.marker('pause'), [bash('echo 1'), bash('echo 2'), bash('echo 3'), { text: 'Three steps.' }]);
  const ask = [{ role: 'user', content: `${marker} count` }];
  const m1 = await send({ model: LOOP_MODEL, max_tokens: 256, tools: [TOOL], messages: ask }, false);
  assert.equal(m1.stop_reason, 'pause_turn');
  assert.deepEqual(blocks(m1, 'bash_code_execution_tool_result').map((b) => b.content.stdout), ['1\n', '2\n']);
  const m2 = await send({ model: LOOP_MODEL, max_tokens: 256, tools: [TOOL], container: m1.container.id, messages: [...ask, { role: 'assistant', content: m1.content }] }, true);
  assert.equal(m2.stop_reason, 'end_turn');
  assert.deepEqual(blocks(m2, 'bash_code_execution_tool_result').map((b) => b.content.stdout), ['3\n']);
  assert.equal(m2.content.at(-1).text, 'Three steps.');
  // the upstream saw the earlier calls and results as its own tools' (rounds 2 and 3)
  const seen = gw.upstream.requestsFor(marker);
  assert.deepEqual(seen.map((r) => r.round), [0, 1, 2, 3]);
});

test('messages: thinking is shown and replayed, and a client tool called beside the code tool ends the turn for the client', T, async () => {
  const weather = { name: 'get_weather', description: 'The weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
  const marker = gw.upstream.script(gw.marker('mixed'), [
    {
      thinking: { thinking: 'I should compute and ask at once.', signature: 'sig-1' },
      calls: [
        { fn: { name: 'bash_code_execution', arguments: JSON.stringify({ command: 'echo 21' }) } },
        { fn: { name: 'get_weather', arguments: JSON.stringify({ city: 'Lyon' }) } },
      ],
    },
    (req, ctx) => ({ text: `It is ${lastOutput(ctx)} in Lyon.` }),
  ]);
  const ask = [{ role: 'user', content: `${marker} weather` }];
  const m1 = await send({ model: NATIVE_MODEL, max_tokens: 1024, tools: [TOOL, weather], messages: ask }, true);
  assert.deepEqual(m1.content.map((b) => b.type), ['thinking', 'server_tool_use', 'bash_code_execution_tool_result', 'tool_use']);
  assert.deepEqual(m1.content[0], { type: 'thinking', thinking: 'I should compute and ask at once.', signature: 'sig-1' });
  assert.equal(m1.content[2].content.stdout, '21\n');
  assert.equal(m1.stop_reason, 'tool_use');
  const call = m1.content[3];
  assert.deepEqual(call.input, { city: 'Lyon' });
  const m2 = await send({
    model: NATIVE_MODEL,
    max_tokens: 1024,
    tools: [TOOL, weather],
    container: m1.container.id,
    messages: [...ask, { role: 'assistant', content: m1.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'sunny' }] }],
  }, false);
  assert.equal(m2.content.at(-1).text, 'It is sunny in Lyon.');
  // every request the upstream answered passed its checks (thinking replayed verbatim, tool pairs)
  const seen = gw.upstream.requestsFor(marker);
  assert.deepEqual(seen.map((r) => [r.round, r.status]), [[0, 200], [1, 200]]);
  assert.deepEqual(seen[1].body.tools.map((t) => t.name), ['get_weather', 'bash_code_execution', 'text_editor_code_execution']);
  // one assistant message with its thinking and both calls, then both results
  const [, assistant, results] = seen[1].body.messages;
  assert.deepEqual(assistant.content.map((b) => b.type), ['thinking', 'tool_use', 'tool_use']);
  assert.deepEqual(results.content.map((b) => [b.type, b.tool_use_id]), [['tool_result', assistant.content[1].id], ['tool_result', call.id]]);
});

test('messages: an upstream that ends a turn of calls with "stop" still gets their results', T, async () => {
  const marker = gw.upstream.script(gw.marker('stop-calls'), [
    { ...bash('echo 7'), finishReason: 'stop' },
    (req, ctx) => ({ text: `Seven: ${lastOutput(ctx).match(/stdout:\n(\d)/)[1]}.` }),
  ]);
  const m = await send({ model: CHAT_MODEL, max_tokens: 256, tools: [TOOL], messages: [{ role: 'user', content: `${marker} count` }] }, false);
  assert.equal(m.content.at(-1).text, 'Seven: 7.');
  assert.equal(m.stop_reason, 'end_turn');
});

test('messages: a call past gateway.exec_timeout is execution_time_exceeded, for both versions', T, async () => {
  const marker = gw.upstream.script(gw.marker('slow-bash'), [bash('sleep 600'), (req, ctx) => ({ text: `Told: ${lastOutput(ctx)}` })]);
  const m = await send({ model: NATIVE_MODEL, max_tokens: 256, tools: [TOOL], messages: [{ role: 'user', content: `${marker} wait` }] }, false);
  assert.deepEqual(blocks(m, 'bash_code_execution_tool_result')[0].content, { type: 'bash_code_execution_tool_result_error', error_code: 'execution_time_exceeded' });
  assert.equal(m.content.at(-1).text, 'Told: error: execution_time_exceeded');
  const slow = gw.upstream.script(gw.marker('slow-python'), [python('import time\ntime.sleep(600)'), python('print("alive")'), { text: 'ok' }]);
  const p = await send({ model: NATIVE_MODEL, max_tokens: 256, tools: [OLD_TOOL], container: m.container.id, messages: [{ role: 'user', content: `${slow} wait` }] }, true);
  const [timedOut, after] = blocks(p, 'code_execution_tool_result').map((b) => b.content);
  assert.deepEqual(timedOut, { type: 'code_execution_tool_result_error', error_code: 'execution_time_exceeded' });
  assert.equal(after.stdout, 'alive\n'); // the container goes on
});

test('messages: replayed results are read back within bounds', T, async () => {
  const huge = 2 ** 62; // start_line + num_lines past a 64-bit integer
  const marker = gw.upstream.script(gw.marker('replay-bounds'), [{ text: 'Read.' }]);
  const m = await send({
    model: NATIVE_MODEL,
    max_tokens: 64,
    tools: [TOOL],
    messages: [
      { role: 'user', content: 'look' },
      {
        role: 'assistant',
        content: [
          { type: 'server_tool_use', id: 'srvtoolu_01', name: 'text_editor_code_execution', input: { command: 'view', path: 'a.txt' } },
          { type: 'text_editor_code_execution_tool_result', tool_use_id: 'srvtoolu_01', content: { type: 'text_editor_code_execution_view_result', content: 'hello', file_type: 'text', num_lines: huge, start_line: huge, total_lines: huge } },
        ],
      },
      { role: 'user', content: `${marker} and?` },
    ],
  }, false);
  assert.equal(m.content[0].text, 'Read.');
  const [seen] = gw.upstream.requestsFor(marker);
  assert.deepEqual(seen.body.messages.map((x) => x.role), ['user', 'assistant', 'user']);
  assert.match(seen.body.messages[2].content[0].content, /^\(lines 1 to 1 of 1\)\n\s+1\thello/);
});

test('messages: a key\'s usage counts its calls, proxied ones too; another key\'s upload is not found', T, async () => {
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  const admin = async (path, body) => {
    const r = await fetch(`${base}${path}`, { method: body ? 'POST' : 'GET', headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
    return r.json();
  };
  const { key } = await admin('/key/generate', { key_alias: 'messages-usage' });
  const keyed = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
  for (const stream of [false, true]) {
    const marker = gw.upstream.script(gw.marker('usage'), [{ text: 'Counted.' }]);
    const params = { model: NATIVE_MODEL, max_tokens: 64, messages: [{ role: 'user', content: `${marker} hi` }] };
    const m = stream ? await keyed.messages.stream(params).finalMessage() : await keyed.messages.create(params);
    assert.equal(m.content[0].text, 'Counted.');
  }
  const info = await admin(`/key/info?key=${key}`);
  const [day] = info.info.usage;
  assert.deepEqual([day.requests, day.input_tokens, day.output_tokens], [2, 200, 40], JSON.stringify(info.info.usage));
  // and the server's metrics name the route
  const metrics = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${MASTER_KEY}` } })).text();
  assert.match(metrics, /corral_http_requests_total\{[^}]*surface="gateway"[^}]*route="\/messages"[^}]*status="200"/);
  // the master key's upload, named by this key's request
  const mine = await anthropic().beta.files.upload({ file: await toFile(Buffer.from('x'), 'x.txt') }, { betas: ['files-api-2025-04-14'] });
  await assert.rejects(
    keyed.beta.messages.create({ betas: BETA, model: NATIVE_MODEL, max_tokens: 5, tools: [TOOL], messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'container_upload', file_id: mine.id }] }] }),
    (err) => {
      assert.ok(err instanceof Anthropic.NotFoundError, String(err));
      assert.match(err.error.error.message, new RegExp(mine.id));
      return true;
    },
  );
});

test('messages: bad requests get errors in Anthropic\'s shape', T, async () => {
  const c = anthropic();
  const cases = [
    [{ model: NATIVE_MODEL, messages: [{ role: 'user', content: 'x' }] }, Anthropic.BadRequestError, 'invalid_request_error', /max_tokens/],
    [{ model: 'no-such-model', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }, Anthropic.NotFoundError, 'not_found_error', /no-such-model/],
    [{ model: NATIVE_MODEL, max_tokens: 5, tools: [{ type: 'code_execution_20990101', name: 'code_execution' }], messages: [{ role: 'user', content: 'x' }] }, Anthropic.BadRequestError, 'invalid_request_error', /code_execution_20250825/],
    [{ model: NATIVE_MODEL, max_tokens: 5, tools: [TOOL], messages: [{ role: 'system', content: 'x' }] }, Anthropic.BadRequestError, 'invalid_request_error', /messages\.0\.role/],
    // blocks that lack what the loop reads of them, whichever the upstream
    [{ model: CHAT_MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'text', text: 5 }] }, { role: 'user', content: 'y' }] }, Anthropic.BadRequestError, 'invalid_request_error', /messages\.1\.content\.0\.text/],
    [{ model: CHAT_MODEL, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url' } }] }] }, Anthropic.BadRequestError, 'invalid_request_error', /messages\.0\.content\.0\.source\.url/],
    [{ model: NATIVE_MODEL, max_tokens: 5, tools: [TOOL], messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: [{ type: 'server_tool_use', name: 'bash_code_execution', input: {} }] }] }, Anthropic.BadRequestError, 'invalid_request_error', /messages\.1\.content\.0\.id/],
    // a client tool named as one of the code tool's
    [{ model: NATIVE_MODEL, max_tokens: 5, tools: [TOOL, { name: 'bash_code_execution', input_schema: { type: 'object' } }], messages: [{ role: 'user', content: 'x' }] }, Anthropic.BadRequestError, 'invalid_request_error', /bash_code_execution/],
    // a file that is not the key's (none: it does not exist)
    [{ model: NATIVE_MODEL, max_tokens: 5, tools: [TOOL], messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'container_upload', file_id: 'file-nope' }] }] }, Anthropic.NotFoundError, 'not_found_error', /file-nope/],
  ];
  for (const [params, cls, type, message] of cases) {
    await assert.rejects(c.beta.messages.create(params), (err) => {
      assert.ok(err instanceof cls, `${JSON.stringify(params)}: ${err}`);
      assert.equal(err.error.type, 'error');
      assert.equal(err.error.error.type, type);
      assert.match(err.error.error.message, message);
      return true;
    });
  }
  const stranger = new Anthropic({ baseURL: gw.server.gatewayUrl.replace(/\/v1$/, ''), apiKey: 'sk-not-a-key', maxRetries: 0 });
  await assert.rejects(stranger.messages.create({ model: NATIVE_MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), (err) => {
    assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
    assert.equal(err.error.error.type, 'authentication_error');
    return true;
  });
});

// (last: it restarts the server)
test('messages: stopping corral serve while code runs ends the stream with Anthropic\'s error', T, async () => {
  const marker = gw.upstream.script(gw.marker('drain'), [bash('sleep 60'), { text: 'never reached' }]);
  const s = anthropic().beta.messages.stream({ betas: BETA, model: NATIVE_MODEL, max_tokens: 64, tools: [TOOL], messages: [{ role: 'user', content: `${marker} wait` }] });
  let restarted = null;
  s.on('streamEvent', (e) => {
    if (e.type === 'content_block_stop' && !restarted) restarted = gw.restart(); // SIGTERM: a clean exit is asserted
  });
  await assert.rejects(s.finalMessage(), (err) => {
    assert.ok(err instanceof Anthropic.APIError, String(err));
    assert.equal(err.error?.error?.type, 'overloaded_error', JSON.stringify(err.error));
    assert.match(err.error.error.message, /shutting down/);
    return true;
  });
  assert.ok(restarted, 'the code never started');
  await restarted;
  client = null;
});
