// A scripted upstream model server for the gateway tests: it speaks OpenAI's
// Chat Completions and Responses wire formats (JSON and SSE streams) and
// answers from scripts instead of a model.
//
//   import { startUpstream } from './upstream.mjs'
//   const upstream = await startUpstream()
//   upstream.script('PRIMES-1', [
//     { code: 'import math\nmath.prod([2, 3, 5, 7, 11, 13])' },
//     (req, ctx) => ({ text: `The product is ${ctx.lastCodeOutput.match(/\d+/)[0]}.` }),
//   ])
//   // POST upstream.url + '/chat/completions' or '/responses' with a user
//   // message containing "PRIMES-1" ...
//   upstream.requests   // every request received: {method, path, headers, body, api, marker, round, ...}
//   await upstream.close()
//
// Choosing the script and the turn
//   A script is chosen by its marker: the most recent user message whose text
//   contains a registered marker selects it (normally the first user
//   message; a later request of a previous_response_id chain can carry its
//   own marker in its own user message). When several markers match one
//   message, the longest wins. The turn answered is the number of tool-call
//   rounds in the conversation after that user message: chat, the assistant
//   messages with tool_calls; responses, the groups of consecutive
//   function_call and custom_tool_call items in `input`. A tool call whose id this mock issued
//   counts for the upstream answer that issued it, so a round is counted
//   once however the caller arranges the calls and outputs of one round.
//
// Turns
//   { text }                              an assistant message
//   { text, citations: [{url, title, start_index, end_index}] }
//                                         with url citations of its text (offsets in
//                                         code points): chat, message.annotations
//                                         (streamed in a chunk after the content);
//                                         responses, the output_text part's annotations
//                                         (streamed as response.output_text.annotation.added)
//   { code }                              one call of the code tool (arguments {"code": ...})
//   { calls: [{code} | {fn: {name, arguments}} | {custom: {name, input}}], text? }
//                                         several calls in one turn (text first, if any);
//                                         custom: a call of a custom tool the request declares
//   { items: [{item, added?, events?}], ...turn }
//                                         Responses only: output items of other kinds
//                                         (reasoning, web_search_call, mcp_approval_request...)
//                                         before the rest of the turn, as given; streamed as
//                                         output_item.added (`added`, else the item with
//                                         status "in_progress" when it has a status), the
//                                         events given (output_index and item_id filled in),
//                                         then output_item.done
//   { status, error, headers? }           an HTTP error with an OpenAI error body
//                                         ({error: {message, type, param, code}})
//   (request, ctx) => turn                computed from the request; ctx holds
//       api ('chat' | 'responses'), round, marker, userText (the marker
//       message's text), stream, codeTool (the code tool's name, or null),
//       tools (function tool names), toolOutputs ([{callId, name, output}]
//       after the marker message: outputs of function and custom tools'
//       calls, chat tool messages or Responses function_call_output and
//       custom_tool_call_output items), lastToolOutput, codeOutputs
//       (outputs of code tool calls), lastCodeOutput.
//   Chat answers take `finishReason` (the finish_reason to give instead of
//   the usual one: "stop" with tool calls, as some servers answer).
//   Any turn may also have `until` (a promise: the answer waits for it, so
//   that a test holds a request open until it lets it go), and
//   `usage: {prompt_tokens, completion_tokens}`; by
//   default round r reports prompt_tokens 100 + 10 r and completion_tokens
//   20 + r (see usageOf / expectedUsage), and `delayMs` (wait before answering)
//   or `chunkDelayMs` (between streamed events). A streamed turn with
//   `cutAfterEvents: n` writes its first n events and half of the next one,
//   then resets the connection: an upstream that breaks off.
//
//   The code tool is the function tool whose description starts with
//   "Execute Python code" and whose parameters have a string property
//   "code" (its name is whatever the gateway chose). A turn that calls it
//   when the request has no such tool, or calls a function the request does
//   not declare, is answered with a 400 error whose message starts with
//   "mock:" (so is a conversation no script matches, a round beyond the
//   script's end, and a request carrying previous_response_id).
//
// Streams ("stream": true) split text into deltas and function-call arguments
// into fragments of `chunkSize` characters (default 7), each written
// separately. Chat streams: chunks as OpenAI sends them, a usage chunk when
// stream_options.include_usage, then data: [DONE]. Responses streams:
// event:/data: pairs with sequence_number from 0 (created, in_progress,
// the items' added/delta/done events, completed with the full response).
//
// Each recorded request: {method, path, headers, body, api, stream, marker,
// round, status, reply}; reply is the JSON answered (non-streaming, errors)
// or {events, raw} for a stream (events: the chunk/event objects in order,
// raw: the bytes as written).

