// The OpenAI-compatible gateway of `corral serve` (--gateway-listen) driven by
// the official `openai` SDK, with the scripted upstream of upstream.mjs
// standing in for the model. Each scenario runs through both client APIs
// (/v1/responses and /v1/chat/completions) and both kinds of upstream
// (mock-chat: the upstream speaks only Chat Completions; mock-responses: it
// speaks Responses), once plainly and once streamed through the SDK's
// helpers (responses.stream().finalResponse(), chat.completions.stream()
// .finalChatCompletion()); the streamed result must equal the plain one once
// ids and timestamps are normalised, and the Responses event stream must
// keep the contract's invariants.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  CI_TOOL,
  CODE_TOOL,
  INCLUDE_OUTPUTS,
  KINDS,
  LOOP_LIMIT,
  MODELS,
  assertChatUsage,
  assertNoLeak,
  PNG_SIGNATURE,
  assertPng,
  assertResponsesUsage,
  chatGist,
  checkResponseEvents,
  checkUpstreamRequests,
  ciCalls,
  codeOutputsSeen,
  codeToolOf,
  imagesOf,
  logsOf,
  normalise,
  useGateway,
} from './gateway-helpers.mjs';
import { expectedUsage } from './upstream.mjs';

const gw = useGateway();

const T = { timeout: 120_000 };

const firstMatch = (re, text) => re.exec(text ?? '')?.[1] ?? '(not found)';

const WEATHER_RESP = {
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  strict: false,
};
const WEATHER_CHAT = {
  type: 'function',
  function: { name: WEATHER_RESP.name, description: WEATHER_RESP.description, parameters: WEATHER_RESP.parameters },
};

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                 */
/*                                                                           */
/* turns: the mock's script; rounds: the upstream requests expected;         */
/* check*(result, info): what the client must get (info.seen: the upstream   */
/* requests, info.include: outputs asked for).                               */

const PRIMES_CODE = 'import math\nprimes = [2, 3, 5, 7, 11, 13]\nprint(math.prod(primes))';

