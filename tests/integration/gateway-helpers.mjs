// Shared by the gateway test files (gateway*.test.mjs): one `corral serve`
// with its OpenAI-compatible gateway in front of the scripted upstream of
// upstream.mjs, an `openai` client pointed at it, and the checks every
// scenario makes (shapes, stream invariants, no leaked internal tool).
//
//   const gw = useGateway()      // before(): upstream, config, server, gw.client
//   test('...', async () => { gw.upstream.script(m, [...]); await gw.client.responses.create(...) })
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';

import OpenAI from 'openai';

import { hostLeftovers, startServer, useServer } from './harness.mjs';
import { CODE_TOOL_DESCRIPTION_PREFIX, startUpstream } from './upstream.mjs';

export const MASTER_KEY = 'sk-test-master';
export const UPSTREAM_KEY = 'sk-upstream';
export const UPSTREAM_MODEL = 'mock-model';
export const CODE_TOOL = 'python';
export const CI_TOOL = { type: 'code_interpreter', container: { type: 'auto' } };
export const INCLUDE_OUTPUTS = ['code_interpreter_call.outputs'];
export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The models of the config, and the upstream API each speaks. */
export const MODELS = {
  'mock-chat': 'chat',
  'mock-responses': 'responses',
  'mock-loop': 'chat',
};
export const LOOP_LIMIT = 2; // mock-loop's max_agentic_loops

/**
 * Where the gateway runs the model's code: `local` (corral's own sandboxes),
 * or `e2b` / `opensandbox`, the remote providers, pointed at a second
 * `corral serve` (the "sandbox host") through its E2B or OpenSandbox API.
 * `make integration-test` runs the gateway suite once with each.
 */
export const PROVIDER = process.env.CORRAL_GW_PROVIDER || 'local';
if (!['local', 'e2b', 'opensandbox'].includes(PROVIDER)) {
  throw new Error(`CORRAL_GW_PROVIDER must be local, e2b or opensandbox, not '${PROVIDER}'`);
}
/**
 * The upstream models a scenario runs over: one of each API with the local
 * provider; with a remote one, only the first, since what that run tests is
 * the provider, which is the same whatever API the upstream speaks (the
 * local run covers both).
 */
export const KINDS = PROVIDER === 'local' ? ['mock-chat', 'mock-responses'] : ['mock-chat'];
export const SANDBOX_HOST_KEY = 'e2b_5a4db0c1f2e3d4c5b6a7980112233445566778899';

/** The sandbox_tools entry (YAML lines) for a remote provider at `host` (a CorralServer). */
export function remoteToolLines(name, provider, host, { apiKey = SANDBOX_HOST_KEY, apiBase = null } = {}) {
  const base = apiBase ?? (provider === 'e2b' ? host.directUrl : `${host.osbUrl}/v1`);
  return [
    `  - sandbox_tool_name: ${name}`,
    '    litellm_params:',
    `      sandbox_provider: ${provider}`,
    `      api_base: ${base}`,
    `      api_key: ${apiKey}`,
  ];
}

/** The sandboxes `host` (a CorralServer) has through `provider`'s API. */
export async function remoteSandboxes(provider, host) {
  const res =
    provider === 'e2b'
      ? await fetch(`${host.directUrl}/v2/sandboxes`, { headers: { 'X-API-Key': SANDBOX_HOST_KEY } })
      : await fetch(`${host.osbUrl}/v1/sandboxes`, { headers: { 'OPEN-SANDBOX-API-KEY': SANDBOX_HOST_KEY } });
  const body = await res.json();
  assert.equal(res.status, 200, `listing the sandbox host's sandboxes: ${JSON.stringify(body)}`);
  return provider === 'e2b' ? body.map((s) => s.sandboxID) : body.items.map((s) => s.id);
}

