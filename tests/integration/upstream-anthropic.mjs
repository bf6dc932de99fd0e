// Anthropic's Messages API (POST /v1/messages) as a dialect of the scripted
// upstream (upstream.mjs): requests are validated as the real API validates
// them (headers, fields, types, role alternation, tool_use/tool_result
// pairing, thinking blocks replayed verbatim) and converted to a chat body
// for the scripts; answers are Messages JSON or its SSE event sequence
// (message_start, content_block_start/delta/stop, message_delta,
// message_stop, with a ping).
//
//   import { anthropicDialect } from './upstream-anthropic.mjs'
//   startUpstream({ dialects: [anthropicDialect({ apiKey: 'sk-ant-test' })] })
//
// Turn fields of its own (besides text, code, calls, usage...):
//   thinking: {thinking, signature}   a thinking block before the rest; the
//                                     next requests must carry it back,
//                                     verbatim, before the turn's tool_use blocks
//   redactedThinking: 'data'          a redacted_thinking block likewise
//   streamError: {type, message}      a stream sends an `event: error` after its
//                                     first text delta, and ends
//   stopReason: 'max_tokens' ...      the answer's stop_reason
//   cachedTokens: n                   n of the prompt's tokens reported as
//                                     cache_read_input_tokens
import { MockError } from './upstream.mjs';

export const ANTHROPIC_VERSION = '2023-06-01';
const IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];
const TOP_FIELDS = new Set([
  'model', 'messages', 'max_tokens', 'system', 'metadata', 'stop_sequences', 'stream', 'temperature', 'top_p', 'top_k',
  'tools', 'tool_choice', 'thinking', 'service_tier', 'container', 'mcp_servers', 'context_management',
]);

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const fail = (message) => {
  throw new MockError(`mock: ${message}`);
};

/** Extra members of obj beyond `allowed` are refused, as the API does. */
function onlyFields(obj, allowed, where) {
  for (const k of Object.keys(obj)) if (!allowed.includes(k)) fail(`${where}.${k}: Extra inputs are not permitted`);
}

function checkString(v, where, { nonEmpty = false } = {}) {
  if (typeof v !== 'string') fail(`${where}: Input should be a valid string`);
  if (nonEmpty && !v.length) fail(`${where}: String should have at least 1 character`);
}

function checkCacheControl(block, where) {
  if (block.cache_control === undefined) return;
  if (!isObject(block.cache_control) || block.cache_control.type !== 'ephemeral') fail(`${where}.cache_control: invalid`);
}

function checkTextBlock(b, where) {
  onlyFields(b, ['type', 'text', 'cache_control', 'citations'], where);
  checkString(b.text, `${where}.text`);
  if (!b.text.length) fail(`${where}: text content blocks must be non-empty`);
  if (b.citations !== undefined && b.citations !== null && !Array.isArray(b.citations)) fail(`${where}.citations: Input should be a valid list`);
  checkCacheControl(b, where);
}

function checkImageBlock(b, where) {
  onlyFields(b, ['type', 'source', 'cache_control'], where);
  const s = b.source;
  if (!isObject(s)) fail(`${where}.source: Field required`);
  if (s.type === 'base64') {
    onlyFields(s, ['type', 'media_type', 'data'], `${where}.source`);
    if (!IMAGE_TYPES.includes(s.media_type)) fail(`${where}.source.media_type: Input should be ${IMAGE_TYPES.map((t) => `'${t}'`).join(', ')}`);
    checkString(s.data, `${where}.source.data`, { nonEmpty: true });
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(s.data)) fail(`${where}.source.data: invalid base64 data`);
  } else if (s.type === 'url') {
    onlyFields(s, ['type', 'url'], `${where}.source`);
    if (typeof s.url !== 'string' || !/^https?:\/\//.test(s.url)) fail(`${where}.source.url: invalid URL`);
  } else fail(`${where}.source.type: Input tag '${s.type}' found using 'type' does not match any of the expected tags: 'base64', 'url'`);
  checkCacheControl(b, where);
}

function checkToolResult(b, where) {
  onlyFields(b, ['type', 'tool_use_id', 'content', 'is_error', 'cache_control'], where);
  checkString(b.tool_use_id, `${where}.tool_use_id`, { nonEmpty: true });
  if (b.is_error !== undefined && typeof b.is_error !== 'boolean') fail(`${where}.is_error: Input should be a valid boolean`);
  if (b.content === undefined || typeof b.content === 'string') return;
  if (!Array.isArray(b.content)) fail(`${where}.content: Input should be a valid string or list`);
  b.content.forEach((c, i) => {
    if (c?.type === 'text') checkTextBlock(c, `${where}.content.${i}`);
    else if (c?.type === 'image') checkImageBlock(c, `${where}.content.${i}`);
    else fail(`${where}.content.${i}.type: expected 'text' or 'image'`);
  });
}

