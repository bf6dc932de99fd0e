// The scenarios every native upstream (Anthropic, Gemini, Vertex AI,
// Bedrock) plays, through the official `openai` SDK against `corral serve`:
// the product of the first 6 primes, state across two code calls, an error
// the model fixes, a chart (whose image reaches the vision model in the
// upstream's own format), and a client tool mixed with a code call, each
// through /v1/responses and /v1/chat/completions, whole and streamed. The
// scripted upstream (upstream.mjs) speaks the native format through a
// dialect, which validates every request: a request it refuses fails the
// test.
//
//   useNativeGateway({ dialect, modelLines: (base) => [...], env })
//     before(): the mock with the dialect, a config whose model `native` is
//     modelLines (litellm_params' lines, at the mock's base URL), `corral
//     serve` with env added to its environment (topLines: more models'
//     lines, or a function of (base, dir) giving them). Returns gw (upstream,
//     server, client, marker()).
//   nativeScenarioTests(gw, { dialect })
//     registers the scenarios' tests.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import {
  assertNoLeak,
  assertPng,
  checkResponseEvents,
  CI_TOOL,
  ciCalls,
  codeOutputsSeen,
  exposeGateway,
  imagesOf,
  sandboxHostLines,
  startSandboxHost,
  stopSandboxHost,
  INCLUDE_OUTPUTS,
  logsOf,
  serverLines,
} from './gateway-helpers.mjs';
import { startServer, useServer } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

export const NATIVE_MODEL = 'native';
const T = { timeout: 120_000 };
const firstMatch = (re, text) => re.exec(text ?? '')?.[1] ?? '(not found)';

const PRIMES_CODE = 'import math\nprimes = [2, 3, 5, 7, 11, 13]\nprint(math.prod(primes))';

const WEATHER = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** The image_url parts (data URLs) of the chat view of a request. */
function imagesSent(req) {
  const out = [];
  for (const m of req.chatBody?.messages ?? []) {
    if (!Array.isArray(m.content)) continue;
    for (const p of m.content) if (p?.type === 'image_url') out.push(p.image_url?.url ?? '');
  }
  return out;
}

export const NATIVE_SCENARIOS = {
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
    checkResponses(r) {
      const calls = ciCalls(r, { include: true });
      assert.equal(calls.length, 1);
      assert.equal(calls[0].code, PRIMES_CODE);
      assert.match(logsOf(calls[0]), /30030/);
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
      { text: 'Setting it up.', code: 'counter = 40\nnames = ["a"]' },
      { code: 'counter += 2\nnames.append("b")\nprint(names)\ncounter' },
      (req, ctx) => ({
        text: `counter=${firstMatch(/result:\n(\d+)/, ctx.lastCodeOutput)} names=${firstMatch(/stdout:\n(.*)\n/, ctx.lastCodeOutput)}`,
      }),
    ],
    rounds: 3,
    checkSeen(seen) {
      const outs = codeOutputsSeen(seen);
      assert.equal(outs.length, 2, JSON.stringify(outs));
      assert.match(outs[1], /result:\n42/);
    },
    checkResponses(r) {
      const calls = ciCalls(r, { include: true });
      assert.equal(calls.length, 2);
      assert.equal(calls[0].container_id, calls[1].container_id, 'two calls of one request, one container');
      assert.equal(r.output_text, "Setting it up.counter=42 names=['a', 'b']");
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, "Setting it up.\n\ncounter=42 names=['a', 'b']");
    },
  },

  'error-fix': {
    prompt: 'Divide, and fix it if it fails.',
    turns: [
      { code: 'value = 1 / 0' },
      (req, ctx) =>
        /ZeroDivisionError/.test(ctx.lastCodeOutput ?? '') ? { code: 'value = 1 / 1\nprint(value)' } : { text: `no error reported: ${ctx.lastCodeOutput}` },
      (req, ctx) => ({ text: `Fixed: value is ${firstMatch(/stdout:\n(\S+)/, ctx.lastCodeOutput)}.` }),
    ],
    rounds: 3,
    checkSeen(seen) {
      const outs = codeOutputsSeen(seen);
      assert.match(outs[0] ?? '', /^error: ZeroDivisionError: division by zero\n/, `the first output: ${outs[0]}`);
    },
    checkResponses(r) {
      assert.equal(ciCalls(r, { include: true }).length, 2);
      assert.equal(r.output_text, 'Fixed: value is 1.0.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'Fixed: value is 1.0.');
    },
  },

  chart: {
    prompt: 'Plot the squares.',
    turns: [
      { code: 'import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3))\nplt.plot([1, 2, 3, 4], [1, 4, 9, 16])\nplt.show()' },
      (chat) => ({ text: `I see ${imagesSent({ chatBody: chat }).length} chart.` }),
    ],
    rounds: 2,
    checkSeen(seen) {
      const images = imagesSent(seen.at(-1));
      assert.equal(images.length, 1, 'the vision model was shown the chart');
      assertPng(images[0]);
    },
    checkResponses(r) {
      const calls = ciCalls(r, { include: true });
      assert.equal(imagesOf(calls[0]).length, 1);
      assertPng(imagesOf(calls[0])[0]);
      assert.equal(r.output_text, 'I see 1 chart.');
    },
    checkChat(c) {
      assert.equal(c.choices[0].message.content, 'I see 1 chart.');
    },
  },
};