import crypto from 'node:crypto';
import http from 'node:http';

export const CODE_TOOL_DESCRIPTION_PREFIX = 'Execute Python code';

/** The usage a script's round reports unless the turn says otherwise. */
export function usageOf(round) {
  return { prompt_tokens: 100 + 10 * round, completion_tokens: 20 + round };
}

/**
 * The usage summed over `rounds` (a count: rounds 0..n-1, or an array of
 * round numbers), in both shapes: {prompt_tokens, completion_tokens,
 * total_tokens, input_tokens, output_tokens}.
 */
export function expectedUsage(rounds) {
  const list = Array.isArray(rounds) ? rounds : Array.from({ length: rounds }, (_, i) => i);
  let prompt = 0;
  let completion = 0;
  for (const r of list) {
    const u = usageOf(r);
    prompt += u.prompt_tokens;
    completion += u.completion_tokens;
  }
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    input_tokens: prompt,
    output_tokens: completion,
  };
}

// (unref: a scripted delay that outlives its test does not keep the test process alive)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());
const tick = () => new Promise((resolve) => setImmediate(resolve));

function splitChunks(text, size) {
  const out = [];
  const chars = Array.from(text); // never cut a character in two
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(''));
  return out;
}

/** The text of a chat or Responses message content (string or parts). */
export function contentText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (typeof part === 'string' ? part : typeof part?.text === 'string' ? part.text : ''))
    .join('');
}

function isCodeToolDef(def) {
  return (
    def &&
    typeof def.name === 'string' &&
    typeof def.description === 'string' &&
    def.description.startsWith(CODE_TOOL_DESCRIPTION_PREFIX) &&
    def.parameters?.properties?.code?.type === 'string'
  );
}

/** The function tools of a request, flat: [{name, description, parameters}]. */
function functionTools(api, body) {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools
    .filter((t) => t?.type === 'function')
    .map((t) => (api === 'chat' ? { ...(t.function ?? {}) } : t));
}

/** The names of a request's custom tools. */
function customTools(api, body) {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools.filter((t) => t?.type === 'custom').map((t) => (api === 'chat' ? t.custom?.name : t.name));
}

/** A request the mock refuses: answered 400 with the message (which starts with "mock:"). */
export class MockError extends Error {}

/**
 * The key under which a call is also known by what it is (the script's
 * marker, its name, its arguments): a caller that replays an issued call
 * under an id of its own (the gateway replays a Chat client's code calls
 * under their code_interpreter_call item ids) still replays that answer.
 */
function callKey(marker, name, args) {
  let canonical = args;
  try {
    canonical = JSON.stringify(JSON.parse(args));
  } catch {
    // not JSON: as it is
  }
  return `call:${marker}\n${name}\n${canonical}`;
}