function checkAssistantBlock(b, where) {
  if (b.type === 'text') return checkTextBlock(b, where);
  if (b.type === 'tool_use') {
    onlyFields(b, ['type', 'id', 'name', 'input', 'cache_control'], where);
    checkString(b.id, `${where}.id`, { nonEmpty: true });
    checkString(b.name, `${where}.name`, { nonEmpty: true });
    if (!isObject(b.input)) fail(`${where}.input: Input should be a valid dictionary`);
    return;
  }
  if (b.type === 'thinking') {
    onlyFields(b, ['type', 'thinking', 'signature'], where);
    checkString(b.thinking, `${where}.thinking`);
    checkString(b.signature, `${where}.signature`, { nonEmpty: true });
    return;
  }
  if (b.type === 'redacted_thinking') {
    onlyFields(b, ['type', 'data'], where);
    checkString(b.data, `${where}.data`, { nonEmpty: true });
    return;
  }
  fail(`${where}.type: '${b.type}' is not a block an assistant message may hold here`);
}

function checkUserBlock(b, where) {
  if (b.type === 'text') return checkTextBlock(b, where);
  if (b.type === 'image') return checkImageBlock(b, where);
  if (b.type === 'tool_result') return checkToolResult(b, where);
  fail(`${where}.type: '${b.type}' is not a block a user message may hold here`);
}

/** A message's content as a list of blocks (a string is one text block). */
function blocksOf(m, where) {
  if (typeof m.content === 'string') {
    if (!m.content.length) fail(`${where}: all messages must have non-empty content except for the optional final assistant message`);
    return [{ type: 'text', text: m.content }];
  }
  if (!Array.isArray(m.content)) fail(`${where}.content: Input should be a valid string or list`);
  if (!m.content.length) fail(`${where}: all messages must have non-empty content except for the optional final assistant message`);
  m.content.forEach((b, i) => {
    if (!isObject(b) || typeof b.type !== 'string') fail(`${where}.content.${i}: Input should be an object with a type`);
    (m.role === 'user' ? checkUserBlock : checkAssistantBlock)(b, `${where}.content.${i}`);
  });
  return m.content;
}

function checkMessages(messages) {
  if (!Array.isArray(messages)) fail('messages: Field required (a list)');
  if (!messages.length) fail('messages: at least one message is required');
  const out = messages.map((m, i) => {
    const where = `messages.${i}`;
    if (!isObject(m)) fail(`${where}: Input should be a valid dictionary`);
    onlyFields(m, ['role', 'content'], where);
    if (m.role !== 'user' && m.role !== 'assistant') fail(`${where}.role: Input should be 'user' or 'assistant'`);
    if (i === 0 && m.role !== 'user') fail('messages: first message must use the "user" role');
    if (i > 0 && messages[i - 1].role === m.role) fail('messages: roles must alternate between "user" and "assistant", but found multiple "' + m.role + '" roles in a row');
    return { role: m.role, blocks: blocksOf(m, where) };
  });
  // tool_use ids answered in the next message, tool_result blocks first and answering the previous one
  out.forEach((m, i) => {
    if (m.role === 'assistant') {
      const ids = m.blocks.filter((b) => b.type === 'tool_use').map((b) => b.id);
      const next = out[i + 1];
      if (!next) return;
      const answered = new Set(next.blocks.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id));
      const missing = ids.filter((id) => !answered.has(id));
      if (missing.length) {
        fail(`messages.${i + 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`);
      }
    } else {
      const prevIds = new Set((out[i - 1]?.blocks ?? []).filter((b) => b.type === 'tool_use').map((b) => b.id));
      let seenOther = false;
      m.blocks.forEach((b, k) => {
        if (b.type !== 'tool_result') {
          seenOther = true;
          return;
        }
        if (seenOther) fail(`messages.${i}.content.${k}: tool_result blocks must come first in a user message, before any other content`);
        if (!prevIds.has(b.tool_use_id)) {
          fail(`messages.${i}.content.${k}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${b.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`);
        }
      });
    }
  });
  const seen = new Set();
  for (const m of out) for (const b of m.blocks) if (b.type === 'tool_use') {
    if (seen.has(b.id)) fail(`messages: \`tool_use\` ids must be unique: ${b.id}`);
    seen.add(b.id);
  }
  return out;
}