export function gatewayConfig(upstreamUrl, { dataDir = null, gatewayLines = [], sandboxHost = null, topLines = [] } = {}) {
  const model = (name, api, extra = '', info = []) =>
    [
      `  - model_name: ${name}`,
      '    litellm_params:',
      `      model: openai/${UPSTREAM_MODEL}`,
      `      api_base: ${upstreamUrl}`,
      `      api_key: ${UPSTREAM_KEY}`,
      `      upstream_api: ${api}`,
      ...(extra ? [`      ${extra}`] : []),
      ...(info.length ? ['    model_info:', ...info.map((l) => `      ${l}`)] : []),
    ].join('\n');
  return [
    'model_list:',
    model('mock-chat', 'chat_completions'),
    model('mock-responses', 'responses'),
    model('mock-loop', 'chat_completions', `max_agentic_loops: ${LOOP_LIMIT}`),
    // vision models: the images the code displays go back to them
    model('mock-vision-chat', 'chat_completions', '', ['supports_vision: true', 'max_tokens: 4096']),
    model('mock-vision-responses', 'responses', '', ['supports_vision: true']),
    ...sandboxHostLines(sandboxHost),
    ...topLines,
    ...serverLines({ dataDir, gatewayLines }),
  ].join('\n');
}

/**
 * The lines of a gateway test's config after its models: no warm pool (the
 * tests count the sandboxes a request makes, and a pool would make its
 * own), the master key, the code tool's name, the data folder (when given)
 * and gatewayLines under `gateway:`; the last line is empty.
 */
export function serverLines({ dataDir = null, gatewayLines = [] } = {}) {
  return [
    'templates:',
    '  default:',
    '    pool_size: 0',
    'general_settings:',
    `  master_key: ${MASTER_KEY}`,
    'gateway:',
    `  code_tool_name: ${CODE_TOOL}`,
    ...(dataDir ? [`  data_dir: ${dataDir}`] : []),
    ...gatewayLines.map((l) => `  ${l}`),
    '',
  ];
}

/**
 * gw.server and gw.client over a useServer context: the server, and an
 * `openai` client of its gateway made on first use. Returns a function that
 * forgets the client (a restarted server has other ports).
 */
export function exposeGateway(gw, ctx) {
  let client = null;
  Object.defineProperty(gw, 'server', { get: () => ctx.server });
  Object.defineProperty(gw, 'client', {
    get: () => {
      if (!ctx.server?.gatewayUrl) throw new Error('the gateway is not running (see the before hook\'s error)');
      client ??= new OpenAI({ baseURL: ctx.server.gatewayUrl, apiKey: MASTER_KEY, maxRetries: 0, timeout: 120_000 });
      return client;
    },
  });
  return () => {
    client = null;
  };
}

/**
 * With a remote provider (CORRAL_GW_PROVIDER e2b or opensandbox), the
 * `corral serve` a gateway test's code runs on, through that provider's
 * API (its config in dir); null when the provider is local.
 */
export async function startSandboxHost(dir) {
  if (PROVIDER === 'local') return null;
  // As the gateway's own: the tests count the sandboxes a request makes, so no warm pool.
  const hostConfig = path.join(dir, 'sandbox-host.yaml');
  fs.writeFileSync(hostConfig, 'templates:\n  default:\n    pool_size: 0\n');
  // Its ceiling per key is above what one test makes at once (100 concurrent
  // requests), so that a sandbox an earlier test's request is still
  // deleting does not count against them.
  return startServer({ apiKeys: [SANDBOX_HOST_KEY], config: hostConfig, gateway: false, args: ['--max-sandboxes-per-key', '1000'] });
}

/** Once the gateway has stopped: every sandbox it made must be gone from the host, which stops. */
export async function stopSandboxHost(host) {
  if (!host) return;
  let left = [];
  try {
    left = await remoteSandboxes(PROVIDER, host);
  } finally {
    await host.stop();
  }
  assert.deepEqual(left, [], `the gateway left sandboxes on the ${PROVIDER} sandbox host`);
}