const SCENARIOS = {
  primes: {
    prompt: 'What is the product of the first 6 primes? Use python.',
    turns: [
      { code: PRIMES_CODE },
      (req, ctx) => ({ text: `The product of the first 6 primes is ${firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)}.` }),
    ],
    rounds: 2,
    checkSeen(seen) {
      assert.match(codeOutputsSeen(seen)[0] ?? '', /^stdout:\n30030\n?$/, 'the tool output the model read');
    },
    checkResponses(r, { include }) {
      const calls = ciCalls(r, { include });
      assert.equal(calls.length, 1);
      assert.equal(calls[0].code, PRIMES_CODE);
      if (include) assert.match(logsOf(calls[0]), /30030/);
      assert.deepEqual(r.output.map((o) => o.type), ['code_interpreter_call', 'message']);
      assert.equal(r.output_text, 'The product of the first 6 primes is 30030.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'The product of the first 6 primes is 30030.');
      assert.equal(c.choices[0].finish_reason, 'stop');
    },
  },

  state: {
    prompt: 'Keep a counter across two cells.',
    turns: [
      { code: 'counter = 40\nnames = ["a"]' },
      { code: 'counter += 2\nnames.append("b")\nprint(names)\ncounter' },
      (req, ctx) => ({
        text: `counter=${firstMatch(/result:\n(\d+)/, ctx.lastCodeOutput)} names=${firstMatch(/stdout:\n(.*)\n/, ctx.lastCodeOutput)}`,
      }),
    ],
    rounds: 3,
    checkSeen(seen) {
      const outs = codeOutputsSeen(seen);
      assert.equal(outs.length, 2, JSON.stringify(outs));
      assert.equal(outs[0], '(no output)');
      assert.match(outs[1], /^stdout:\n\['a', 'b'\]\n\n\n?result:\n42\n?$/, 'sections stdout then result, separated by a blank line');
    },
    checkResponses(r, { include }) {
      const calls = ciCalls(r, { include });
      assert.equal(calls.length, 2);
      assert.equal(calls[0].container_id, calls[1].container_id, 'two calls of one request, one container');
      if (include) {
        assert.equal(logsOf(calls[0]), '');
        assert.match(logsOf(calls[1]), /\['a', 'b'\]/);
        assert.match(logsOf(calls[1]), /42/);
      }
      assert.equal(r.output_text, "counter=42 names=['a', 'b']");
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, "counter=42 names=['a', 'b']");
    },
  },

  chart: {
    prompt: 'Plot the squares.',
    turns: [
      {
        code: 'import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3))\nplt.plot([1, 2, 3, 4], [1, 4, 9, 16])\nplt.title("squares")\nplt.show()',
      },
      (req, ctx) => ({ text: `Here is the chart (${(ctx.lastCodeOutput ?? '').split('\n').filter((l) => l.startsWith('image:')).length} image).` }),
    ],
    rounds: 2,
    checkSeen(seen) {
      const out = codeOutputsSeen(seen)[0] ?? '';
      assert.match(out, /^image: /m, `no image line in the tool output: ${out}`);
      assert.ok(!/iVBORw0KGgo/.test(out), 'the model was sent the PNG itself');
    },
    checkResponses(r, { include }) {
      const calls = ciCalls(r, { include });
      assert.equal(calls.length, 1);
      if (include) {
        const images = imagesOf(calls[0]);
        assert.equal(images.length, 1, JSON.stringify(calls[0].outputs).slice(0, 500));
        assertPng(images[0]);
      }
      assert.equal(r.output_text, 'Here is the chart (1 image).');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'Here is the chart (1 image).');
    },
  },

  'error-fix': {
    prompt: 'Divide, and fix it if it fails.',
    turns: [
      { code: 'value = 1 / 0' },
      (req, ctx) =>
        /ZeroDivisionError/.test(ctx.lastCodeOutput ?? '')
          ? { code: 'value = 1 / 1\nprint(value)' }
          : { text: `no error reported: ${ctx.lastCodeOutput}` },
      (req, ctx) => ({ text: `Fixed: value is ${firstMatch(/stdout:\n(\S+)/, ctx.lastCodeOutput)}.` }),
    ],
    rounds: 3,
    checkSeen(seen) {
      const outs = codeOutputsSeen(seen);
      assert.match(outs[0] ?? '', /^error: ZeroDivisionError: division by zero\n/, `the first output: ${outs[0]}`);
      assert.match(outs[0], /Traceback|File |line \d/, 'no traceback');
      assert.match(outs[1] ?? '', /^stdout:\n1\.0\n?$/);
    },
    checkResponses(r, { include }) {
      const calls = ciCalls(r, { include });
      assert.equal(calls.length, 2);
      if (include) assert.match(logsOf(calls[0]), /ZeroDivisionError/);
      assert.equal(r.output_text, 'Fixed: value is 1.0.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'Fixed: value is 1.0.');
    },
  },

  'forced code_interpreter': {
    prompt: 'Multiply the first 6 primes.',
    toolChoice: { responses: { type: 'code_interpreter' }, chat: { type: 'code_interpreter' } },
    turns: [{ code: PRIMES_CODE }, (req, ctx) => ({ text: `It is ${firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)}.` })],
    rounds: 2,
    checkSeen(seen, model) {
      const forced = seen[0].api === 'chat' ? { type: 'function', function: { name: CODE_TOOL } } : { type: 'function', name: CODE_TOOL };
      assert.deepEqual(seen[0].body.tool_choice, forced, 'the first upstream request forces the code tool');
      for (const req of seen.slice(1)) {
        assert.ok([undefined, null, 'auto'].includes(req.body.tool_choice), `round ${req.round} still forces: ${JSON.stringify(req.body.tool_choice)}`);
      }
    },
    checkResponses(r, { include }) {
      assert.equal(ciCalls(r, { include }).length, 1);
      assert.deepEqual(r.tool_choice, { type: 'code_interpreter' }, 'tool_choice echoed as sent');
      assert.equal(r.output_text, 'It is 30030.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'It is 30030.');
    },
  },

  'forced required': {
    prompt: 'Multiply the first 6 primes.',
    toolChoice: { responses: 'required', chat: 'required' },
    turns: [{ code: PRIMES_CODE }, (req, ctx) => ({ text: `It is ${firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)}.` })],
    rounds: 2,
    checkSeen(seen) {
      assert.equal(seen[0].body.tool_choice, 'required', 'the first upstream request keeps "required"');
      for (const req of seen.slice(1)) {
        assert.ok([undefined, null, 'auto'].includes(req.body.tool_choice), `round ${req.round} still forces: ${JSON.stringify(req.body.tool_choice)}`);
      }
    },
    checkResponses(r, { include }) {
      assert.equal(ciCalls(r, { include }).length, 1);
      assert.equal(r.tool_choice, 'required');
      assert.equal(r.output_text, 'It is 30030.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'It is 30030.');
    },
  },
};

/* ------------------------------------------------------------------------ */
/* Running a scenario                                                        */

/** responses.create, or the same streamed: {r, events} (events: null when not streamed). */
async function createResponse(body, stream) {
  if (!stream) return { r: await gw.client.responses.create(body), events: null };
  const events = [];
  const s = gw.client.responses.stream(body);
  s.on('event', (e) => events.push(e));
  return { r: await s.finalResponse(), events };
}

async function runResponses(model, scenario, { stream, include }) {
  const marker = gw.marker(`${model}-responses`);
  gw.upstream.script(marker, scenario.turns);
  const body = {
    model,
    input: `${marker} ${scenario.prompt}`,
    tools: [CI_TOOL],
    ...(scenario.toolChoice ? { tool_choice: scenario.toolChoice.responses } : {}),
    ...(include ? { include: INCLUDE_OUTPUTS } : {}),
  };
  const { r: result, events } = await createResponse(body, stream);
  const seen = gw.upstream.requestsFor(marker);
  return { result, events, seen, marker };
}

async function runChat(model, scenario, { stream }) {
  const marker = gw.marker(`${model}-chat`);
  gw.upstream.script(marker, scenario.turns);
  const body = {
    model,
    messages: [{ role: 'user', content: `${marker} ${scenario.prompt}` }],
    tools: [CI_TOOL],
    ...(scenario.toolChoice ? { tool_choice: scenario.toolChoice.chat } : {}),
  };
  const result = stream
    ? await gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion()
    : await gw.client.chat.completions.create(body);
  return { result, seen: gw.upstream.requestsFor(marker), marker };
}

function checkResponsesRun(model, scenario, run, include) {
  const { result: r, seen } = run;
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'completed', `status ${r.status}: ${JSON.stringify(r.incomplete_details ?? r.error)}`);
  assertNoLeak(r);
  checkUpstreamRequests(seen, model, { rounds: scenario.rounds });
  scenario.checkSeen?.(seen, model);
  scenario.checkResponses(r, { include });
  assertResponsesUsage(r, expectedUsage(scenario.rounds));
  assert.deepEqual(r.tools, [CI_TOOL], 'tools echoed as sent');
  if (run.events) checkResponseEvents(run.events, r);
}

function checkChatRun(model, scenario, run) {
  const { result: c, seen } = run;
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.ok(!c.choices[0].message.tool_calls?.length, `tool calls returned: ${JSON.stringify(c.choices[0].message.tool_calls)}`);
  assertNoLeak(c);
  checkUpstreamRequests(seen, model, { rounds: scenario.rounds });
  scenario.checkSeen?.(seen, model);
  scenario.checkChat(c);
  assertChatUsage(c, expectedUsage(scenario.rounds));
}

for (const [name, scenario] of Object.entries(SCENARIOS)) {
  for (const model of KINDS) {
    test(`responses, ${model}: ${name} (plain, with include, streamed)`, T, async () => {
      const plain = await runResponses(model, scenario, { stream: false, include: false });
      checkResponsesRun(model, scenario, plain, false);
      const withOutputs = await runResponses(model, scenario, { stream: false, include: true });
      checkResponsesRun(model, scenario, withOutputs, true);
      const streamed = await runResponses(model, scenario, { stream: true, include: true });
      checkResponsesRun(model, scenario, streamed, true);
      assert.deepEqual(normalise(streamed.result), normalise(withOutputs.result), 'the streamed Response differs from the plain one');
      assert.notEqual(plain.result.output[0].container_id, withOutputs.result.output[0].container_id, 'two requests shared a container');
    });

    test(`chat completions, ${model}: ${name} (plain, streamed)`, T, async () => {
      const plain = await runChat(model, scenario, { stream: false });
      checkChatRun(model, scenario, plain);
      const streamed = await runChat(model, scenario, { stream: true });
      checkChatRun(model, scenario, streamed);
      assert.deepEqual(chatGist(streamed.result), chatGist(plain.result), 'the streamed completion differs from the plain one');
    });
  }
}

/* ------------------------------------------------------------------------ */
/* The loop limit (mock-loop: max_agentic_loops 2, a chat upstream)           */

const LOOP_TURNS = Array.from({ length: LOOP_LIMIT + 3 }, () => ({ code: 'n = globals().get("n", 0) + 1\nprint("round", n)' }));

async function loopResponses(stream) {
  const marker = gw.marker('loop-responses');
  gw.upstream.script(marker, LOOP_TURNS);
  const body = { model: 'mock-loop', input: `${marker} never stop`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS };
  const { r, events } = await createResponse(body, stream);
  const seen = gw.upstream.requestsFor(marker);
  checkUpstreamRequests(seen, 'mock-loop', { rounds: LOOP_LIMIT + 1 });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_agentic_loops' });
  assertNoLeak(r);
  const calls = ciCalls(r, { include: true, unexecuted: true });
  assert.equal(calls.length, LOOP_LIMIT, 'the executed calls');
  assert.deepEqual(calls.map((c) => logsOf(c).trim()), Array.from({ length: LOOP_LIMIT }, (_, i) => `round ${i + 1}`));
  assert.ok(!r.output.some((o) => o.type === 'function_call'), 'a function_call in the output');
  assertResponsesUsage(r, expectedUsage(LOOP_LIMIT + 1));
  if (events) checkResponseEvents(events, r, { terminal: 'response.incomplete' });
  return r;
}

async function loopChat(stream) {
  const marker = gw.marker('loop-chat');
  gw.upstream.script(marker, LOOP_TURNS);
  const body = { model: 'mock-loop', messages: [{ role: 'user', content: `${marker} never stop` }], tools: [CI_TOOL] };
  const c = stream
    ? await gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion()
    : await gw.client.chat.completions.create(body);
  checkUpstreamRequests(gw.upstream.requestsFor(marker), 'mock-loop', { rounds: LOOP_LIMIT + 1 });
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.ok(!c.choices[0].message.tool_calls?.length, 'tool calls returned');
  assertNoLeak(c);
  assertChatUsage(c, expectedUsage(LOOP_LIMIT + 1));
  return c;
}

test('responses: the loop limit ends with status incomplete (plain, streamed)', T, async () => {
  const plain = await loopResponses(false);
  const streamed = await loopResponses(true);
  assert.deepEqual(normalise(streamed), normalise(plain));
});

test('chat completions: the loop limit ends with finish_reason length (plain, streamed)', T, async () => {
  const plain = await loopChat(false);
  const streamed = await loopChat(true);
  assert.deepEqual(chatGist(streamed), chatGist(plain));
});

/* ------------------------------------------------------------------------ */
/* max_tool_calls: the code calls one response may make                      */

const CAP_TURNS = [
  { code: 'print("one")' },
  { code: 'print("two")' },
  { code: 'print("three")' },
  (req, ctx) => ({ text: `told: ${ctx.lastToolOutput}` }),
];

for (const model of KINDS) {
  test(`responses, ${model}: max_tool_calls caps the code calls, and the turns after them get tool_choice none (plain, streamed)`, T, async () => {
    for (const stream of [false, true]) {
      const marker = gw.marker(`cap-${model}-${stream}`);
      gw.upstream.script(marker, CAP_TURNS);
      const body = { model, input: `${marker} go`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS, max_tool_calls: 2 };
      const { r } = await createResponse(body, stream);
      const seen = gw.upstream.requestsFor(marker);
      assert.deepEqual(seen.map((q) => q.body.tool_choice ?? null), [null, null, 'none', 'none'], 'the upstream turns\' tool_choice');
      assert.equal(r.status, 'completed');
      assert.equal(r.max_tool_calls, 2);
      const calls = r.output.filter((o) => o.type === 'code_interpreter_call');
      assert.deepEqual(calls.map((c) => [c.status, logsOf(c).trim()]), [['completed', 'one'], ['completed', 'two'], ['incomplete', '']]);
      assert.match(r.output_text, /^told: error: not run: this response may make at most 2 tool calls \(max_tool_calls\)/);
      assertNoLeak(r);
    }
  });
}

if (KINDS.includes('mock-responses')) {
  test("responses, mock-responses: max_tool_calls counts the upstream's hosted tool calls with the code calls; the upstream gets what is left", T, async () => {
    const search = { id: 'ws_cap1', type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'sums' } };
    for (const stream of [false, true]) {
      const marker = gw.marker(`cap-hosted-${stream}`);
      gw.upstream.script(marker, [
        { items: [{ item: search }], code: 'print("one")' },
        { code: 'print("two")' },
        (req, ctx) => ({ text: `told: ${ctx.lastToolOutput}` }),
      ]);
      const body = { model: 'mock-responses', input: `${marker} go`, tools: [CI_TOOL, { type: 'web_search' }], include: INCLUDE_OUTPUTS, max_tool_calls: 3 };
      const { r } = await createResponse(body, stream);
      const seen = gw.upstream.requestsFor(marker);
      assert.deepEqual(seen.map((q) => [q.body.max_tool_calls ?? null, q.body.tool_choice ?? null]), [[3, null], [1, null], [null, 'none']], "the upstream turns' max_tool_calls and tool_choice");
      assert.equal(r.status, 'completed');
      assert.equal(r.max_tool_calls, 3);
      assert.deepEqual(r.output.map((o) => o.type), ['web_search_call', 'code_interpreter_call', 'code_interpreter_call', 'message']);
      assert.deepEqual(r.output.filter((o) => o.type === 'code_interpreter_call').map((c) => c.status), ['completed', 'completed']);
      assert.match(r.output_text, /^told: stdout:\ntwo/);
    }
  });
}