function checkTools(tools) {
  if (tools === undefined) return [];
  if (!Array.isArray(tools)) fail('tools: Input should be a valid list');
  const names = new Set();
  tools.forEach((t, i) => {
    const where = `tools.${i}`;
    if (!isObject(t)) fail(`${where}: Input should be a valid dictionary`);
    onlyFields(t, ['type', 'name', 'description', 'input_schema', 'cache_control'], where);
    if (t.type !== undefined && t.type !== 'custom') fail(`${where}.type: unknown tool type '${t.type}'`);
    if (typeof t.name !== 'string' || !/^[a-zA-Z0-9_-]{1,128}$/.test(t.name)) fail(`${where}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`);
    if (names.has(t.name)) fail(`tools: Tool names must be unique (${t.name})`);
    names.add(t.name);
    if (t.description !== undefined) checkString(t.description, `${where}.description`);
    if (!isObject(t.input_schema)) fail(`${where}.input_schema: Field required`);
    if (t.input_schema.type !== 'object') fail(`${where}.input_schema.type: Input should be 'object'`);
    checkCacheControl(t, where);
  });
  return tools;
}

function checkToolChoice(choice, tools) {
  if (choice === undefined) return;
  if (!isObject(choice)) fail('tool_choice: Input should be a valid dictionary');
  if (!tools.length) fail('tool_choice: tool_choice may only be specified while providing tools');
  const where = 'tool_choice';
  if (choice.type === 'none') return onlyFields(choice, ['type'], where);
  if (choice.type === 'auto' || choice.type === 'any') onlyFields(choice, ['type', 'disable_parallel_tool_use'], where);
  else if (choice.type === 'tool') {
    onlyFields(choice, ['type', 'name', 'disable_parallel_tool_use'], where);
    if (!tools.some((t) => t.name === choice.name)) fail(`tool_choice.name: no tool named '${choice.name}'`);
  } else fail(`tool_choice.type: Input tag '${choice.type}' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'`);
  if (choice.disable_parallel_tool_use !== undefined && typeof choice.disable_parallel_tool_use !== 'boolean') {
    fail('tool_choice.disable_parallel_tool_use: Input should be a valid boolean');
  }
}

function checkTop(body) {
  if (!isObject(body)) fail('the body must be a JSON object');
  for (const k of Object.keys(body)) if (!TOP_FIELDS.has(k)) fail(`${k}: Extra inputs are not permitted`);
  checkString(body.model, 'model', { nonEmpty: true });
  if (!Number.isInteger(body.max_tokens)) fail('max_tokens: Field required');
  if (body.max_tokens < 1) fail('max_tokens: Input should be greater than or equal to 1');
  if (body.stream !== undefined && typeof body.stream !== 'boolean') fail('stream: Input should be a valid boolean');
  for (const k of ['temperature', 'top_p']) {
    if (body[k] !== undefined && (typeof body[k] !== 'number' || body[k] < 0 || body[k] > 1)) fail(`${k}: Input should be a number from 0 to 1`);
  }
  if (body.stop_sequences !== undefined && (!Array.isArray(body.stop_sequences) || body.stop_sequences.some((s) => typeof s !== 'string'))) {
    fail('stop_sequences: Input should be a valid list of strings');
  }
  if (body.metadata !== undefined) {
    if (!isObject(body.metadata)) fail('metadata: Input should be a valid dictionary');
    onlyFields(body.metadata, ['user_id'], 'metadata');
  }
  if (body.system !== undefined && typeof body.system !== 'string') {
    if (!Array.isArray(body.system)) fail('system: Input should be a valid string or list');
    body.system.forEach((b, i) => {
      if (b?.type !== 'text') fail(`system.${i}.type: Input should be 'text'`);
      checkTextBlock(b, `system.${i}`);
    });
  }
  if (body.thinking !== undefined) {
    const t = body.thinking;
    if (!isObject(t) || !['enabled', 'disabled'].includes(t.type)) fail('thinking.type: Input should be \'enabled\' or \'disabled\'');
    if (t.type === 'enabled') {
      onlyFields(t, ['type', 'budget_tokens'], 'thinking');
      if (!Number.isInteger(t.budget_tokens) || t.budget_tokens < 1024) fail('thinking.budget_tokens: Input should be greater than or equal to 1024');
      if (t.budget_tokens >= body.max_tokens) fail('`max_tokens` must be greater than `thinking.budget_tokens`');
      // what the API refuses beside thinking
      if (body.temperature !== undefined && body.temperature !== 1) fail('`temperature` may only be set to 1 when thinking is enabled');
      if (body.top_p !== undefined && body.top_p < 0.95) fail('`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled');
      if (['any', 'tool'].includes(body.tool_choice?.type)) fail('Thinking may not be enabled when tool_choice forces tool use.');
    }
  }
}