/** The config lines that send a gateway's code to the sandbox host (none without one). */
export function sandboxHostLines(host) {
  if (!host) return [];
  return [
    'sandbox_tools:',
    ...remoteToolLines('remote', PROVIDER, host),
    'litellm_settings:',
    '  code_interpreter_interception_params:',
    '    sandbox_tool_name: remote',
  ];
}

/**
 * Registers the hooks of a gateway test file: the upstream mock, a config
 * file naming it, `corral serve` with the gateway (through the harness's
 * useServer, which also checks the clean exit and the host afterwards) and
 * an `openai` client (topLines: top-level YAML lines added to the config;
 * apiKeys and args: the sandbox APIs' keys and more options of the server).
 * Returns {upstream, server, client, dir, marker()}.
 */
export function useGateway({ gatewayLines = [], topLines = [], apiKeys = [], args = [] } = {}) {
  const gw = { upstream: null, dir: null, seq: 0, sandboxHost: null, peers: [] };
  // Peers still running stop (and are checked) first. With a remote
  // provider: every sandbox the gateway made must be deleted once it has
  // stopped; then the sandbox host stops (before the host check).
  const afterStop = async () => {
    const problems = [];
    for (const peer of gw.peers.splice(0)) {
      if (peer.exitStatus) continue; // stopped by its test, which checked it
      try {
        await peer.stop();
      } catch (err) {
        problems.push(`a peer gateway: ${err.message}`);
      }
    }
    if (problems.length) throw new Error(problems.join('\n'));
    const host = gw.sandboxHost;
    gw.sandboxHost = null;
    await stopSandboxHost(host);
  };
  const ctx = useServer(async () => {
    gw.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-gateway-'));
    const dir = gw.dir;
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true })); // also when an earlier after() hook failed
    gw.sandboxHost = await startSandboxHost(dir);
    gw.upstream = await startUpstream();
    const config = path.join(gw.dir, 'gateway.yaml');
    gw.config = config;
    fs.writeFileSync(
      config,
      gatewayConfig(gw.upstream.url, { dataDir: path.join(dir, 'data'), gatewayLines, topLines, sandboxHost: gw.sandboxHost }),
    );
    return { config, gateway: true, apiKeys, args };
  }, { afterStop });
  const forgetClient = exposeGateway(gw, ctx);
  after(async () => {
    await gw.upstream?.close();
    if (gw.dir) fs.rmSync(gw.dir, { recursive: true, force: true });
  });
  /**
   * Stops `corral serve` (kill: with SIGKILL, as a crash would) and starts
   * it again with the same config (new ports).
   */
  gw.restart = async ({ kill = false } = {}) => {
    if (kill) {
      await ctx.server.kill();
    } else {
      await ctx.server.stop();
    }
    ctx.server = await startServer({ config: gw.config, gateway: true });
    ctx.server.setEnv();
    forgetClient();
  };
  /**
   * Another `corral serve` with the same configuration but a data
   * directory of its own: with a shared store (PostgreSQL), a second front
   * of the same gateway. Stopped and checked after the tests, unless a test
   * stopped it (`await peer.stop()`, which checks it then).
   */
  gw.startPeer = async () => {
    const n = gw.peers.length + 1;
    const config = path.join(gw.dir, `gateway-peer-${n}.yaml`);
    fs.writeFileSync(
      config,
      gatewayConfig(gw.upstream.url, { dataDir: path.join(gw.dir, `data-peer-${n}`), gatewayLines, topLines, sandboxHost: gw.sandboxHost }),
    );
    const peer = await startServer({ config, gateway: true });
    gw.peers.push(peer);
    return peer;
  };
  /** A marker no other script's marker contains (or is contained in). */
  gw.marker = (name) => `{{${name}#${++gw.seq}}}`;
  return gw;
}