for (const model of KINDS) {
  test(`${model}: max_output_tokens is one budget for the whole response: each turn gets what the earlier ones left, and a spent one ends it (plain, streamed, chat)`, T, async () => {
    const key = MODELS[model] === 'chat' ? 'max_completion_tokens' : 'max_output_tokens';
    // the scripted upstream's rounds report 20 and 21 output tokens: 41 spends the budget
    for (const stream of [false, true]) {
      const marker = gw.marker(`budget-${model}-${stream}`);
      gw.upstream.script(marker, [{ code: 'print(1)' }, { code: 'print(2)' }, { text: 'never reached' }]);
      const { r } = await createResponse({ model, input: `${marker} go`, tools: [CI_TOOL], max_output_tokens: 41 }, stream);
      assert.deepEqual(gw.upstream.requestsFor(marker).map((q) => q.body[key]), [41, 21], `the upstream turns' ${key}`);
      assert.equal(r.status, 'incomplete');
      assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
      assert.equal(r.max_output_tokens, 41);
      assert.equal(r.usage.output_tokens, 41);
      assert.equal(r.output.filter((o) => o.type === 'code_interpreter_call').length, 2);
      assertNoLeak(r);
    }
    const marker = gw.marker(`budget-chat-${model}`);
    gw.upstream.script(marker, [{ code: 'print(1)' }, { text: 'within budget' }]);
    const c = await gw.client.chat.completions.create({ model, messages: [{ role: 'user', content: `${marker} go` }], tools: [CI_TOOL], max_completion_tokens: 100 });
    assert.equal(c.choices[0].message.content, 'within budget');
    assert.equal(c.choices[0].finish_reason, 'stop');
    assert.deepEqual(gw.upstream.requestsFor(marker).map((q) => q.body[key]), [100, 80]);
  });
}

const SHELL_TOOL = { type: 'shell', environment: { type: 'container_auto' } };
const SHELL_COMMANDS = ['echo hello > greet.txt && cat greet.txt', 'echo oops >&2; exit 3', 'sleep 30 & sleep 30'];

/** The shell_call and shell_call_output items of a response (each one, checked against each other). */
function shellItems(r) {
  const calls = r.output.filter((o) => o.type === 'shell_call');
  const outputs = r.output.filter((o) => o.type === 'shell_call_output');
  assert.equal(calls.length, 1, `shell_call items: ${JSON.stringify(r.output.map((o) => o.type))}`);
  assert.equal(outputs.length, 1);
  assert.match(calls[0].id, /^sh_[0-9a-f]{48}$/);
  assert.match(outputs[0].id, /^sho_[0-9a-f]{48}$/);
  assert.equal(outputs[0].call_id, calls[0].call_id);
  assert.ok(r.output.indexOf(outputs[0]) > r.output.indexOf(calls[0]), 'the output comes after its call');
  assert.ok(!r.output.some((o) => o.type === 'function_call' && o.name === 'shell'), 'the shell\'s function call reached the client');
  return { call: calls[0], out: outputs[0] };
}

for (const model of KINDS) {
  test(`responses, ${model}: the shell tool runs the model's commands in the container: shell_call and shell_call_output, exit codes, stderr, a timeout (plain, streamed)`, T, async () => {
    for (const stream of [false, true]) {
      const marker = gw.marker(`shell-${model}-${stream}`);
      gw.upstream.script(marker, [
        { calls: [{ fn: { name: 'shell', arguments: JSON.stringify({ commands: SHELL_COMMANDS, timeout_ms: 1500 }) } }] },
        (req, ctx) => ({ text: `read: ${ctx.lastToolOutput.split('\n').slice(0, 4).join(' | ')}` }),
      ]);
      const { r, events } = await createResponse({ model, input: `${marker} run them`, tools: [SHELL_TOOL] }, stream);
      assert.equal(r.status, 'completed', JSON.stringify(r.error));
      const { call, out } = shellItems(r);
      assert.deepEqual(call.action, { commands: SHELL_COMMANDS, max_output_length: null, timeout_ms: 1500 });
      assert.equal(call.status, 'completed');
      assert.equal(call.environment.type, 'container_reference');
      assert.match(call.environment.container_id, /^cntr_/);
      assert.equal(out.status, 'completed');
      assert.deepEqual(out.output.map((e) => [e.stdout, e.stderr, e.outcome]), [
        ['hello\n', '', { type: 'exit', exit_code: 0 }],
        ['', 'oops\n', { type: 'exit', exit_code: 3 }],
        ['', '', { type: 'timeout' }],
      ]);
      assert.equal(r.output_text, 'read: $ echo hello > greet.txt && cat greet.txt | exit code: 0 | stdout: | hello');
      const tools = gw.upstream.requestsFor(marker)[0].body.tools;
      assert.ok(JSON.stringify(tools).includes('Run shell commands'), 'the upstream got the shell as a function tool');
      assertNoLeak(r);
      if (events) {
        checkResponseEvents(events, r);
        const added = events.filter((e) => e.type === 'response.output_item.added').map((e) => e.item.type);
        assert.ok(added.includes('shell_call') && added.includes('shell_call_output'), added.join(', '));
      }
    }
  });
}