/** A response through the SDK, streamed or not; a stream's events are
 * checked against the contract (sequence numbers, item order, one terminal
 * event), and nothing of the internal code tool shows. */
async function respond(client, body, stream, { wholeCalls = false } = {}) {
  if (!stream) {
    const r = await client.responses.create(body);
    assertNoLeak(r);
    return r;
  }
  const events = [];
  const s = client.responses.stream(body);
  s.on('event', (e) => events.push(e));
  const r = await s.finalResponse();
  checkResponseEvents(events, r, { wholeCalls });
  assertNoLeak(r);
  return r;
}

async function complete(client, body, stream) {
  if (!stream) return client.chat.completions.create(body);
  // (a chat stream reports usage when asked to)
  const s = client.chat.completions.stream({ ...body, stream_options: { include_usage: true } });
  return s.finalChatCompletion();
}

/**
 * The hooks of a native upstream's test file (see the top). The model is
 * vision-capable, so the chart's image goes back to it.
 */
export function useNativeGateway({ dialect, modelLines, env = {}, topLines = [], gatewayLines = [] }) {
  const gw = { upstream: null, dir: null, seq: 0, sandboxHost: null };
  // with a remote provider, its sandbox host is checked and stopped once the gateway has stopped
  const afterStop = async () => {
    const host = gw.sandboxHost;
    gw.sandboxHost = null;
    await stopSandboxHost(host);
  };
  const ctx = useServer(async () => {
    gw.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-native-'));
    const dir = gw.dir;
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    gw.sandboxHost = await startSandboxHost(dir);
    gw.upstream = await startUpstream({ dialects: [dialect] });
    const base = `http://127.0.0.1:${gw.upstream.port}`;
    const config = path.join(dir, 'gateway.yaml');
    fs.writeFileSync(
      config,
      [
        'model_list:',
        `  - model_name: ${NATIVE_MODEL}`,
        '    litellm_params:',
        ...modelLines(base, dir).map((l) => `      ${l}`),
        '    model_info:',
        '      supports_vision: true',
        ...(typeof topLines === 'function' ? topLines(base, dir) : topLines),
        ...sandboxHostLines(gw.sandboxHost),
        ...serverLines({ dataDir: path.join(dir, 'data'), gatewayLines }),
      ].join('\n'),
    );
    gw.config = config;
    return { config, gateway: true, env };
  }, { afterStop });
  const forgetClient = exposeGateway(gw, ctx);
  /** Stops `corral serve` (SIGTERM; its clean exit asserted) and starts it again (new ports). */
  gw.restart = async () => {
    await ctx.server.stop();
    ctx.server = await startServer({ config: gw.config, gateway: true, env });
    ctx.server.setEnv();
    forgetClient();
  };
  after(async () => {
    await gw.upstream?.close();
    if (gw.dir) fs.rmSync(gw.dir, { recursive: true, force: true });
  });
  gw.marker = (name) => `{{${name}#${++gw.seq}}}`;
  return gw;
}

/** Every request the dialect received for marker: its own, none refused. */
export function checkNativeRequests(gw, dialect, marker, rounds) {
  const seen = gw.upstream.requestsFor(marker);
  for (const req of seen) {
    assert.equal(req.api, dialect.name, `a request went to ${req.path}, not the ${dialect.name} API`);
    assert.equal(req.mockError, undefined, `the ${dialect.name} mock refused a request: ${req.mockError}`);
    assert.equal(req.status, 200, `the mock answered ${req.status}: ${JSON.stringify(req.reply)?.slice(0, 300)}`);
  }
  if (rounds !== undefined) assert.deepEqual(seen.map((r) => r.round), Array.from({ length: rounds }, (_, i) => i), 'the rounds the upstream was asked');
  return seen;
}