/** Every event of a stream, and what ended it (null: it ended cleanly). */
export async function drain(stream) {
  const events = [];
  try {
    for await (const e of stream) events.push(e);
    return { events, thrown: null };
  } catch (err) {
    return { events, thrown: err };
  }
}

/* ------------------------------------------------------------------------ */
/* Reading what the mock saw                                                */

/** The code tool as the upstream saw it in a recorded request, or undefined. */
export function codeToolOf(req) {
  const tools = Array.isArray(req.body?.tools) ? req.body.tools : [];
  return tools
    .filter((t) => t?.type === 'function')
    .map((t) => (req.api === 'chat' ? t.function : t))
    .find((t) => typeof t?.description === 'string' && t.description.startsWith(CODE_TOOL_DESCRIPTION_PREFIX));
}

/**
 * What every upstream request of an intercepted conversation must look
 * like: the model's upstream API and path, the upstream key and model
 * name, the code tool in the upstream's shape instead of code_interpreter,
 * the whole conversation (no previous_response_id), usage asked for when
 * streaming from a chat upstream; rounds 0..n-1 in order.
 */
export function checkUpstreamRequests(seen, model, { rounds } = {}) {
  const api = MODELS[model];
  assert.ok(seen.length > 0, 'the upstream received no request for this conversation');
  for (const req of seen) {
    const where = `upstream request (round ${req.round})`;
    assert.equal(req.api, api, `${where}: went to ${req.path}, the model's upstream speaks ${api}`);
    assert.equal(req.path, api === 'chat' ? '/v1/chat/completions' : '/v1/responses', where);
    assert.equal(req.headers.authorization, `Bearer ${UPSTREAM_KEY}`, `${where}: authorization`);
    assert.equal(req.body.model, UPSTREAM_MODEL, `${where}: model`);
    assert.equal(req.body.previous_response_id ?? null, null, `${where}: previous_response_id sent upstream`);
    assert.equal(req.mockError, undefined, `${where}: the mock refused it: ${req.mockError}`);
    const tools = req.body.tools ?? [];
    assert.ok(!tools.some((t) => t?.type === 'code_interpreter'), `${where}: code_interpreter sent upstream`);
    const code = codeToolOf(req);
    assert.ok(code, `${where}: no code tool among ${JSON.stringify(tools)}`);
    if (api === 'chat') {
      const raw = tools.find((t) => t.function === code);
      assert.equal(raw.type, 'function');
    }
    assert.equal(code.name, CODE_TOOL, `${where}: code tool name`);
    assert.equal(code.parameters?.type, 'object');
    assert.equal(code.parameters?.properties?.code?.type, 'string');
    assert.deepEqual(code.parameters?.required, ['code']);
    if (req.stream && api === 'chat') {
      assert.equal(req.body.stream_options?.include_usage, true, `${where}: streaming without stream_options.include_usage`);
    }
  }
  if (rounds !== undefined) {
    assert.deepEqual(seen.map((r) => r.round), Array.from({ length: rounds }, (_, i) => i), 'the rounds the upstream was asked');
  }
}

/** The tool outputs the model read, in order (from the last upstream request). */
export function codeOutputsSeen(seen) {
  return seen.length ? seen[seen.length - 1].ctx?.codeOutputs ?? [] : [];
}

/* ------------------------------------------------------------------------ */
/* Shapes                                                                   */

/** Nothing of the internal code tool reaches the client. */
export function assertNoLeak(obj, label = 'the answer') {
  const text = JSON.stringify(obj);
  assert.ok(!text.includes(CODE_TOOL_DESCRIPTION_PREFIX), `${label} shows the internal code tool: ${text.slice(0, 2000)}`);
  if (Array.isArray(obj?.output)) {
    const leaked = obj.output.filter((o) => o.type === 'function_call' && o.name === CODE_TOOL);
    assert.deepEqual(leaked, [], `${label} holds a function_call of the code tool`);
  }
  if (Array.isArray(obj?.choices)) {
    for (const c of obj.choices) {
      const calls = c.message?.tool_calls ?? [];
      assert.ok(!calls.some((t) => t.function?.name === CODE_TOOL), `${label} holds a tool call of the code tool`);
    }
  }
}