test('responses: the shell and code_interpreter share a container; tool_choice shell; a container_reference; max_output_length', T, async () => {
  const marker = gw.marker('shell-shared');
  gw.upstream.script(marker, [
    { code: "open('/mnt/data/from-python.txt', 'w').write('written by python')" },
    {
      calls: [
        {
          fn: {
            name: 'shell',
            arguments: JSON.stringify({ commands: ['cat from-python.txt', 'seq 1 1000', "printf 'a\\0b' && echo made > by-shell.txt"], max_output_length: 20 }),
          },
        },
      ],
    },
    { text: 'done' },
  ]);
  const r = await gw.client.responses.create({ model: 'mock-responses', input: `${marker} go`, tools: [CI_TOOL, SHELL_TOOL], tool_choice: { type: 'shell' } });
  assert.equal(r.status, 'completed');
  const first = gw.upstream.requestsFor(marker)[0].body;
  assert.deepEqual(first.tool_choice, { type: 'function', name: 'shell' }, 'tool_choice shell names the shell function on the first turn');
  const { out } = shellItems(r);
  assert.equal(out.output[0].stdout, 'written by python');
  assert.equal(out.output[1].stdout, '1\n2\n3\n4\n5\n6\n7\n8\n9\n10', 'cut at max_output_length (20 characters)');
  assert.equal(out.max_output_length, 20);
  assert.equal(out.output[2].stdout, 'a\ufffdb', 'a NUL byte comes back as U+FFFD');
  const ci = r.output.find((o) => o.type === 'code_interpreter_call');
  const call = r.output.find((o) => o.type === 'shell_call');
  assert.equal(call.environment.container_id, ci.container_id, 'one container for both tools');
  const files = [];
  for await (const f of gw.client.containers.files.list(ci.container_id)) files.push(f.path);
  assert.ok(files.includes('/mnt/data/by-shell.txt'), `the file the shell made is the container's: ${files.join(', ')}`);

  // a later request names that container
  const again = gw.marker('shell-ref');
  gw.upstream.script(again, [{ calls: [{ fn: { name: 'shell', arguments: JSON.stringify({ commands: ['ls'] }) } }] }, { text: 'listed' }]);
  const r2 = await gw.client.responses.create({
    model: 'mock-chat',
    input: `${again} list`,
    tools: [{ type: 'shell', environment: { type: 'container_reference', container_id: ci.container_id } }],
  });
  assert.match(shellItems(r2).out.output[0].stdout, /from-python\.txt/);
  await assert.rejects(
    gw.client.responses.create({ model: 'mock-chat', input: 'x', tools: [{ type: 'shell', environment: { type: 'container_reference' } }] }),
    (e) => e.status === 400 && e.param === 'tools[0].environment.container_id',
  );
  await assert.rejects(
    gw.client.responses.create({ model: 'mock-chat', input: 'x', tools: [{ type: 'shell', environment: { type: 'elsewhere' } }] }),
    (e) => e.status === 400 && e.param === 'tools[0].environment',
  );
});

/** The data: URLs of the images in an upstream request (a Chat request's image_url parts, a Responses request's input_image parts). */
function imagesIn(req) {
  const urls = [];
  const parts = (content) => (Array.isArray(content) ? content : []);
  if (req.api === 'chat') {
    for (const m of req.body.messages) for (const p of parts(m.content)) if (p.type === 'image_url') urls.push(p.image_url.url);
  } else {
    for (const it of req.body.input) {
      for (const p of parts(it.content).concat(parts(it.output))) if (p.type === 'input_image') urls.push(p.image_url);
    }
  }
  return urls;
}

for (const [vision, plain] of [['mock-vision-chat', 'mock-chat'], ['mock-vision-responses', 'mock-responses']]) {
  test(`${vision}: a vision model sees the chart its code displayed, with the call's output; ${plain} reads the text only`, T, async () => {
    for (const model of [vision, plain]) {
      const marker = gw.marker(`vision-${model}`);
      gw.upstream.script(marker, [{ code: SCENARIOS.chart.turns[0].code }, (req, ctx) => ({ text: `seen: ${ctx.lastCodeOutput.split('\n')[0]}` })]);
      const r = await gw.client.responses.create({ model, input: `${marker} plot it`, tools: [CI_TOOL] });
      assert.equal(r.status, 'completed');
      const [first, second] = gw.upstream.requestsFor(marker);
      assert.deepEqual(imagesIn(first), []);
      const images = imagesIn(second);
      if (model === plain) {
        assert.deepEqual(images, [], `${plain} got an image`);
        continue;
      }
      assert.equal(images.length, 1, `${model} got ${images.length} images`);
      assertPng(images[0]);
      // beside the text of the call's output, which it reads as the plain model does
      assert.match(JSON.stringify(second.body), /image: /);
    }
  });
}

for (const model of KINDS) {
  for (const client of ['responses', 'chat completions']) {
    test(`${client}, ${model}: allowed_tools naming code_interpreter names the code tool upstream; "required" holds for the first turn only`, T, async () => {
      const marker = gw.marker(`allowed-${client}-${model}`);
      gw.upstream.script(marker, [{ code: 'print("allowed")' }, { text: 'done' }]);
      let text;
      if (client === 'responses') {
        const choice = { type: 'allowed_tools', mode: 'required', tools: [{ type: 'code_interpreter' }, { type: 'function', name: 'get_weather' }] };
        const r = await gw.client.responses.create({ model, input: `${marker} go`, tools: [CI_TOOL, WEATHER_RESP], tool_choice: choice });
        text = r.output_text;
      } else {
        const choice = { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'code_interpreter' }, { type: 'function', function: { name: 'get_weather' } }] } };
        const c = await gw.client.chat.completions.create({ model, messages: [{ role: 'user', content: `${marker} go` }], tools: [CI_TOOL, WEATHER_CHAT], tool_choice: choice });
        text = c.choices[0].message.content;
      }
      assert.equal(text, 'done');
      const seen = gw.upstream.requestsFor(marker);
      const name = codeToolOf(seen[0])?.name;
      assert.ok(name, 'no code tool upstream');
      const want = (mode) => (model === 'mock-chat'
        ? { type: 'allowed_tools', allowed_tools: { mode, tools: [{ type: 'function', function: { name } }, { type: 'function', function: { name: 'get_weather' } }] } }
        : { type: 'allowed_tools', mode, tools: [{ type: 'function', name }, { type: 'function', name: 'get_weather' }] });
      assert.deepEqual(seen.map((q) => q.body.tool_choice), [want('required'), want('auto')]);
    });
  }
}

/* ------------------------------------------------------------------------ */
/* Other items of a Responses upstream, and custom tools                     */

const SUMMARY = 'Look it up first.';
const REASONING = {
  item: { id: 'rs_mock1', type: 'reasoning', summary: [{ type: 'summary_text', text: SUMMARY }] },
  added: { id: 'rs_mock1', type: 'reasoning', summary: [] },
  events: [
    { type: 'response.reasoning_summary_part.added', summary_index: 0, part: { type: 'summary_text', text: '' } },
    { type: 'response.reasoning_summary_text.delta', summary_index: 0, delta: 'Look it ' },
    { type: 'response.reasoning_summary_text.delta', summary_index: 0, delta: 'up first.' },
    { type: 'response.reasoning_summary_text.done', summary_index: 0, text: SUMMARY },
    { type: 'response.reasoning_summary_part.done', summary_index: 0, part: { type: 'summary_text', text: SUMMARY } },
  ],
};
const SEARCH = {
  item: { id: 'ws_mock1', type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'corral sandboxes' } },
  events: [{ type: 'response.web_search_call.in_progress' }, { type: 'response.web_search_call.searching' }, { type: 'response.web_search_call.completed' }],
};
const APPROVAL = { item: { id: 'mcpr_mock1', type: 'mcp_approval_request', server_label: 'deepwiki', name: 'ask_question', arguments: '{"question":"x"}' } };