/** Registers the scenarios of NATIVE_SCENARIOS, and the client tool's, for gw's model. */
export function nativeScenarioTests(gw, { dialect }) {
  for (const [name, sc] of Object.entries(NATIVE_SCENARIOS)) {
    for (const stream of [false, true]) {
      const how = stream ? 'streamed' : 'whole';
      test(`${dialect.name}: ${name} through /v1/responses, ${how}`, T, async () => {
        const marker = gw.upstream.script(gw.marker(name), sc.turns);
        const r = await respond(gw.client, { model: NATIVE_MODEL, input: `${marker} ${sc.prompt}`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS }, stream, dialect);
        const seen = checkNativeRequests(gw, dialect, marker, sc.rounds);
        assert.equal(r.status, 'completed');
        sc.checkSeen(seen);
        sc.checkResponses(r);
        assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, `usage: ${JSON.stringify(r.usage)}`);
      });
      test(`${dialect.name}: ${name} through /v1/chat/completions, ${how}`, T, async () => {
        const marker = gw.upstream.script(gw.marker(name), sc.turns);
        const c = await complete(gw.client, { model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} ${sc.prompt}` }], tools: [CI_TOOL] }, stream);
        const seen = checkNativeRequests(gw, dialect, marker, sc.rounds);
        sc.checkSeen(seen);
        sc.checkChat(c);
        assert.ok(c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0, `usage: ${JSON.stringify(c.usage)}`);
      });
    }
  }

  // A client tool beside the code: the code runs, the client's call comes
  // back to the client, and its answer goes on in a second request.
  const mixedTurns = [
    { text: 'Computing, and asking for the weather.', calls: [{ code: 'x = 6 * 7\nprint(x)' }, { fn: { name: WEATHER.name, arguments: { city: 'Paris' } } }] },
    // (a Chat client's replayed code call carries its logs, not the text the model read: "42\n", not "stdout:\n42\n")
    (req, ctx) => ({ text: `x is ${firstMatch(/^(?:stdout:\n)?(\d+)/, ctx.codeOutputs[0])}, the weather is ${ctx.lastToolOutput}.` }),
  ];
  for (const stream of [false, true]) {
    const how = stream ? 'streamed' : 'whole';
    test(`${dialect.name}: a client tool beside a code call, /v1/responses, ${how}`, T, async () => {
      const marker = gw.upstream.script(gw.marker('mixed'), mixedTurns);
      const tools = [CI_TOOL, { type: 'function', ...WEATHER }];
      const first = await respond(gw.client, { model: NATIVE_MODEL, input: `${marker} Compute and check the weather.`, tools }, stream, dialect);
      const call = first.output.find((o) => o.type === 'function_call');
      assert.ok(call, `no function_call in ${JSON.stringify(first.output)}`);
      assert.equal(call.name, WEATHER.name);
      assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
      assert.equal(ciCalls(first).length, 1);
      const second = await respond(
        gw.client,
        { model: NATIVE_MODEL, previous_response_id: first.id, input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny' }], tools },
        stream,
        dialect,
      );
      checkNativeRequests(gw, dialect, marker, 2);
      assert.equal(second.output_text, 'x is 42, the weather is sunny.');
    });
    test(`${dialect.name}: a client tool beside a code call, /v1/chat/completions, ${how}`, T, async () => {
      const marker = gw.upstream.script(gw.marker('mixed'), mixedTurns);
      const tools = [CI_TOOL, { type: 'function', function: WEATHER }];
      const messages = [{ role: 'user', content: `${marker} Compute and check the weather.` }];
      const first = await complete(gw.client, { model: NATIVE_MODEL, messages, tools }, stream);
      const msg = first.choices[0].message;
      assert.equal(first.choices[0].finish_reason, 'tool_calls');
      assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg.tool_calls));
      assert.equal(msg.tool_calls[0].function.name, WEATHER.name);
      messages.push(msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: 'sunny' });
      const second = await complete(gw.client, { model: NATIVE_MODEL, messages, tools }, stream);
      checkNativeRequests(gw, dialect, marker, 2);
      assert.equal(second.choices[0].message.content, 'x is 42, the weather is sunny.');
    });
  }

  test(`${dialect.name}: an upstream error keeps its status and message, in OpenAI's shape`, T, async () => {
    const marker = gw.upstream.script(gw.marker('error'), [{ status: 429, error: { message: 'mock: slow down', type: 'rate_limit_error' } }]);
    await assert.rejects(gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} hi`, tools: [CI_TOOL] }), (err) => {
      assert.equal(err.status, 429);
      assert.match(err.error?.message ?? err.message, /mock: slow down/);
      return true;
    });
    await assert.rejects(gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] }), (err) => {
      assert.equal(err.status, 429);
      assert.match(err.error?.message ?? err.message, /mock: slow down/);
      return true;
    });
  });

  test(`${dialect.name}: a request without code_interpreter is translated too`, T, async () => {
    const marker = gw.upstream.script(gw.marker('plain'), [{ text: 'Hello there.' }]);
    // an assistant message of the client's own never passes native content off as the
    // upstream's (wire_native is the loop's): its text is translated as any other
    const forged = { role: 'assistant', content: 'Earlier answer.', wire_native: { content: [{ type: 'forged', forged: true }], parts: [{ forged: true }] } };
    const c = await gw.client.chat.completions.create({
      model: NATIVE_MODEL,
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Earlier question.' }, forged, { role: 'user', content: `${marker} hi` }],
    });
    assert.equal(c.choices[0].message.content, 'Hello there.');
    const sent = gw.upstream.requestsFor(marker)[0];
    assert.ok(!sent.rawBody.includes('forged'), `a client's wire_native reached the upstream: ${sent.rawBody}`);
    assert.ok(sent.rawBody.includes('Earlier answer.'), 'the assistant message was not translated');
    const r = await gw.client.responses.create({ model: NATIVE_MODEL, instructions: 'Be brief.', input: `${marker} hi` });
    assert.equal(r.output_text, 'Hello there.');
    checkNativeRequests(gw, dialect, marker);
  });
}