/**
 * The code_interpreter_call items of a Response, each checked (status
 * completed, or failed with `failed`; `unexecuted`: a last item of status incomplete, the call the
 * model made beyond the loop limit, is allowed and left out).
 */
export function ciCalls(resp, { include = false, unexecuted = false, failed = false } = {}) {
  let calls = resp.output.filter((o) => o.type === 'code_interpreter_call');
  if (unexecuted && calls.length && calls.at(-1).status === 'incomplete') {
    const last = calls.at(-1);
    assert.match(last.id, /^ci_/);
    assert.ok(last.outputs === null || (Array.isArray(last.outputs) && last.outputs.length === 0), 'the unexecuted call has outputs');
    assert.equal(resp.output.at(-1), last, 'the unexecuted call is not the last item');
    calls = calls.slice(0, -1);
  }
  for (const c of calls) {
    assert.match(c.id, /^ci_/, 'code_interpreter_call id');
    assert.equal(c.status, failed ? 'failed' : 'completed', `code_interpreter_call ${c.id} status`);
    assert.equal(typeof c.code, 'string');
    assert.match(c.container_id, /^cntr_/, 'container_id');
    if (include) {
      assert.ok(Array.isArray(c.outputs), `outputs of ${c.id} with the include: ${JSON.stringify(c.outputs)}`);
      for (const o of c.outputs) {
        assert.ok(['logs', 'image'].includes(o.type), `output type ${o.type}`);
        if (o.type === 'logs') assert.equal(typeof o.logs, 'string');
        if (o.type === 'image') assert.match(o.url, /^data:image\/png;base64,/);
      }
    } else {
      assert.equal(c.outputs, null, `outputs of ${c.id} without the include`);
    }
  }
  return calls;
}

export const logsOf = (call) => (call.outputs ?? []).filter((o) => o.type === 'logs').map((o) => o.logs).join('');
export const imagesOf = (call) => (call.outputs ?? []).filter((o) => o.type === 'image').map((o) => o.url);

export function assertPng(dataUrl) {
  const m = /^data:image\/png;base64,(.+)$/s.exec(dataUrl);
  assert.ok(m, `not a PNG data URL: ${dataUrl.slice(0, 60)}`);
  const bytes = Buffer.from(m[1], 'base64');
  assert.deepEqual(bytes.subarray(0, 8), PNG_SIGNATURE, 'not a PNG');
  assert.ok(bytes.length > 1000, `suspiciously small PNG (${bytes.length} bytes)`);
}

export function assertResponsesUsage(resp, expected, label = 'usage') {
  assert.ok(resp.usage, `${label}: none`);
  assert.deepEqual(
    { input: resp.usage.input_tokens, output: resp.usage.output_tokens, total: resp.usage.total_tokens },
    { input: expected.input_tokens, output: expected.output_tokens, total: expected.total_tokens },
    `${label}: summed over the upstream turns`,
  );
}

export function assertChatUsage(completion, expected, label = 'usage') {
  assert.ok(completion.usage, `${label}: none`);
  assert.deepEqual(
    { prompt: completion.usage.prompt_tokens, completion: completion.usage.completion_tokens, total: completion.usage.total_tokens },
    { prompt: expected.prompt_tokens, completion: expected.completion_tokens, total: expected.total_tokens },
    `${label}: summed over the upstream turns`,
  );
}

/* ------------------------------------------------------------------------ */
/* Comparing a streamed result with a non-streamed one                      */

const ID_PATTERN = /^(resp|ci|cntr|msg|fc|ctc|call|chatcmpl|rs|cfile)([_-])([A-Za-z0-9_-]+)(\.[a-z0-9]+)?$/; // an image's filename is its id + ".png"
const TIME_KEYS = new Set(['created', 'created_at', 'completed_at']);
const SDK_KEYS = new Set(['parsed', 'parsed_arguments', 'output_parsed']); // added by the SDK's helpers