test('responses, mock-responses: reasoning summaries, hosted tools\' calls and MCP approval requests reach the client, and an approval request ends the loop (plain, streamed)', T, async () => {
  const runs = [];
  for (const stream of [false, true]) {
    const marker = gw.marker(`items-${stream}`);
    gw.upstream.script(marker, [
      { items: [REASONING, SEARCH], code: 'print("after the search")' },
      { items: [APPROVAL], text: 'Approve the question, please.' },
    ]);
    const body = { model: 'mock-responses', input: `${marker} go`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS };
    const { r, events } = await createResponse(body, stream);
    assert.equal(gw.upstream.requestsFor(marker).length, 2, 'the approval request ended the loop');
    assert.equal(r.status, 'completed');
    assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'web_search_call', 'code_interpreter_call', 'mcp_approval_request', 'message']);
    assert.deepEqual(r.output[0], REASONING.item);
    assert.deepEqual(r.output[1], SEARCH.item);
    assert.equal(logsOf(r.output[2]).trim(), 'after the search');
    assert.deepEqual(r.output[3], APPROVAL.item);
    assert.equal(r.output_text, 'Approve the question, please.');
    assertNoLeak(r);
    if (!stream) {
      // the client answers the approval request and goes on: its answer
      // reaches the upstream as it sent it (no id of the gateway's), after
      // the request it answers
      const next = gw.marker('items-next');
      gw.upstream.script(next, [{ text: 'Answered.' }]);
      const approval = { type: 'mcp_approval_response', approval_request_id: 'mcpr_mock1', approve: true };
      const r2 = await gw.client.responses.create({
        model: 'mock-responses', previous_response_id: r.id, tools: [CI_TOOL],
        input: [approval, { role: 'user', content: `${next} go on` }],
      });
      assert.equal(r2.output_text, 'Answered.');
      const [sent] = gw.upstream.requestsFor(next);
      const types = sent.body.input.map((i) => i.type ?? 'message');
      assert.ok(types.indexOf('mcp_approval_request') < types.indexOf('mcp_approval_response'), types.join(', '));
      assert.deepEqual(sent.body.input.find((i) => i.type === 'mcp_approval_response'), approval);
      assert.deepEqual(sent.body.input.find((i) => i.type === 'reasoning'), REASONING.item);
    }
    if (stream) {
      checkResponseEvents(events, r);
      const deltas = events.filter((e) => e.type === 'response.reasoning_summary_text.delta');
      assert.deepEqual(deltas.map((e) => [e.output_index, e.item_id, e.summary_index]), [[0, 'rs_mock1', 0], [0, 'rs_mock1', 0]]);
      assert.equal(deltas.map((e) => e.delta).join(''), SUMMARY);
      const search = events.filter((e) => e.type.startsWith('response.web_search_call.'));
      assert.deepEqual(search.map((e) => [e.type, e.output_index]), SEARCH.events.map((e) => [e.type, 1]));
    }
    runs.push(r);
  }
  assert.deepEqual(normalise(runs[1]), normalise(runs[0]), 'the streamed response differs from the plain one');
});

const SQL_GRAMMAR = 'start: "SELECT " NAME " FROM " NAME\nNAME: /[a-z]+/';
const GRAMMAR_TOOL = {
  type: 'custom',
  name: 'run_sql',
  description: 'Runs a SQL query',
  format: { type: 'grammar', syntax: 'lark', definition: SQL_GRAMMAR },
};
const GRAMMAR_TOOL_CHAT = {
  type: 'custom',
  custom: {
    name: 'run_sql',
    description: 'Runs a SQL query',
    format: { type: 'grammar', grammar: { definition: SQL_GRAMMAR, syntax: 'lark' } },
  },
};
const SQL = 'SELECT name FROM users';
const ROWS = 'ann\nbob';
// the code tool and the custom tool may be called; the first turn must call one
const CUSTOM_CHOICE = { type: 'allowed_tools', mode: 'required', tools: [{ type: 'code_interpreter' }, { type: 'custom', name: 'run_sql' }] };
const CUSTOM_CHOICE_CHAT = {
  type: 'allowed_tools',
  allowed_tools: { mode: 'required', tools: [{ type: 'code_interpreter' }, { type: 'custom', custom: { name: 'run_sql' } }] },
};
const customTurns = () => [
  { code: 'print("prepared")' },
  { calls: [{ custom: { name: 'run_sql', input: SQL } }] },
  (req, ctx) => ({ text: `run_sql said: ${ctx.toolOutputs.find((o) => o.name === 'run_sql')?.output ?? '(nothing)'}` }),
];

/* What the upstream of `model` received for the custom tool: the tool and,
 * in the request after the client's answer, the call and its output, each
 * in the upstream's own API. */
function checkCustomUpstream(seen, model, callId) {
  assert.equal(seen.length, 3, `upstream requests: ${seen.length}`);
  for (const q of seen) {
    const tool = q.body.tools.find((t) => t.type === 'custom');
    assert.deepEqual(tool, model === 'mock-chat' ? GRAMMAR_TOOL_CHAT : GRAMMAR_TOOL);
  }
  const last = seen[2].body;
  if (model === 'mock-chat') {
    const calls = last.messages.flatMap((m) => m.tool_calls ?? []);
    assert.deepEqual(calls.find((c) => c.type === 'custom'), { id: callId, type: 'custom', custom: { name: 'run_sql', input: SQL } });
    assert.deepEqual(last.messages.at(-1), { role: 'tool', tool_call_id: callId, content: ROWS });
  } else {
    const call = last.input.find((i) => i.type === 'custom_tool_call');
    assert.deepEqual([call?.call_id, call?.name, call?.input], [callId, 'run_sql', SQL]);
    assert.deepEqual(last.input.at(-1), { type: 'custom_tool_call_output', call_id: callId, output: ROWS });
    assert.ok(!last.input.some((i) => i.type === 'function_call_output' && i.call_id === callId), 'the output came as a function\'s');
  }
  // the first turn's choice, in the upstream's shape, naming the code tool and the custom tool
  const code = codeToolOf(seen[0])?.name;
  assert.deepEqual(
    seen[0].body.tool_choice,
    model === 'mock-chat'
      ? { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: code } }, { type: 'custom', custom: { name: 'run_sql' } }] } }
      : { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: code }, { type: 'custom', name: 'run_sql' }] },
  );
}

async function customResponses(model, stream) {
  const marker = gw.marker(`custom-responses-${model}-${stream}`);
  gw.upstream.script(marker, customTurns());
  const tools = [CI_TOOL, GRAMMAR_TOOL];
  const { r, events } = await createResponse({ model, input: `${marker} go`, tools, tool_choice: CUSTOM_CHOICE }, stream);
  assert.deepEqual(r.output.map((o) => o.type), ['code_interpreter_call', 'custom_tool_call']);
  const call = r.output[1];
  assert.deepEqual([call.name, call.input, call.status], ['run_sql', SQL, 'completed']);
  assert.match(call.call_id, /^call_/);
  if (stream) {
    checkResponseEvents(events, r);
    const deltas = events.filter((e) => e.type === 'response.custom_tool_call_input.delta');
    assert.ok(deltas.length >= 2, 'the input did not stream');
    assert.equal(deltas.map((e) => e.delta).join(''), SQL);
    assert.equal(events.find((e) => e.type === 'response.custom_tool_call_input.done')?.input, SQL);
  }
  assert.equal(gw.upstream.requestsFor(marker).length, 2);

  // the client runs the tool and sends its output back
  const next = await createResponse({
    model,
    previous_response_id: r.id,
    input: [{ type: 'custom_tool_call_output', call_id: call.call_id, output: ROWS }],
    tools,
  }, stream);
  assert.equal(next.r.status, 'completed');
  assert.equal(next.r.output_text, `run_sql said: ${ROWS}`);
  if (stream) checkResponseEvents(next.events, next.r);
  checkCustomUpstream(gw.upstream.requestsFor(marker), model, call.call_id);
  // the output is kept among the response's input items, with an id of its kind
  const items = [];
  for await (const item of gw.client.responses.inputItems.list(next.r.id)) items.push(item);
  const output = items.find((i) => i.type === 'custom_tool_call_output');
  assert.deepEqual([output?.call_id, output?.output], [call.call_id, ROWS]);
  assert.match(output.id, /^ctco_/);
  return [r, next.r];
}

async function customChat(model, stream) {
  const marker = gw.marker(`custom-chat-${model}-${stream}`);
  gw.upstream.script(marker, customTurns());
  const create = (body) =>
    stream
      ? gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion()
      : gw.client.chat.completions.create(body);
  const tools = [CI_TOOL, GRAMMAR_TOOL_CHAT];
  const messages = [{ role: 'user', content: `${marker} go` }];
  const c = await create({ model, messages, tools, tool_choice: CUSTOM_CHOICE_CHAT });
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const calls = c.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].type, 'custom');
  assert.deepEqual(calls[0].custom, { name: 'run_sql', input: SQL });
  assert.equal(gw.upstream.requestsFor(marker).length, 2);

  // the client runs the tool and sends its output back
  messages.push(c.choices[0].message, { role: 'tool', tool_call_id: calls[0].id, content: ROWS });
  const c2 = await create({ model, messages, tools });
  assert.equal(c2.choices[0].finish_reason, 'stop');
  assert.equal(c2.choices[0].message.content, `run_sql said: ${ROWS}`);
  checkCustomUpstream(gw.upstream.requestsFor(marker), model, calls[0].id);
  return [c, c2];
}