/** Conversation analysis: the marker message, the round, the tool outputs. */
function analyse(api, body, scripts, issuedCalls) {
  // The conversation as a flat list of {kind, ...}.
  const entries = [];
  if (api === 'chat') {
    for (const m of Array.isArray(body.messages) ? body.messages : []) {
      if (m?.role === 'user') entries.push({ kind: 'user', text: contentText(m.content) });
      else if (m?.role === 'assistant') {
        const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
        entries.push({
          kind: 'assistant',
          calls: calls.map((c) => ({ id: c?.id, name: c?.function?.name ?? c?.custom?.name, args: c?.function?.arguments ?? c?.custom?.input })),
        });
      } else if (m?.role === 'tool') entries.push({ kind: 'output', callId: m.tool_call_id, output: contentText(m.content) });
      else entries.push({ kind: 'other' });
    }
  } else {
    const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : Array.isArray(body.input) ? body.input : [];
    for (const item of input) {
      const type = item?.type ?? 'message';
      if (type === 'message' && item.role === 'user') entries.push({ kind: 'user', text: contentText(item.content) });
      else if (type === 'function_call' || type === 'custom_tool_call') entries.push({ kind: 'call', id: item.call_id, name: item.name, args: item.arguments ?? item.input });
      else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
        const output = typeof item.output === 'string' ? item.output : contentText(item.output);
        entries.push({ kind: 'output', callId: item.call_id, output });
      } else entries.push({ kind: 'other', type });
    }
  }

  // The most recent user message carrying a marker.
  const markers = [...scripts.keys()].sort((a, b) => b.length - a.length);
  let at = -1;
  let marker = null;
  for (let i = entries.length - 1; i >= 0 && marker === null; i--) {
    if (entries[i].kind !== 'user') continue;
    const found = markers.find((m) => entries[i].text.includes(m));
    if (found !== undefined) {
      at = i;
      marker = found;
    }
  }
  if (marker === null) return { marker: null };
  const rest = entries.slice(at + 1);

  // Rounds: groups of calls (an assistant message's tool_calls, or a run of
  // consecutive function_call and custom_tool_call items); a group with calls this mock issued
  // counts for the answers that issued them.
  const groups = [];
  if (api === 'chat') {
    for (const e of rest) if (e.kind === 'assistant' && e.calls.length) groups.push(e.calls);
  } else {
    let current = null;
    for (const e of rest) {
      if (e.kind === 'call') {
        if (!current) groups.push((current = []));
        current.push(e);
      } else current = null;
    }
  }
  const keys = new Set();
  const callNames = new Map();
  groups.forEach((calls, g) => {
    for (const c of calls) callNames.set(c.id, c.name);
    const known = calls.map((c) => issuedCalls.get(c.id) ?? issuedCalls.get(callKey(marker, c.name, c.args))).filter((k) => k !== undefined);
    if (known.length) for (const k of known) keys.add(`answer:${k}`);
    else keys.add(`group:${g}`);
  });

  const toolOutputs = rest
    .filter((e) => e.kind === 'output')
    .map((e) => ({ callId: e.callId, name: callNames.get(e.callId) ?? null, output: e.output }));
  return { marker, userText: entries[at].text, round: keys.size, toolOutputs };
}

function errorBody(error = {}) {
  return {
    error: {
      message: error.message ?? 'mock error',
      type: error.type ?? 'invalid_request_error',
      param: error.param ?? null,
      code: error.code ?? null,
      ...error,
    },
  };
}

/**
 * Starts the mock on 127.0.0.1:<free port>.
 *
 * dialects: native wire formats it speaks beside OpenAI's, each an object
 *   name                      'anthropic', ... (the recorded requests' `api`)
 *   wholeCalls                optional: true when the API streams a tool call
 *                             whole (Gemini), not its arguments in pieces
 *   match(method, path)       whether a request is the dialect's
 *   stream(path, body, url)   whether it asks for a stream
 *   check(req)                the authentication failure of a request ({method,
 *                             path, url (a URL), headers, rawHeaders, rawBody}), as
 *                             {status, message}, or null when it is let in
 *   toChat(body, req)         the request validated (anything malformed throws a
 *                             MockError 'mock: ...') and converted to a chat
 *                             request: {model, messages, tools (chat's nested
 *                             function tools), tool_choice}, enough for the
 *                             scripts (user texts, assistant tool_calls with ids and
 *                             names, tool messages with tool_call_id)
 *   answer(a)                 the answer of a turn: a = {body, chat, turn: {text
 *                             (or null), calls: [{name, arguments (JSON text),
 *                             callId}]}, usage: {prompt_tokens, completion_tokens},
 *                             stream, chunkSize, nextId(prefix), splitChunks, raw (the
 *                             script's turn object as written, for a dialect's own
 *                             turn fields)}; returns
 *                             {json} or {events, frame(ev) -> string | Buffer,
 *                             contentType}
 *   error(status, error)      the dialect's error answer of an {message, type, code}:
 *                             {body, headers}
 *   serve(req)                optional: a request the dialect answers itself (an OAuth
 *                             token endpoint...), {method, path, url, headers, rawBody}
 *                             -> {status, body (JSON), headers} or null (the model's)
 */