/** The text of a system prompt (a string or text blocks). */
const systemText = (system) => (typeof system === 'string' ? system : system.map((b) => b.text).join('\n'));
const blockText = (blocks) => blocks.filter((b) => b.type === 'text').map((b) => b.text).join('');

/** The data: URL of an image block (a URL one as it is). */
const imageUrl = (source) => (source.type === 'base64' ? `data:${source.media_type};base64,${source.data}` : source.url);

function chatMessages(body, msgs) {
  const out = [];
  if (body.system !== undefined) out.push({ role: 'system', content: systemText(body.system) });
  for (const m of msgs) {
    if (m.role === 'assistant') {
      const calls = m.blocks.filter((b) => b.type === 'tool_use');
      const msg = { role: 'assistant', content: blockText(m.blocks) || null };
      const thinking = m.blocks.filter((b) => b.type === 'thinking' || b.type === 'redacted_thinking');
      if (thinking.length) msg.thinking = thinking;
      if (calls.length) msg.tool_calls = calls.map((b) => ({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } }));
      out.push(msg);
      continue;
    }
    for (const b of m.blocks) {
      if (b.type !== 'tool_result') continue;
      const content = typeof b.content === 'string' ? b.content : blockText(b.content ?? []);
      out.push({ role: 'tool', tool_call_id: b.tool_use_id, content });
    }
    const parts = [];
    for (const b of m.blocks) {
      if (b.type === 'text') parts.push({ type: 'text', text: b.text });
      else if (b.type === 'image') parts.push({ type: 'image_url', image_url: { url: imageUrl(b.source) } });
    }
    if (parts.length) out.push({ role: 'user', content: parts });
  }
  return out;
}

const chatTools = (tools) =>
  tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description ?? '', parameters: t.input_schema } }));

function chatToolChoice(choice) {
  if (choice === undefined) return undefined;
  if (choice.type === 'any') return 'required';
  if (choice.type === 'tool') return { type: 'function', function: { name: choice.name } };
  return choice.type;
}

/** The Anthropic error type of an error a script gives (OpenAI's types mapped). */
function errorType(status, type) {
  const known = ['invalid_request_error', 'authentication_error', 'billing_error', 'permission_error', 'not_found_error', 'request_too_large', 'rate_limit_error', 'api_error', 'overloaded_error', 'timeout_error'];
  if (known.includes(type)) return type;
  return { 400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error', 404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error', 529: 'overloaded_error' }[status] ?? 'api_error';
}

/**
 * The dialect. apiKey: the x-api-key every request must carry. requests
 * the dialect saw are in `seen` too ({headers, body, chat}).
 */