for (const model of KINDS) {
  for (const client of ['responses', 'chat completions']) {
    test(`${client}, ${model}: a custom tool's call comes back after the code ran, with its name and input, and its output goes back to the model (plain, streamed)`, T, async () => {
      if (client === 'responses') {
        const plain = await customResponses(model, false);
        const streamed = await customResponses(model, true);
        plain.forEach((r, i) => assert.deepEqual(normalise(streamed[i]), normalise(r)));
      } else {
        const plain = await customChat(model, false);
        const streamed = await customChat(model, true);
        plain.forEach((c, i) => assert.deepEqual(chatGist(streamed[i]), chatGist(c)));
      }
    });
  }
}

test('responses: max_tool_calls 0 runs no code; a negative or non-integer one is a 400', T, async () => {
  const marker = gw.marker('cap-zero');
  gw.upstream.script(marker, [{ text: 'no code' }]);
  const r = await gw.client.responses.create({ model: 'mock-responses', input: `${marker} go`, tools: [CI_TOOL], max_tool_calls: 0 });
  assert.equal(r.output_text, 'no code');
  assert.deepEqual(gw.upstream.requestsFor(marker).map((q) => q.body.tool_choice), ['none']);
  for (const [value, code, message] of [
    [-1, 'integer_below_min_value', "Invalid 'max_tool_calls': integer below minimum value. Expected a value >= 0, but got -1 instead."],
    ['2', 'invalid_type', "Invalid type for 'max_tool_calls': expected an integer, but got a string instead."],
    [1.5, 'invalid_type', "Invalid type for 'max_tool_calls': expected an integer, but got a decimal instead."],
  ]) {
    await assert.rejects(
      gw.client.responses.create({ model: 'mock-responses', input: 'x', tools: [CI_TOOL], max_tool_calls: value }),
      (e) => e.status === 400 && e.param === 'max_tool_calls' && e.code === code && e.error?.message === message,
      `max_tool_calls ${JSON.stringify(value)}`,
    );
  }
});

/* ------------------------------------------------------------------------ */
/* The client's own function tool beside the code interpreter                */

const MIXED_CODE = 'forecast_ready = True\nprint("prepared")';
const mixedTurns = () => {
  const answer = (req, ctx) => {
    const weather = ctx.toolOutputs.find((o) => o.name === 'get_weather')?.output ?? '(no weather)';
    return { text: `Paris: ${weather}; code said ${firstMatch(/stdout:\n(\w+)/, ctx.codeOutputs.at(-1))}` };
  };
  // The rebuilt conversation may count the round of the two calls once or
  // twice (how the gateway lays out calls and outputs); both answer.
  return [{ calls: [{ code: MIXED_CODE }, { fn: { name: 'get_weather', arguments: { city: 'Paris' } } }] }, answer, answer];
};
const WEATHER = '{"temp_c": 21, "sky": "sunny"}';

async function mixedResponses(model, stream) {
  const marker = gw.marker(`${model}-mixed`);
  gw.upstream.script(marker, mixedTurns());
  const create = (body) => createResponse(body, stream);
  const tools = [CI_TOOL, WEATHER_RESP];
  const first = await create({ model, input: `${marker} What is the weather in Paris?`, tools, include: INCLUDE_OUTPUTS });
  const r1 = first.r;
  assert.equal(r1.status, 'completed');
  assertNoLeak(r1);
  assert.deepEqual(r1.output.map((o) => o.type), ['code_interpreter_call', 'function_call']);
  const calls = ciCalls(r1, { include: true });
  assert.equal(calls[0].code, MIXED_CODE);
  assert.match(logsOf(calls[0]), /prepared/);
  const fc = r1.output[1];
  assert.equal(fc.name, 'get_weather');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris' });
  assert.match(fc.call_id, /^call_/);
  assert.equal(fc.status, 'completed');
  assertResponsesUsage(r1, expectedUsage(1));
  if (first.events) checkResponseEvents(first.events, r1);

  const second = await create({
    model,
    previous_response_id: r1.id,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: WEATHER }],
    tools,
    include: INCLUDE_OUTPUTS,
  });
  const r2 = second.r;
  assert.equal(r2.status, 'completed');
  assertNoLeak(r2);
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.output_text, `Paris: ${WEATHER}; code said prepared`);
  if (second.events) checkResponseEvents(second.events, r2);
  checkUpstreamRequests(gw.upstream.requestsFor(marker), model);
  return [r1, r2];
}

async function mixedChat(model, stream) {
  const marker = gw.marker(`${model}-mixed-chat`);
  gw.upstream.script(marker, mixedTurns());
  const create = (body) =>
    stream
      ? gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion()
      : gw.client.chat.completions.create(body);
  const tools = [CI_TOOL, WEATHER_CHAT];
  const messages = [{ role: 'user', content: `${marker} What is the weather in Paris?` }];
  const c1 = await create({ model, messages, tools });
  assert.equal(c1.choices[0].finish_reason, 'tool_calls');
  assertNoLeak(c1);
  const calls = c1.choices[0].message.tool_calls ?? [];
  assert.equal(calls.length, 1, `tool calls: ${JSON.stringify(calls)}`);
  assert.equal(calls[0].type, 'function');
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris' });
  assertChatUsage(c1, expectedUsage(1));
  const seen1 = gw.upstream.requestsFor(marker);
  checkUpstreamRequests(seen1, model, { rounds: 1 });

  messages.push(c1.choices[0].message, { role: 'tool', tool_call_id: calls[0].id, content: WEATHER });
  const c2 = await create({ model, messages, tools });
  assert.equal(c2.choices[0].finish_reason, 'stop');
  assert.match(c2.choices[0].message.content, new RegExp(`^Paris: ${WEATHER.replace(/[{}]/g, '\\$&')}; code said `));
  assertNoLeak(c2);
  return [c1, c2];
}

for (const model of KINDS) {
  test(`responses, ${model}: the client's function tool beside code_interpreter, then previous_response_id (plain, streamed)`, T, async () => {
    const plain = await mixedResponses(model, false);
    const streamed = await mixedResponses(model, true);
    assert.deepEqual(normalise(streamed[0]), normalise(plain[0]));
    assert.deepEqual(normalise(streamed[1]), normalise(plain[1]));
  });

  test(`chat completions, ${model}: the client's function tool beside code_interpreter (plain, streamed)`, T, async () => {
    const plain = await mixedChat(model, false);
    const streamed = await mixedChat(model, true);
    assert.deepEqual(chatGist(streamed[0]), chatGist(plain[0]));
    assert.deepEqual(chatGist(streamed[1]), chatGist(plain[1]));
  });
}

/* ------------------------------------------------------------------------ */
/* Text the model writes before a code call                                   */

const PREAMBLE_TURNS = [
  { text: 'Let me compute it.', code: PRIMES_CODE },
  (req, ctx) => ({ text: `The product is ${firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)}.` }),
];