/**
 * A copy with ids renamed by order of first appearance (resp_#1, ci_#1,
 * cntr_#1...: equal ids stay equal), timestamps zeroed, image data URLs
 * reduced to their type, and what the SDK's helpers add removed.
 */
export function normalise(value) {
  const names = new Map();
  const counters = new Map();
  return JSON.parse(
    JSON.stringify(value, (key, v) => {
      if (SDK_KEYS.has(key)) return undefined;
      if (TIME_KEYS.has(key) && typeof v === 'number') return 0;
      if (typeof v !== 'string') return v;
      if (v.startsWith('data:image/png;base64,')) return 'data:image/png;base64,<png>';
      const m = ID_PATTERN.exec(v);
      if (!m) return v;
      const id = `${m[1]}${m[2]}${m[3]}`;
      if (!names.has(id)) {
        const n = (counters.get(m[1]) ?? 0) + 1;
        counters.set(m[1], n);
        names.set(id, `${m[1]}${m[2]}#${n}`);
      }
      return names.get(id) + (m[4] ?? '');
    }),
  );
}

/** What a chat completion says, for comparing a streamed one with a plain one. */
export function chatGist(c) {
  return normalise({
    object: c.object,
    model: c.model,
    choices: c.choices.map((ch) => ({
      index: ch.index,
      finish_reason: ch.finish_reason,
      role: ch.message.role,
      content: ch.message.content ?? null,
      refusal: ch.message.refusal ?? null,
      tool_calls: (ch.message.tool_calls ?? []).map((t) =>
        t.type === 'custom'
          ? { id: t.id, type: t.type, name: t.custom.name, input: t.custom.input }
          : { id: t.id, type: t.type, name: t.function.name, arguments: t.function.arguments },
      ),
    })),
    usage: c.usage
      ? { prompt_tokens: c.usage.prompt_tokens, completion_tokens: c.usage.completion_tokens, total_tokens: c.usage.total_tokens }
      : null,
  });
}

/* ------------------------------------------------------------------------ */
/* Responses stream invariants                                              */

const CI_ORDER = [
  'response.output_item.added',
  'response.code_interpreter_call.in_progress',
  'response.code_interpreter_call_code.delta',
  'response.code_interpreter_call_code.done',
  'response.code_interpreter_call.interpreting',
  'response.code_interpreter_call.completed',
  'response.output_item.done',
];

/**
 * Checks a Responses event stream (as the SDK delivered it: stream.on('event'))
 * against contract section 3: sequence numbers 0, 1, 2...; response.created
 * first, exactly one terminal event, last; output indexes appended in
 * order; each code_interpreter_call in the canonical order, with deltas
 * that add up to its code, in several when the code is long (wholeCalls:
 * an upstream that gives a call whole, as Gemini does, gives one); no event
 * for the internal code tool.
 */