export function anthropicDialect({ apiKey = 'sk-ant-test' } = {}) {
  const replays = new Map(); // tool_use id -> the thinking blocks that must come back before it

  function checkReplays(msgs) {
    msgs.forEach((m, i) => {
      if (m.role !== 'assistant') return;
      for (const b of m.blocks) {
        const expected = b.type === 'tool_use' ? replays.get(b.id) : undefined;
        if (!expected) continue;
        const head = m.blocks.slice(0, expected.length);
        if (JSON.stringify(head) !== JSON.stringify(expected)) {
          fail(`messages.${i}: the thinking blocks of the answer that called ${b.id} must come back verbatim, first: expected ${JSON.stringify(expected)}, got ${JSON.stringify(head)}`);
        }
      }
    });
  }

  function contentOf(a) {
    const raw = a.raw ?? {};
    const blocks = [];
    if (raw.thinking) blocks.push({ type: 'thinking', thinking: raw.thinking.thinking, signature: raw.thinking.signature });
    if (raw.redactedThinking) blocks.push({ type: 'redacted_thinking', data: raw.redactedThinking });
    const thinking = blocks.slice();
    if (a.turn.text !== null) blocks.push({ type: 'text', text: a.turn.text, citations: null });
    for (const c of a.turn.calls) {
      blocks.push({ type: 'tool_use', id: c.callId, name: c.name, input: JSON.parse(c.arguments) });
      if (thinking.length) replays.set(c.callId, thinking);
    }
    return blocks;
  }

  function usageOf(a) {
    const cached = a.raw?.cachedTokens ?? 0;
    return {
      input_tokens: a.usage.prompt_tokens - cached,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: cached,
      output_tokens: a.usage.completion_tokens,
      service_tier: 'standard',
    };
  }

  function streamEvents(a, message) {
    const events = [];
    const usage = message.usage;
    events.push({ type: 'message_start', message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } });
    const streamError = a.raw?.streamError;
    let errorSent = false;
    message.content.forEach((b, index) => {
      if (errorSent) return;
      if (b.type === 'text') {
        events.push({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
        if (index === 0) events.push({ type: 'ping' });
        for (const d of a.splitChunks(b.text, a.chunkSize)) {
          events.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: d } });
          if (streamError && !errorSent) {
            events.push({ type: 'error', error: { type: streamError.type ?? 'overloaded_error', message: streamError.message ?? 'Overloaded' } });
            errorSent = true;
            return;
          }
        }
      } else if (b.type === 'thinking') {
        events.push({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } });
        for (const d of a.splitChunks(b.thinking, a.chunkSize)) events.push({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: d } });
        events.push({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: b.signature } });
      } else if (b.type === 'redacted_thinking') {
        events.push({ type: 'content_block_start', index, content_block: b });
      } else {
        events.push({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } });
        events.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: '' } });
        for (const d of a.splitChunks(JSON.stringify(b.input), a.chunkSize)) {
          events.push({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: d } });
        }
      }
      events.push({ type: 'content_block_stop', index });
    });
    if (streamError && !errorSent) {
      events.push({ type: 'error', error: { type: streamError.type ?? 'overloaded_error', message: streamError.message ?? 'Overloaded' } });
      errorSent = true;
    }
    if (errorSent) return events;
    events.push({ type: 'message_delta', delta: { stop_reason: message.stop_reason, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } });
    events.push({ type: 'message_stop' });
    return events;
  }

  const dialect = {
    name: 'anthropic',
    apiKey, // the key expected; a test may change it
    seen: [],
    match: (method, path) => method === 'POST' && path === '/v1/messages',
    stream: (path, body) => body?.stream === true,
    check(req) {
      const key = req.headers['x-api-key'];
      if (req.headers.authorization !== undefined) return { status: 401, message: 'mock: an Authorization header is not how this API authenticates (x-api-key)' };
      if (key === undefined) return { status: 401, message: 'x-api-key header is required' };
      if (key !== dialect.apiKey) return { status: 401, message: 'invalid x-api-key' };
      return null;
    },
    toChat(body, req) {
      if (req.headers['anthropic-version'] !== ANTHROPIC_VERSION) fail(`anthropic-version: header is required (${ANTHROPIC_VERSION}), got ${req.headers['anthropic-version']}`);
      if (!/^application\/json/.test(req.headers['content-type'] ?? '')) fail(`content-type: expected application/json, got ${req.headers['content-type']}`);
      checkTop(body);
      const msgs = checkMessages(body.messages);
      const tools = checkTools(body.tools);
      checkToolChoice(body.tool_choice, tools);
      checkReplays(msgs);
      if (body.thinking?.type === 'enabled') {
        const last = msgs.findLast((m) => m.role === 'assistant');
        if (last && last.blocks.some((b) => b.type === 'tool_use') && !['thinking', 'redacted_thinking'].includes(last.blocks[0].type)) {
          fail('messages: when `thinking` is enabled, a final `assistant` message must start with a thinking block');
        }
      }
      const chat = { model: body.model, messages: chatMessages(body, msgs), tools: chatTools(tools) };
      const choice = chatToolChoice(body.tool_choice);
      if (choice !== undefined) chat.tool_choice = choice;
      dialect.seen.push({ headers: req.headers, body, chat });
      return chat;
    },
    answer(a) {
      const content = contentOf(a);
      const stopReason = a.raw?.stopReason ?? (a.turn.calls.length ? 'tool_use' : 'end_turn');
      const message = {
        id: a.nextId('msg_'),
        type: 'message',
        role: 'assistant',
        model: a.body.model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage: usageOf(a),
      };
      if (!a.stream) return { json: message };
      return { events: streamEvents(a, message), frame: (ev) => `event: ${ev.type}\ndata: ${JSON.stringify(ev)}\n\n` };
    },
    error(status, error) {
      return {
        body: { type: 'error', error: { type: errorType(status, error.type), message: error.message ?? 'mock error' } },
        headers: { 'request-id': `req_${Math.random().toString(16).slice(2)}` },
      };
    },
  };
  return dialect;
}