for (const model of KINDS) {
  test(`chat completions, ${model}: the texts of all turns are joined with a blank line (plain, streamed)`, T, async () => {
    const results = [];
    for (const stream of [false, true]) {
      const marker = gw.marker(`${model}-preamble-chat`);
      gw.upstream.script(marker, PREAMBLE_TURNS);
      const body = { model, messages: [{ role: 'user', content: `${marker} Multiply the first 6 primes.` }], tools: [CI_TOOL] };
      const c = stream
        ? await gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } }).finalChatCompletion()
        : await gw.client.chat.completions.create(body);
      checkUpstreamRequests(gw.upstream.requestsFor(marker), model, { rounds: 2 });
      assert.equal(c.choices[0].message.content, 'Let me compute it.\n\nThe product is 30030.');
      assert.equal(c.choices[0].finish_reason, 'stop');
      assertNoLeak(c);
      assertChatUsage(c, expectedUsage(2));
      results.push(c);
    }
    assert.deepEqual(chatGist(results[1]), chatGist(results[0]));
  });

  test(`responses, ${model}: text before a code call does not hide the answer (plain, streamed)`, T, async () => {
    const plain = await runResponses(model, { prompt: 'Multiply the first 6 primes.', turns: PREAMBLE_TURNS }, { stream: false, include: true });
    const streamed = await runResponses(model, { prompt: 'Multiply the first 6 primes.', turns: PREAMBLE_TURNS }, { stream: true, include: true });
    for (const { result: r, seen } of [plain, streamed]) {
      assert.equal(r.status, 'completed');
      assertNoLeak(r);
      checkUpstreamRequests(seen, model, { rounds: 2 });
      assert.equal(ciCalls(r, { include: true }).length, 1);
      assert.equal(r.output.at(-1).type, 'message', 'the answer is the last item');
      assert.match(r.output_text, /The product is 30030\.$/);
      assertResponsesUsage(r, expectedUsage(2));
    }
    checkResponseEvents(streamed.events, streamed.result);
    assert.deepEqual(normalise(streamed.result), normalise(plain.result));
  });
}

/* ------------------------------------------------------------------------ */
/* A Chat client sees the code: the message's code_interpreter field         */

const SEE_CODE = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.savefig('/mnt/data/line.png')\nplt.show()\nsecret = 41\nprint('saved')";
const SEE_TURNS = [
  { text: 'Let me plot it.', code: SEE_CODE },
  { text: 'The chart: [line](sandbox:/mnt/data/line.png)' },
];

/* The code points [from, to) of a text, as OpenAI's offsets count them. */
const cp = (text, from, to) => Array.from(text).slice(from, to).join('');

/* A chat completion through the SDK; streamed: the chunks too. */
async function chatWithChunks(body, stream) {
  if (!stream) return { c: await gw.client.chat.completions.create(body), chunks: null };
  const s = gw.client.chat.completions.stream({ ...body, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of s) chunks.push(chunk);
  return { c: await s.finalChatCompletion(), chunks };
}

/* The index of the first chunk that passes `test` (-1: none). */
const chunkAt = (chunks, test) => chunks.findIndex((k) => k.choices?.[0] && test(k.choices[0].delta ?? {}));

for (const model of KINDS) {
  test(`chat completions, ${model}: the message's code_interpreter field has the code, its outputs, the container and the citations; the chart downloads (plain, streamed)`, T, async () => {
    const exts = [];
    for (const stream of [false, true]) {
      const marker = gw.marker(`${model}-see-chat`);
      gw.upstream.script(marker, SEE_TURNS);
      const body = { model, messages: [{ role: 'user', content: `${marker} Plot it.` }], tools: [{ type: 'code_interpreter' }] };
      const { c, chunks } = await chatWithChunks(body, stream);
      checkUpstreamRequests(gw.upstream.requestsFor(marker), model, { rounds: 2 });
      assertNoLeak(c);
      const msg = c.choices[0].message;
      assert.equal(msg.content, 'Let me plot it.\n\nThe chart: [line](sandbox:/mnt/data/line.png)');
      assert.equal(c.choices[0].finish_reason, 'stop');
      const ext = msg.code_interpreter;
      assert.ok(ext, `no code_interpreter field: ${JSON.stringify(msg).slice(0, 500)}`);
      assert.match(ext.container_id, /^cntr_/);
      assert.deepEqual(ext.output.map((o) => o.type), ['message', 'code_interpreter_call', 'message']);
      assert.deepEqual(ext.output[0].content.map((p) => p.text), ['Let me plot it.']);
      const call = ext.output[1];
      assert.equal(call.status, 'completed');
      assert.equal(call.code, SEE_CODE);
      assert.equal(call.container_id, ext.container_id);
      assert.equal(logsOf(call), 'saved\n');
      assert.equal(imagesOf(call).length, 1);
      assertPng(imagesOf(call)[0]);
      // the citations of the content: the link, over exactly its target, and the displayed image
      const files = (await gw.client.containers.files.list(ext.container_id)).data;
      const line = files.find((f) => f.path === '/mnt/data/line.png');
      assert.ok(line, `no line.png among ${JSON.stringify(files)}`);
      const link = ext.annotations.find((a) => a.filename === 'line.png');
      assert.ok(link, `no citation of line.png: ${JSON.stringify(ext.annotations)}`);
      assert.deepEqual(link, { type: 'container_file_citation', container_id: ext.container_id, file_id: line.id, filename: 'line.png', start_index: link.start_index, end_index: link.end_index });
      assert.equal(msg.content.slice(link.start_index, link.end_index), 'sandbox:/mnt/data/line.png');
      assert.equal(ext.annotations.length, 2, JSON.stringify(ext.annotations));
      assert.ok(ext.annotations.some((a) => a.start_index === 0 && a.end_index === 0 && /^cfile_.*\.png$/.test(a.filename)), 'the displayed image is cited');
      // the container outlives the request (gateway.chat_container_expiry: container_expiry's 20 minutes): its chart downloads
      const box = await gw.client.containers.retrieve(ext.container_id);
      assert.equal(box.status, 'running');
      assert.deepEqual(box.expires_after, { anchor: 'last_active_at', minutes: 20 });
      const png = Buffer.from(await (await gw.client.containers.files.content.retrieve(line.id, { container_id: ext.container_id })).arrayBuffer());
      assert.ok(png.subarray(0, 8).equals(PNG_SIGNATURE), 'the chart is a PNG');
      assert.equal(png.length, line.bytes);
      if (stream) {
        // progress while the code runs: the call's events come as they happen, before the answer
        const type = (t) => (d) => d.code_interpreter?.type === t;
        const added = chunkAt(chunks, (d) => d.code_interpreter?.type === 'output_item.added' && d.code_interpreter.item.type === 'code_interpreter_call');
        const code = chunkAt(chunks, type('code_interpreter_call_code.delta'));
        const running = chunkAt(chunks, type('code_interpreter_call.interpreting'));
        const done = chunkAt(chunks, (d) => d.code_interpreter?.type === 'output_item.done' && d.code_interpreter.item.type === 'code_interpreter_call');
        const answer = chunkAt(chunks, (d) => typeof d.content === 'string' && d.content.startsWith('\n\nThe'));
        assert.ok(added >= 0 && added < code && code < running && running < done && done < answer, `chunk order: ${[added, code, running, done, answer]}`);
        assert.equal(chunks[done].choices[0].delta.code_interpreter.item.status, 'completed');
        assert.equal(logsOf(chunks[done].choices[0].delta.code_interpreter.item), 'saved\n');
        assert.ok(!chunks.some((k) => JSON.stringify(k).includes('output_text.delta')), 'the text is the content, not events');
        // the last chunk of the choice holds the whole field, as the plain answer has it
        const last = chunks.findLast((k) => k.choices?.[0]?.finish_reason);
        assert.deepEqual(last.choices[0].delta.code_interpreter, ext);
      }
      exts.push({ c, ext });
    }
    assert.deepEqual(normalise(exts[1].ext), normalise(exts[0].ext));
    assert.deepEqual(chatGist(exts[1].c), chatGist(exts[0].c));
  });

  test(`chat completions, ${model}: a replayed answer continues in its container, the model seeing its earlier code and output`, T, async () => {
    const first = gw.marker(`${model}-replay-1`);
    gw.upstream.script(first, SEE_TURNS);
    const messages = [{ role: 'user', content: `${first} Plot it.` }];
    const tools = [{ type: 'code_interpreter' }];
    const c1 = await gw.client.chat.completions.create({ model, messages, tools });
    const second = gw.marker(`${model}-replay-2`);
    gw.upstream.script(second, [{ code: 'print(secret + 1)' }, (req, ctx) => ({ text: `It is ${firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)}.` })]);
    messages.push(c1.choices[0].message, { role: 'user', content: `${second} And the secret plus one?` });
    const c2 = await gw.client.chat.completions.create({ model, messages, tools });
    assert.equal(c2.choices[0].message.content, 'It is 42.', 'the state of the first request is there');
    assert.equal(c2.choices[0].message.code_interpreter.container_id, c1.choices[0].message.code_interpreter.container_id);
    const seen = gw.upstream.requestsFor(second);
    checkUpstreamRequests(seen, model, { rounds: 2 });
    const sent = JSON.stringify(seen[0].body);
    assert.ok(!sent.includes('"code_interpreter"'), `the field went upstream: ${sent.slice(0, 800)}`);
    assert.ok(sent.includes(JSON.stringify(JSON.stringify({ code: SEE_CODE })).slice(1, -1)), 'the model sees its earlier code');
    assert.ok(sent.includes('saved'), 'the model sees what its earlier code printed');
    assert.ok(sent.includes('Let me plot it.') && sent.includes('The chart: [line]'), 'the model sees its earlier texts');
    // an answer without code names the container it continues, and cites its files
    const third = gw.marker(`${model}-replay-3`);
    gw.upstream.script(third, [{ text: 'Again: [line](sandbox:/mnt/data/line.png)' }]);
    messages.push(c2.choices[0].message, { role: 'user', content: `${third} The chart again?` });
    const c3 = await gw.client.chat.completions.create({ model, messages, tools });
    const ext3 = c3.choices[0].message.code_interpreter;
    assert.equal(ext3.container_id, c1.choices[0].message.code_interpreter.container_id);
    assert.deepEqual(ext3.output.map((o) => o.type), ['message']);
    assert.deepEqual(ext3.annotations.map((a) => [a.filename, cp(c3.choices[0].message.content, a.start_index, a.end_index)]), [['line.png', 'sandbox:/mnt/data/line.png']]);
  });

  test(`chat completions, ${model}: with a JSON response_format the content is the last turn's text only; earlier text is in code_interpreter (plain, streamed)`, T, async () => {
    const results = [];
    for (const stream of [false, true]) {
      const marker = gw.marker(`${model}-json-chat`);
      gw.upstream.script(marker, [
        { text: 'Let me count.', code: 'print(6 * 7)' },
        (req, ctx) => ({ text: JSON.stringify({ answer: Number(firstMatch(/stdout:\n(\d+)/, ctx.lastCodeOutput)) }) }),
      ]);
      const body = {
        model,
        messages: [{ role: 'user', content: `${marker} Count.` }],
        tools: [{ type: 'code_interpreter' }],
        response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: { type: 'object', properties: { answer: { type: 'integer' } }, required: ['answer'], additionalProperties: false } } },
      };
      const { c, chunks } = await chatWithChunks(body, stream);
      const msg = c.choices[0].message;
      assert.deepEqual(JSON.parse(msg.content), { answer: 42 });
      assert.deepEqual(msg.code_interpreter.output.map((o) => o.type), ['message', 'code_interpreter_call', 'message']);
      assert.equal(msg.code_interpreter.output[0].content[0].text, 'Let me count.');
      if (stream) {
        const contents = chunks.map((k) => k.choices?.[0]?.delta?.content).filter((t) => t);
        assert.deepEqual(contents, ['{"answer":42}'], 'the content chunks');
      }
      results.push(c);
    }
    assert.deepEqual(chatGist(results[1]), chatGist(results[0]));
  });
}

