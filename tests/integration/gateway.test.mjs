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
  LOOP_LIMIT,
  assertChatUsage,
  assertNoLeak,
  assertPng,
  assertResponsesUsage,
  chatGist,
  checkResponseEvents,
  checkUpstreamRequests,
  ciCalls,
  codeOutputsSeen,
  imagesOf,
  logsOf,
  normalise,
  useGateway,
} from './gateway-helpers.mjs';
import { expectedUsage } from './upstream.mjs';

const gw = useGateway();

const T = { timeout: 120_000 };
const KINDS = ['mock-chat', 'mock-responses'];

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
  let events = null;
  let result;
  if (stream) {
    events = [];
    const s = gw.client.responses.stream(body);
    s.on('event', (e) => events.push(e));
    result = await s.finalResponse();
  } else {
    result = await gw.client.responses.create(body);
  }
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
  let events = null;
  let r;
  if (stream) {
    events = [];
    const s = gw.client.responses.stream(body);
    s.on('event', (e) => events.push(e));
    r = await s.finalResponse();
  } else {
    r = await gw.client.responses.create(body);
  }
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
  const create = async (body) => {
    if (!stream) return { r: await gw.client.responses.create(body), events: null };
    const events = [];
    const s = gw.client.responses.stream(body);
    s.on('event', (e) => events.push(e));
    return { r: await s.finalResponse(), events };
  };
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