export async function startUpstream({ chunkSize = 7, apiKey = null, dialects = [] } = {}) {
  const scripts = new Map();
  const requests = [];
  const issuedCalls = new Map(); // call id (and callKey) -> answer serial
  let serial = 0;
  const sockets = new Set();

  const nextId = (prefix) => `${prefix}${crypto.randomBytes(12).toString('hex')}`;

  function answerJson(res, entry, status, obj, headers = {}) {
    entry.status = status;
    entry.reply = obj;
    const body = JSON.stringify(obj);
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'x-request-id': nextId('req_'),
      ...headers,
    });
    res.end(body);
  }

  async function answerStream(res, entry, events, frame, chunkDelayMs, cutAfterEvents, contentType = 'text/event-stream; charset=utf-8') {
    entry.status = 200;
    entry.reply = { events, raw: '' };
    res.writeHead(200, {
      'content-type': contentType,
      'cache-control': 'no-cache',
      'x-request-id': nextId('req_'),
    });
    let gone = false;
    res.on('close', () => {
      gone = true;
    });
    for (const [i, ev] of events.entries()) {
      if (gone) break;
      if (i === cutAfterEvents) {
        const half = frame(ev).slice(0, Math.floor(frame(ev).length / 2));
        entry.reply.raw += typeof half === 'string' ? half : half.toString('latin1');
        res.write(half);
        await tick();
        res.socket.resetAndDestroy();
        return;
      }
      const bytes = frame(ev);
      entry.reply.raw += typeof bytes === 'string' ? bytes : bytes.toString('latin1');
      res.write(bytes);
      if (chunkDelayMs) await sleep(chunkDelayMs);
      else await tick();
    }
    if (!gone) res.end();
  }

  async function handle(req, res) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url, 'http://127.0.0.1');
    const path = url.pathname;
    const entry = {
      method: req.method,
      path,
      headers: req.headers,
      body: null,
      rawBody,
      api: null,
      stream: false,
      marker: null,
      round: null,
      status: null,
      reply: null,
      time: Date.now(),
    };
    requests.push(entry);

    const dialect = dialects.find((d) => d.match(req.method, path));
    if (dialect) return handleDialect(dialect, req, res, entry, url, rawBody);
    if (apiKey !== null && req.headers.authorization !== `Bearer ${apiKey}`) {
      return answerJson(res, entry, 401, errorBody({ message: 'mock: Incorrect API key provided.', code: 'invalid_api_key' }));
    }
    if (req.method === 'GET' && /^(\/v1)?\/models$/.test(path)) {
      return answerJson(res, entry, 200, { object: 'list', data: [{ id: 'mock-model', object: 'model', created: 0, owned_by: 'corral-tests' }] });
    }
    let api = null;
    if (req.method === 'POST' && /^(\/v1)?\/chat\/completions$/.test(path)) api = 'chat';
    else if (req.method === 'POST' && /^(\/v1)?\/responses$/.test(path)) api = 'responses';
    if (!api) {
      return answerJson(res, entry, 404, errorBody({ message: `mock: no route ${req.method} ${path}`, code: 'not_found' }));
    }
    entry.api = api;
    let body;
    try {
      body = JSON.parse(rawBody);
    } catch {
      return answerJson(res, entry, 400, errorBody({ message: 'mock: the body is not JSON' }));
    }
    entry.body = body;
    entry.stream = body?.stream === true;
    try {
      const turn = resolveTurn(api, body, entry);
      if (turn.until) await turn.until;
      if (turn.delayMs) await sleep(turn.delayMs);
      if (turn.status !== undefined) {
        return answerJson(res, entry, turn.status, errorBody(turn.error), turn.headers ?? {});
      }
      const answer = buildAnswer(api, body, entry, turn);
      if (!entry.stream) return answerJson(res, entry, 200, answer.json);
      return await answerStream(res, entry, answer.events, answer.frame, turn.chunkDelayMs ?? 0, turn.cutAfterEvents);
    } catch (err) {
      if (!(err instanceof MockError)) throw err;
      entry.mockError = err.message;
      return answerJson(res, entry, 400, errorBody({ message: err.message, code: 'mock_error' }));
    }
  }

  async function handleDialect(d, req, res, entry, url, rawBody) {
    entry.api = d.name;
    const answerError = (status, error) => {
      const { body, headers = {} } = d.error(status, error);
      return answerJson(res, entry, status, body, headers);
    };
    // a route of the dialect's own beside the model's (a token endpoint...), answered as it says
    const served = d.serve?.({ method: req.method, path: entry.path, url, headers: req.headers, rawBody });
    if (served) return answerJson(res, entry, served.status, served.body, served.headers ?? {});
    const denied = d.check({ method: req.method, path: entry.path, url, headers: req.headers, rawHeaders: req.rawHeaders, rawBody });
    if (denied) return answerError(denied.status ?? 401, { message: denied.message, type: 'authentication_error' });
    let body;
    try {
      body = JSON.parse(rawBody);
    } catch {
      return answerError(400, { message: 'mock: the body is not JSON', type: 'invalid_request_error' });
    }
    entry.body = body;
    try {
      entry.stream = d.stream(entry.path, body, url) === true;
      const chat = d.toChat(body, { method: req.method, path: entry.path, url, headers: req.headers });
      entry.chatBody = chat;
      const turn = resolveTurn('chat', chat, entry);
      if (turn.until) await turn.until;
      if (turn.delayMs) await sleep(turn.delayMs);
      if (turn.status !== undefined) return answerError(turn.status, { type: 'invalid_request_error', message: 'mock error', ...(turn.error ?? {}) });
      if (turn.calls.some((c) => c.custom)) throw new MockError('mock: custom tools have no native form');
      if (turn.items.length) throw new MockError('mock: output items need a Responses request');
      const answerSerial = ++serial;
      const calls = turn.calls.map((c) => {
        const callId = nextId('call_');
        issuedCalls.set(callId, answerSerial);
        issuedCalls.set(callKey(entry.marker, c.name, c.arguments), answerSerial);
        return { name: c.name, arguments: c.arguments, callId };
      });
      const a = d.answer({ body, chat, turn: { text: turn.text, citations: turn.citations, calls }, raw: turn.raw, usage: turn.usage, stream: entry.stream, chunkSize, nextId, splitChunks });
      if (!entry.stream) return answerJson(res, entry, 200, a.json);
      return await answerStream(res, entry, a.events, a.frame, turn.chunkDelayMs ?? 0, turn.cutAfterEvents, a.contentType);
    } catch (err) {
      if (!(err instanceof MockError)) throw err;
      entry.mockError = err.message;
      return answerError(400, { message: err.message, type: 'invalid_request_error', code: 'mock_error' });
    }
  }

  function resolveTurn(api, body, entry) {
    if (body.previous_response_id != null) {
      throw new MockError('mock: previous_response_id is not supported (send the whole conversation)');
    }
    const info = analyse(api, body, scripts, issuedCalls);
    if (info.marker === null) throw new MockError('mock: no script marker in any user message');
    entry.marker = info.marker;
    entry.round = info.round;
    const tools = functionTools(api, body);
    const codeDef = tools.find(isCodeToolDef);
    const codeTool = codeDef ? codeDef.name : null;
    const codeOutputs = info.toolOutputs.filter((o) => codeTool !== null && o.name === codeTool).map((o) => o.output);
    const ctx = {
      api,
      round: info.round,
      marker: info.marker,
      userText: info.userText,
      stream: entry.stream,
      codeTool,
      tools: tools.map((t) => t.name),
      toolOutputs: info.toolOutputs,
      lastToolOutput: info.toolOutputs.length ? info.toolOutputs[info.toolOutputs.length - 1].output : null,
      codeOutputs,
      lastCodeOutput: codeOutputs.length ? codeOutputs[codeOutputs.length - 1] : null,
    };
    entry.ctx = ctx;
    const turns = scripts.get(info.marker);
    let turn = turns[info.round];
    if (turn === undefined) {
      throw new MockError(`mock: script ${info.marker} has no turn ${info.round} (its turns: ${turns.length})`);
    }
    if (typeof turn === 'function') turn = turn(body, ctx);
    if (!turn || typeof turn !== 'object') throw new MockError(`mock: script ${info.marker} turn ${info.round} is not a turn`);
    if (turn.status !== undefined) return turn;

    const calls = [];
    if (turn.code !== undefined) calls.push({ code: turn.code });
    if (Array.isArray(turn.calls)) calls.push(...turn.calls);
    const resolved = calls.map((c) => {
      if (c.code !== undefined) {
        if (!codeTool) throw new MockError('mock: the turn calls the code tool but the request declares none');
        return { name: codeTool, arguments: JSON.stringify({ code: c.code }) };
      }
      if (c.fn) {
        if (!ctx.tools.includes(c.fn.name)) {
          throw new MockError(`mock: the turn calls ${c.fn.name} but the request declares only [${ctx.tools.join(', ')}]`);
        }
        const args = typeof c.fn.arguments === 'string' ? c.fn.arguments : JSON.stringify(c.fn.arguments ?? {});
        return { name: c.fn.name, arguments: args };
      }
      if (c.custom) {
        const declared = customTools(api, body);
        if (!declared.includes(c.custom.name)) {
          throw new MockError(`mock: the turn calls the custom tool ${c.custom.name} but the request declares only [${declared.join(', ')}]`);
        }
        return { name: c.custom.name, input: c.custom.input, custom: true };
      }
      throw new MockError('mock: a call is neither {code} nor {fn} nor {custom}');
    });
    if (turn.items && api !== 'responses') throw new MockError('mock: output items need a Responses request');
    const usage = { ...usageOf(info.round), ...(turn.usage ?? {}) };
    return { text: turn.text ?? null, citations: turn.citations ?? [], calls: resolved, items: turn.items ?? [], usage, chunkDelayMs: turn.chunkDelayMs, delayMs: turn.delayMs, until: turn.until, cutAfterEvents: turn.cutAfterEvents, raw: turn };
  }

  function buildAnswer(api, body, entry, turn) {
    const answerSerial = ++serial;
    const calls = turn.calls.map((c) => {
      const callId = nextId('call_');
      issuedCalls.set(callId, answerSerial);
      issuedCalls.set(callKey(entry.marker, c.name, c.custom ? c.input : c.arguments), answerSerial);
      return { ...c, callId };
    });
    const { prompt_tokens, completion_tokens } = turn.usage;
    const created = Math.floor(Date.now() / 1000);
    if (api === 'chat') return chatAnswer(body, turn, calls, { prompt_tokens, completion_tokens }, created);
    return responsesAnswer(body, turn, calls, { prompt_tokens, completion_tokens }, created);
  }

  function chatCitations(turn) {
    return turn.citations.map((c) => ({ type: 'url_citation', url_citation: { ...c } }));
  }

  function chatAnswer(body, turn, calls, u, created) {
    const id = nextId('chatcmpl-');
    const usage = {
      prompt_tokens: u.prompt_tokens,
      completion_tokens: u.completion_tokens,
      total_tokens: u.prompt_tokens + u.completion_tokens,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
    };
    const finish = turn.finishReason ?? (calls.length ? 'tool_calls' : 'stop');
    const toolCalls = calls.map((c) => (c.custom
      ? { id: c.callId, type: 'custom', custom: { name: c.name, input: c.input } }
      : { id: c.callId, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    if (!body.stream) {
      const message = { role: 'assistant', content: turn.text, refusal: null, annotations: chatCitations(turn) };
      if (toolCalls.length) message.tool_calls = toolCalls;
      return {
        json: {
          id,
          object: 'chat.completion',
          created,
          model: body.model,
          choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
          usage,
          service_tier: 'default',
          system_fingerprint: 'fp_corralmock',
        },
      };
    }
    const includeUsage = body.stream_options?.include_usage === true;
    const chunk = (delta, finishReason = null) => {
      const c = {
        id,
        object: 'chat.completion.chunk',
        created,
        model: body.model,
        service_tier: 'default',
        system_fingerprint: 'fp_corralmock',
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      };
      if (includeUsage) c.usage = null;
      return c;
    };
    const events = [];
    const pieces = turn.text !== null ? splitChunks(turn.text, chunkSize) : [];
    if (turn.text !== null || !calls.length) {
      events.push(chunk({ role: 'assistant', content: '', refusal: null }));
      for (const p of pieces) events.push(chunk({ content: p }));
      if (turn.citations.length) events.push(chunk({ annotations: chatCitations(turn) }));
    }
    calls.forEach((c, i) => {
      const start = c.custom
        ? { index: i, id: c.callId, type: 'custom', custom: { name: c.name, input: '' } }
        : { index: i, id: c.callId, type: 'function', function: { name: c.name, arguments: '' } };
      if (events.length === 0) events.push(chunk({ role: 'assistant', content: null, tool_calls: [start], refusal: null }));
      else events.push(chunk({ tool_calls: [start] }));
      for (const frag of splitChunks(c.custom ? c.input : c.arguments, chunkSize)) {
        events.push(chunk({ tool_calls: [{ index: i, ...(c.custom ? { custom: { input: frag } } : { function: { arguments: frag } }) }] }));
      }
    });
    events.push(chunk({}, finish));
    if (includeUsage) {
      events.push({
        id,
        object: 'chat.completion.chunk',
        created,
        model: body.model,
        service_tier: 'default',
        system_fingerprint: 'fp_corralmock',
        choices: [],
        usage,
      });
    }
    events.push('[DONE]');
    return { events, frame: (ev) => `data: ${typeof ev === 'string' ? ev : JSON.stringify(ev)}\n\n` };
  }

  function responsesAnswer(body, turn, calls, u, created) {
    const id = nextId('resp_');
    const usage = {
      input_tokens: u.prompt_tokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: u.completion_tokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: u.prompt_tokens + u.completion_tokens,
    };
    const items = [];
    const raw = new Map(); // a raw item -> {added, events} as given for it
    for (const { item, added, events: given } of turn.items) {
      items.push(item);
      raw.set(item, { added: added ?? (item.status ? { ...item, status: 'in_progress' } : item), events: given ?? [] });
    }
    if (turn.text !== null) {
      items.push({
        id: nextId('msg_'),
        type: 'message',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: turn.text, annotations: turn.citations.map((c) => ({ type: 'url_citation', ...c })), logprobs: [] }],
      });
    }
    for (const c of calls) {
      if (c.custom) items.push({ id: nextId('ctc_'), type: 'custom_tool_call', status: 'completed', call_id: c.callId, name: c.name, input: c.input });
      else items.push({ id: nextId('fc_'), type: 'function_call', status: 'completed', arguments: c.arguments, call_id: c.callId, name: c.name });
    }
    const response = (status, output, usageValue) => ({
      id,
      object: 'response',
      created_at: created,
      status,
      background: false,
      completed_at: status === 'completed' ? Math.floor(Date.now() / 1000) : null,
      error: null,
      incomplete_details: null,
      instructions: body.instructions ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      max_tool_calls: body.max_tool_calls ?? null,
      model: body.model,
      output,
      parallel_tool_calls: body.parallel_tool_calls ?? true,
      previous_response_id: null,
      prompt_cache_key: body.prompt_cache_key ?? null,
      reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
      safety_identifier: body.safety_identifier ?? null,
      service_tier: status === 'completed' ? 'default' : 'auto',
      store: body.store ?? true,
      temperature: body.temperature ?? 1,
      text: body.text ?? { format: { type: 'text' }, verbosity: 'medium' },
      tool_choice: body.tool_choice ?? 'auto',
      tools: body.tools ?? [],
      top_logprobs: body.top_logprobs ?? 0,
      top_p: body.top_p ?? 1,
      truncation: body.truncation ?? 'disabled',
      usage: usageValue,
      user: body.user ?? null,
      metadata: body.metadata ?? {},
    });
    if (!body.stream) return { json: response('completed', items, usage) };

    const events = [];
    const push = (ev) => events.push({ type: ev.type, sequence_number: events.length, ...ev });
    push({ type: 'response.created', response: response('in_progress', [], null) });
    push({ type: 'response.in_progress', response: response('in_progress', [], null) });
    items.forEach((item, o) => {
      if (raw.has(item)) {
        push({ type: 'response.output_item.added', output_index: o, item: raw.get(item).added });
        for (const ev of raw.get(item).events) push({ ...ev, output_index: o, ...(item.id ? { item_id: item.id } : {}) });
        push({ type: 'response.output_item.done', output_index: o, item });
      } else if (item.type === 'custom_tool_call') {
        push({ type: 'response.output_item.added', output_index: o, item: { ...item, status: 'in_progress', input: '' } });
        for (const d of splitChunks(item.input, chunkSize)) {
          push({ type: 'response.custom_tool_call_input.delta', item_id: item.id, output_index: o, delta: d });
        }
        push({ type: 'response.custom_tool_call_input.done', item_id: item.id, output_index: o, input: item.input });
        push({ type: 'response.output_item.done', output_index: o, item });
      } else if (item.type === 'message') {
        const text = item.content[0].text;
        push({ type: 'response.output_item.added', output_index: o, item: { ...item, status: 'in_progress', content: [] } });
        const emptyPart = { type: 'output_text', annotations: [], logprobs: [], text: '' };
        push({ type: 'response.content_part.added', item_id: item.id, output_index: o, content_index: 0, part: emptyPart });
        for (const d of splitChunks(text, chunkSize)) {
          push({ type: 'response.output_text.delta', item_id: item.id, output_index: o, content_index: 0, delta: d, logprobs: [] });
        }
        item.content[0].annotations.forEach((annotation, k) => {
          push({ type: 'response.output_text.annotation.added', item_id: item.id, output_index: o, content_index: 0, annotation_index: k, annotation });
        });
        push({ type: 'response.output_text.done', item_id: item.id, output_index: o, content_index: 0, text, logprobs: [] });
        push({ type: 'response.content_part.done', item_id: item.id, output_index: o, content_index: 0, part: { ...emptyPart, text, annotations: item.content[0].annotations } });
        push({ type: 'response.output_item.done', output_index: o, item });
      } else {
        push({ type: 'response.output_item.added', output_index: o, item: { ...item, status: 'in_progress', arguments: '' } });
        for (const d of splitChunks(item.arguments, chunkSize)) {
          push({ type: 'response.function_call_arguments.delta', item_id: item.id, output_index: o, delta: d });
        }
        push({ type: 'response.function_call_arguments.done', item_id: item.id, output_index: o, arguments: item.arguments, name: item.name });
        push({ type: 'response.output_item.done', output_index: o, item });
      }
    });
    push({ type: 'response.completed', response: response('completed', items, usage) });
    return { events, frame: (ev) => `event: ${ev.type}\ndata: ${JSON.stringify(ev)}\n\n` };
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      process.stderr.write(`upstream mock: ${err.stack}\n`);
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify(errorBody({ message: `mock crashed: ${err.message}`, type: 'server_error' })));
      } else res.destroy();
    });
  });
  server.keepAliveTimeout = 30_000;
  // The mock never keeps the test process alive by itself (a test file whose
  // after() hook failed before close() must still exit).
  server.unref();
  server.on('connection', (s) => {
    s.unref();
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();

  return {
    port,
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    /** Registers (or replaces) the script of `marker`: an array of turns. */
    script(marker, turns) {
      if (typeof marker !== 'string' || !marker) throw new Error('script: the marker must be a non-empty string');
      if (!Array.isArray(turns) || !turns.length) throw new Error('script: turns must be a non-empty array');
      scripts.set(marker, turns);
      return marker;
    },
    /** The requests answered with the script of `marker`, in arrival order. */
    requestsFor(marker) {
      return requests.filter((r) => r.marker === marker);
    },
    /** Connections currently open to the mock. */
    openConnections() {
      return sockets.size;
    },
    close() {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
        for (const s of sockets) s.destroy();
      });
    },
  };
}