test('chat completions: with a JSON response_format, an answer the loop limit ends has the last turn\'s text (plain, streamed)', T, async () => {
  const results = [];
  for (const stream of [false, true]) {
    const marker = gw.marker('json-loop');
    gw.upstream.script(marker, [
      { text: '{"step": 1}', code: 'print(1)' },
      { text: '{"step": 2}', code: 'print(2)' },
      { text: '{"step": 3}', code: 'print(3)' },
    ]);
    const body = { model: 'mock-loop', messages: [{ role: 'user', content: `${marker} go` }], tools: [{ type: 'code_interpreter' }], response_format: { type: 'json_object' } };
    const { c } = await chatWithChunks(body, stream);
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.equal(c.choices[0].message.content, '{"step": 3}');
    assert.deepEqual(c.choices[0].message.code_interpreter.output.filter((o) => o.type === 'code_interpreter_call').map((o) => o.status), ['completed', 'completed', 'incomplete']);
    results.push(c);
  }
  assert.deepEqual(chatGist(results[1]), chatGist(results[0]));
});

if (KINDS.includes('mock-responses')) {
  test('chat completions, mock-responses: without code_interpreter a streamed answer has no code_interpreter field, as the plain one', T, async () => {
    for (const stream of [false, true]) {
      const marker = gw.marker(`no-ci-${stream}`);
      gw.upstream.script(marker, [{ items: [{ item: { id: 'rs_noci', type: 'reasoning', summary: [] } }], text: 'plain answer' }]);
      const { c, chunks } = await chatWithChunks({ model: 'mock-responses', messages: [{ role: 'user', content: `${marker} hi` }] }, stream);
      assert.equal(c.choices[0].message.content, 'plain answer');
      assert.equal(c.choices[0].message.code_interpreter, undefined);
      if (stream) assert.ok(!chunks.some((k) => k.choices?.[0]?.delta?.code_interpreter), 'a chunk carries code_interpreter');
    }
  });
}

/* ------------------------------------------------------------------------ */
/* The upstream's own annotations (url citations) reach the client           */

const DOCS = { url: 'https://docs.example/sum', title: 'Sums' };
const SPEC = { url: 'https://spec.example/café', title: 'Café spec' };
const CITED_TURNS = [
  { text: 'Per the docs, I sum.', citations: [{ ...DOCS, start_index: 8, end_index: 12 }], code: 'print(1 + 1)' },
  { text: 'Café rule: it is 2.', citations: [{ ...SPEC, start_index: 0, end_index: 9 }] },
];

for (const model of KINDS) {
  test(`responses, ${model}: the upstream's url citations stay on the text they cite (plain, streamed)`, T, async () => {
    const results = [];
    for (const stream of [false, true]) {
      const marker = gw.marker(`${model}-cited`);
      gw.upstream.script(marker, CITED_TURNS);
      const { r, events } = await createResponse({ model, input: `${marker} Sum.`, tools: [CI_TOOL] }, stream);
      assert.equal(r.status, 'completed');
      const messages = r.output.filter((o) => o.type === 'message');
      assert.deepEqual(messages.map((m) => m.content[0].annotations), [
        [{ type: 'url_citation', ...DOCS, start_index: 8, end_index: 12 }],
        [{ type: 'url_citation', ...SPEC, start_index: 0, end_index: 9 }],
      ]);
      assert.equal(cp(messages[0].content[0].text, 8, 12), 'docs');
      assert.equal(cp(messages[1].content[0].text, 0, 9), 'Café rule');
      if (stream) {
        const added = events.filter((e) => e.type === 'response.output_text.annotation.added');
        assert.deepEqual(added.map((e) => e.annotation.url), [DOCS.url, SPEC.url]);
        checkResponseEvents(events, r);
      }
      results.push(r);
    }
    assert.deepEqual(normalise(results[1]), normalise(results[0]));
  });

  test(`chat completions, ${model}: the upstream's url citations are the message's annotations, counted in its content (plain, streamed)`, T, async () => {
    const results = [];
    for (const stream of [false, true]) {
      const marker = gw.marker(`${model}-cited-chat`);
      gw.upstream.script(marker, CITED_TURNS);
      const { c } = await chatWithChunks({ model, messages: [{ role: 'user', content: `${marker} Sum.` }], tools: [{ type: 'code_interpreter' }] }, stream);
      const msg = c.choices[0].message;
      assert.equal(msg.content, 'Per the docs, I sum.\n\nCafé rule: it is 2.');
      assert.deepEqual(msg.annotations, [
        { type: 'url_citation', url_citation: { ...DOCS, start_index: 8, end_index: 12 } },
        { type: 'url_citation', url_citation: { ...SPEC, start_index: 22, end_index: 31 } },
      ]);
      assert.equal(cp(msg.content, 22, 31), 'Café rule');
      const texts = msg.code_interpreter.output.filter((o) => o.type === 'message');
      assert.deepEqual(texts.map((m) => m.content[0].annotations.map((a) => a.url)), [[DOCS.url], [SPEC.url]]);
      results.push(c);
    }
    assert.deepEqual(normalise(results[1].choices[0].message), normalise(results[0].choices[0].message));
  });
}