export function checkResponseEvents(events, final, { terminal = 'response.completed', wholeCalls = false } = {}) {
  assert.ok(events.length >= 3, `only ${events.length} events`);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), 'sequence_number must go 0, 1, 2...');
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[0].response.status, 'in_progress');
  const terminals = events.filter((e) => ['response.completed', 'response.incomplete', 'response.failed'].includes(e.type));
  assert.deepEqual(terminals.map((e) => e.type), [terminal], 'terminal events');
  assert.equal(events.at(-1).type, terminal, 'the terminal event is the last');
  assert.equal(events.at(-1).response.status, terminal.slice('response.'.length));

  const added = events.filter((e) => e.type === 'response.output_item.added');
  assert.deepEqual(added.map((e) => e.output_index), added.map((_, i) => i), 'output_index appended in order');
  assert.equal(added.length, final.output.length, 'one output_item.added per output item');

  for (const a of added) {
    const item = a.item;
    if (item.type === 'function_call') assert.notEqual(item.name, CODE_TOOL, 'a function_call of the code tool was streamed');
    if (item.type !== 'code_interpreter_call') continue;
    const own = events.filter((e) => e.output_index === a.output_index && (e === a || e.item_id === item.id || e.item?.id === item.id));
    const kinds = own.map((e) => e.type);
    const collapsed = kinds.filter((k, i) => !(k === 'response.code_interpreter_call_code.delta' && kinds[i - 1] === k));
    const finalItem = own.at(-1).item;
    // A call made beyond the loop limit is announced as the model writes it,
    // then ends incomplete without running; a call whose sandbox failed ends
    // failed, after `interpreting` when the sandbox had started.
    const started = kinds.includes(CI_ORDER[4]);
    const expected =
      finalItem?.status === 'incomplete'
        ? [...CI_ORDER.slice(0, 4), CI_ORDER[6]]
        : finalItem?.status === 'failed'
          ? [...CI_ORDER.slice(0, started ? 5 : 4), CI_ORDER[6]]
          : CI_ORDER;
    assert.deepEqual(collapsed, expected, `events of ${item.id} out of canonical order: ${kinds.join(', ')}`);
    assert.match(item.id, /^ci_/);
    assert.equal(item.status, 'in_progress');
    assert.match(item.container_id, /^cntr_/);
    const deltas = own.filter((e) => e.type === 'response.code_interpreter_call_code.delta').map((e) => e.delta);
    const done = own.find((e) => e.type === 'response.code_interpreter_call_code.done');
    assert.equal(deltas.join(''), done.code, 'code deltas concatenated differ from code.done');
    assert.equal(done.code, finalItem.code, 'code.done differs from the final item');
    if (done.code.length > 40 && !wholeCalls) {
      assert.ok(deltas.length >= 2, `the code of ${item.id} (${done.code.length} chars) came in ${deltas.length} delta: not streamed as the model wrote it`);
    }
    assert.equal(finalItem.container_id, item.container_id);
    assert.ok(['completed', 'incomplete', 'failed'].includes(finalItem.status), `status ${finalItem.status}`);
    const inFinal = final.output[a.output_index];
    assert.equal(inFinal?.id, item.id, 'the final response has the item at the same index');
  }
  // Items are streamed one after the other, as OpenAI streams them: each
  // item's events are contiguous, done before the next item is added.
  let open = null;
  for (const e of events) {
    if (e.type === 'response.output_item.added') {
      if (open !== null) {
        const around = events.filter((x) => x.sequence_number > e.sequence_number - 6 && x.sequence_number < e.sequence_number + 6);
        assert.fail(
          `item ${e.output_index} (${e.item.type}) added while item ${open} was not done (OpenAI streams items one after the other): ` +
            around.map((x) => `${x.sequence_number} ${x.type}${x.output_index !== undefined ? ` [${x.output_index}]` : ''}`).join(', '),
        );
      }
      open = e.output_index;
    } else if (e.type === 'response.output_item.done') {
      assert.equal(e.output_index, open, 'output_item.done of an item that is not the open one');
      open = null;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Host                                                                     */

/** Ids of the sandboxes on the host now (processes of sandbox uids and cgroups). */
export function sandboxIds() {
  const { left, foreign } = hostLeftovers();
  const ids = new Set();
  for (const p of [...left.processes, ...foreign.processes]) {
    const m = / sandbox (\S+)$/.exec(p);
    if (m) ids.add(m[1]);
  }
  for (const dir of [...left.cgroups, ...foreign.cgroups]) ids.add(path.basename(dir));
  return ids;
}

/** Sandbox processes on the host now (as hostLeftovers describes them). */
export function sandboxProcesses() {
  const { left, foreign } = hostLeftovers();
  return [...left.processes, ...foreign.processes];
}
