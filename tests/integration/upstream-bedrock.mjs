// Amazon Bedrock's Converse API as a dialect of the scripted upstream
// (upstream.mjs): POST /model/{modelId}/converse and
// /model/{modelId}/converse-stream, every request's SigV4 signature
// recomputed with node:crypto as AWS does (a bad one is answered 403), the
// body validated as Bedrock validates it, and answers in Converse's shape:
// JSON, or ConverseStream's AWS event stream (binary messages with CRC32s).
//
//   import { bedrockDialect } from './upstream-bedrock.mjs'
//   const dialect = bedrockDialect({ accessKeyId, secretAccessKey, sessionToken, region })
//
// A turn whose text is "BEDROCK-EXCEPTION <type>: <message>" streams a
// first text delta and then an exception message of that type (a
// non-streamed request is refused with the message, a 400).
import crypto from 'node:crypto';
import zlib from 'node:zlib';

import { MockError } from './upstream.mjs';

const ROUTE = /^\/model\/([^/]+)\/(converse|converse-stream)$/;
const SIGNATURE_MISMATCH =
  'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.';
const EXCEPTIONS = { 400: 'ValidationException', 403: 'AccessDeniedException', 404: 'ResourceNotFoundException', 429: 'ThrottlingException', 500: 'InternalServerException', 503: 'ServiceUnavailableException' };
const PADDING = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
const FORMATS = { png: 'image/png', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp' };
const MAGIC = { png: [0x89, 0x50, 0x4e, 0x47], jpeg: [0xff, 0xd8, 0xff], gif: [0x47, 0x49, 0x46], webp: [0x52, 0x49, 0x46, 0x46] };

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');
const hmac = (key, data) => crypto.createHmac('sha256', key).update(data).digest();

/** RFC 3986 encoding, as SigV4 wants it (every byte but A-Z a-z 0-9 - _ . ~). */
function uriEncode(s) {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The canonical request of a request as AWS builds it for every service but S3. */
function canonicalRequest(req, signedHeaders, payloadHash) {
  const uri = req.path.split('/').map(uriEncode).join('/') || '/'; // segments encoded again
  const query = [...req.url.searchParams.entries()]
    .map(([k, v]) => [uriEncode(k), uriEncode(v)])
    .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const headers = signedHeaders.map((h) => `${h}:${String(req.headers[h] ?? '').trim().replace(/ +/g, ' ')}\n`).join('');
  return [req.method, uri, query, headers, signedHeaders.join(';'), payloadHash].join('\n');
}

function signatureOf(secret, date, region, service, toSign) {
  let key = hmac(`AWS4${secret}`, date);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, 'aws4_request');
  return hmac(key, toSign).toString('hex');
}

/** The failure of a request's SigV4 authentication ({status, message}), or null. */
function checkSignature(req, { accessKeyId, secretAccessKey, sessionToken, region }) {
  const h = req.headers;
  const hosts = (req.rawHeaders ?? []).filter((v, i) => i % 2 === 0 && v.toLowerCase() === 'host');
  if (hosts.length !== 1) return { status: 400, message: `mock: ${hosts.length} Host headers` };
  const auth = h.authorization;
  if (!auth) return { status: 403, message: 'Missing Authentication Token' };
  const m = /^AWS4-HMAC-SHA256 Credential=([^/,]+)\/(\d{8})\/([^/,]+)\/([^/,]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return { status: 403, message: `Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters (got: ${auth})` };
  const [, keyId, date, reqRegion, service, signedList, signature] = m;
  if (keyId !== accessKeyId) return { status: 403, message: 'The security token included in the request is invalid.' };
  if (service !== 'bedrock') return { status: 403, message: `Credential should be scoped to correct service: 'bedrock'.` };
  if (reqRegion !== region) return { status: 403, message: `Credential should be scoped to a valid region, not '${reqRegion}'.` };
  const amzDate = h['x-amz-date'];
  if (!/^\d{8}T\d{6}Z$/.test(amzDate ?? '') || amzDate.slice(0, 8) !== date) {
    return { status: 403, message: `X-Amz-Date (${amzDate}) is missing, malformed or not of the credential's date ${date}` };
  }
  const when = Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8), +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15));
  if (Math.abs(Date.now() - when) > 5 * 60 * 1000) return { status: 403, message: `Signature expired: ${amzDate} is more than 5 minutes from now.` };
  const payloadHash = sha256(Buffer.from(req.rawBody, 'utf8'));
  if (h['x-amz-content-sha256'] !== undefined && h['x-amz-content-sha256'] !== payloadHash) {
    return { status: 400, message: 'The provided x-amz-content-sha256 header does not match what was computed.' };
  }
  const signed = signedList.split(';');
  const sorted = [...signed].sort();
  if (signed.join(';') !== sorted.join(';')) return { status: 403, message: SIGNATURE_MISMATCH };
  for (const need of ['host', 'x-amz-date', ...Object.keys(h).filter((n) => n.startsWith('x-amz-'))]) {
    if (!signed.includes(need)) return { status: 403, message: `The header ${need} must be signed.` };
  }
  if (sessionToken && h['x-amz-security-token'] !== sessionToken) {
    return { status: 403, message: 'The security token included in the request is invalid.' };
  }
  if (!sessionToken && h['x-amz-security-token'] !== undefined) {
    return { status: 403, message: 'The security token included in the request is invalid.' };
  }
  const canonical = canonicalRequest(req, signed, h['x-amz-content-sha256'] ?? payloadHash);
  const toSign = ['AWS4-HMAC-SHA256', amzDate, `${date}/${reqRegion}/${service}/aws4_request`, sha256(canonical)].join('\n');
  if (signatureOf(secretAccessKey, date, reqRegion, service, toSign) !== signature) return { status: 403, message: SIGNATURE_MISMATCH };
  return null;
}

// ---- request validation ----

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function onlyKeys(obj, allowed, where) {
  if (!isObject(obj)) throw new MockError(`mock: ${where} must be an object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw new MockError(`mock: Malformed input request: ${where}: extraneous key [${k}] is not permitted`);
  }
}

/** One key of a union (a content block, toolChoice...). */
function unionKey(obj, allowed, where) {
  onlyKeys(obj, allowed, where);
  const keys = Object.keys(obj);
  if (keys.length !== 1) throw new MockError(`mock: ${where} must set exactly one of ${allowed.join(', ')} (it sets ${keys.length})`);
  return keys[0];
}

function nonBlank(text, where) {
  if (typeof text !== 'string') throw new MockError(`mock: ${where} must be a string`);
  if (!text.trim()) throw new MockError(`mock: The text field in the ContentBlock object at ${where} is blank. Add text to the text field, and try again.`);
  return text;
}

function imageUrl(image, where) {
  onlyKeys(image, ['format', 'source'], where);
  if (!FORMATS[image.format]) throw new MockError(`mock: ${where}.format must be png, jpeg, gif or webp, not ${image.format}`);
  onlyKeys(image.source, ['bytes', 's3Location'], `${where}.source`);
  const b64 = image.source.bytes;
  if (typeof b64 !== 'string' || !/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new MockError(`mock: ${where}.source.bytes must be base64 bytes`);
  const bytes = Buffer.from(b64, 'base64');
  if (!MAGIC[image.format].every((v, i) => bytes[i] === v)) throw new MockError(`mock: ${where}: the image's bytes are not ${image.format}`);
  return `data:${FORMATS[image.format]};base64,${b64}`;
}

const TOOL_USE_ID = /^[a-zA-Z0-9_-]{1,64}$/;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

function toolResultOf(block, where) {
  onlyKeys(block, ['toolUseId', 'content', 'status'], where);
  if (!TOOL_USE_ID.test(block.toolUseId ?? '')) throw new MockError(`mock: ${where}.toolUseId must match [a-zA-Z0-9_-]+`);
  if (block.status !== undefined && !['success', 'error'].includes(block.status)) throw new MockError(`mock: ${where}.status must be success or error`);
  if (!Array.isArray(block.content)) throw new MockError(`mock: ${where}.content must be an array`);
  const texts = [];
  const images = [];
  block.content.forEach((c, i) => {
    const kind = unionKey(c, ['text', 'image', 'json', 'document', 'video'], `${where}.content.${i}`);
    if (kind === 'text') {
      if (typeof c.text !== 'string') throw new MockError(`mock: ${where}.content.${i}.text must be a string`);
      texts.push(c.text);
    } else if (kind === 'image') images.push(imageUrl(c.image, `${where}.content.${i}.image`));
    else if (kind === 'json') texts.push(JSON.stringify(c.json));
    else throw new MockError(`mock: ${where}.content.${i}: ${kind} is not scripted`);
  });
  return { id: block.toolUseId, text: texts.join(''), images };
}

/** A user message's blocks into chat messages (tool results first, as tool messages). */
function userToChat(msg, i, pendingUses, out) {
  const results = [];
  const parts = [];
  msg.content.forEach((block, j) => {
    const where = `messages.${i}.content.${j}`;
    const kind = unionKey(block, ['text', 'image', 'toolResult', 'document', 'video', 'cachePoint', 'guardContent'], where);
    if (kind === 'text') parts.push({ type: 'text', text: nonBlank(block.text, where) });
    else if (kind === 'image') parts.push({ type: 'image_url', image_url: { url: imageUrl(block.image, `${where}.image`) } });
    else if (kind === 'toolResult') {
      if (parts.length) throw new MockError(`mock: ${where}: toolResult blocks must come before the other blocks of the message`);
      results.push(toolResultOf(block.toolResult, `${where}.toolResult`));
    } else if (kind !== 'cachePoint') throw new MockError(`mock: ${where}: ${kind} is not scripted`);
  });
  const ids = results.map((r) => r.id);
  if (pendingUses.length && ids.sort().join(',') !== [...pendingUses].sort().join(',')) {
    throw new MockError(`mock: Expected toolResult blocks at messages.${i}.content for the following Ids: ${pendingUses.join(', ')} (got: ${ids.join(', ')})`);
  }
  if (!pendingUses.length && results.length) {
    throw new MockError(`mock: The number of toolResult blocks at messages.${i}.content exceeds the number of toolUse blocks of previous turn.`);
  }
  const images = [];
  for (const r of results) {
    out.push({ role: 'tool', tool_call_id: r.id, content: r.text });
    images.push(...r.images.map((url) => ({ type: 'image_url', image_url: { url } })));
  }
  if (parts.length || images.length) out.push({ role: 'user', content: [...images, ...parts] });
}

function assistantToChat(msg, i, out) {
  let text = '';
  const calls = [];
  msg.content.forEach((block, j) => {
    const where = `messages.${i}.content.${j}`;
    const kind = unionKey(block, ['text', 'toolUse', 'reasoningContent', 'cachePoint'], where);
    if (kind === 'text') text += nonBlank(block.text, where);
    else if (kind === 'toolUse') {
      const u = block.toolUse;
      onlyKeys(u, ['toolUseId', 'name', 'input'], `${where}.toolUse`);
      if (!TOOL_USE_ID.test(u.toolUseId ?? '')) throw new MockError(`mock: ${where}.toolUse.toolUseId must match [a-zA-Z0-9_-]+`);
      if (!TOOL_NAME.test(u.name ?? '')) throw new MockError(`mock: ${where}.toolUse.name must match [a-zA-Z0-9_-]+`);
      if (!isObject(u.input)) throw new MockError(`mock: ${where}.toolUse.input must be an object`);
      if (calls.some((c) => c.id === u.toolUseId)) throw new MockError(`mock: ${where}: toolUse ids must be unique`);
      calls.push({ id: u.toolUseId, type: 'function', function: { name: u.name, arguments: JSON.stringify(u.input) } });
    } else if (kind === 'reasoningContent') {
      unionKey(block.reasoningContent, ['reasoningText', 'redactedContent'], `${where}.reasoningContent`);
    }
  });
  out.push({ role: 'assistant', content: text || null, ...(calls.length ? { tool_calls: calls } : {}) });
  return calls.map((c) => c.id);
}

function messagesToChat(messages, out) {
  if (!Array.isArray(messages) || !messages.length) throw new MockError('mock: messages must be a non-empty array');
  let pendingUses = [];
  let toolBlocks = false;
  messages.forEach((msg, i) => {
    onlyKeys(msg, ['role', 'content'], `messages.${i}`);
    if (msg.role !== 'user' && msg.role !== 'assistant') throw new MockError(`mock: messages.${i}.role must be user or assistant, not ${msg.role}`);
    if (i === 0 && msg.role !== 'user') throw new MockError('mock: A conversation must start with a user message. Try again with a conversation that starts with a user message.');
    if (i > 0 && messages[i - 1].role === msg.role) {
      throw new MockError('mock: A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.');
    }
    if (!Array.isArray(msg.content) || !msg.content.length) throw new MockError(`mock: messages.${i}.content must be a non-empty array`);
    if (msg.role === 'user') {
      userToChat(msg, i, pendingUses, out);
      pendingUses = [];
    } else pendingUses = assistantToChat(msg, i, out);
    toolBlocks ||= msg.content.some((b) => b.toolUse || b.toolResult);
  });
  if (pendingUses.length && messages.at(-1).role === 'assistant') {
    throw new MockError('mock: the conversation ends with toolUse blocks that no toolResult answers');
  }
  return toolBlocks;
}

function toolsToChat(config, chat) {
  onlyKeys(config, ['tools', 'toolChoice'], 'toolConfig');
  if (!Array.isArray(config.tools) || !config.tools.length) throw new MockError('mock: toolConfig.tools must be a non-empty array');
  const names = new Set();
  chat.tools = config.tools.map((t, i) => {
    const where = `toolConfig.tools.${i}`;
    if (unionKey(t, ['toolSpec', 'cachePoint'], where) !== 'toolSpec') throw new MockError(`mock: ${where}: a cachePoint is not scripted`);
    const s = t.toolSpec;
    onlyKeys(s, ['name', 'description', 'inputSchema'], `${where}.toolSpec`);
    if (!TOOL_NAME.test(s.name ?? '')) throw new MockError(`mock: ${where}.toolSpec.name must match [a-zA-Z0-9_-]{1,64}`);
    if (names.has(s.name)) throw new MockError(`mock: ${where}: the tool name ${s.name} is declared twice`);
    names.add(s.name);
    if (s.description !== undefined && (typeof s.description !== 'string' || !s.description)) throw new MockError(`mock: ${where}.toolSpec.description must be a non-empty string`);
    onlyKeys(s.inputSchema, ['json'], `${where}.toolSpec.inputSchema`);
    if (!isObject(s.inputSchema.json)) throw new MockError(`mock: ${where}.toolSpec.inputSchema.json must be a JSON schema object`);
    return { type: 'function', function: { name: s.name, ...(s.description ? { description: s.description } : {}), parameters: s.inputSchema.json } };
  });
  if (config.toolChoice !== undefined) {
    const kind = unionKey(config.toolChoice, ['auto', 'any', 'tool'], 'toolConfig.toolChoice');
    if (kind === 'tool') {
      onlyKeys(config.toolChoice.tool, ['name'], 'toolConfig.toolChoice.tool');
      if (!names.has(config.toolChoice.tool.name)) throw new MockError(`mock: toolConfig.toolChoice.tool.name ${config.toolChoice.tool.name} is not a declared tool`);
      chat.tool_choice = { type: 'function', function: { name: config.toolChoice.tool.name } };
    } else {
      onlyKeys(config.toolChoice[kind], [], `toolConfig.toolChoice.${kind}`);
      chat.tool_choice = kind === 'any' ? 'required' : 'auto';
    }
  }
}

function checkInference(config) {
  onlyKeys(config, ['maxTokens', 'temperature', 'topP', 'stopSequences'], 'inferenceConfig');
  if (config.maxTokens !== undefined && (!Number.isInteger(config.maxTokens) || config.maxTokens < 1)) throw new MockError('mock: inferenceConfig.maxTokens must be an integer >= 1');
  for (const k of ['temperature', 'topP']) {
    if (config[k] !== undefined && (typeof config[k] !== 'number' || config[k] < 0 || config[k] > 1)) throw new MockError(`mock: inferenceConfig.${k} must be a number in [0, 1]`);
  }
  if (config.stopSequences !== undefined && (!Array.isArray(config.stopSequences) || !config.stopSequences.every((s) => typeof s === 'string' && s))) {
    throw new MockError('mock: inferenceConfig.stopSequences must be an array of non-empty strings');
  }
}

/** A Converse request validated and converted to chat's shape. */
function converseToChat(body, req) {
  const route = ROUTE.exec(req.path);
  if (/[:]/.test(route[1])) throw new MockError(`mock: the model id in the path must be URI-encoded (got ${route[1]})`);
  if (!/^application\/json\b/.test(req.headers['content-type'] ?? '')) throw new MockError(`mock: Content-Type must be application/json, not ${req.headers['content-type']}`);
  onlyKeys(body, ['messages', 'system', 'inferenceConfig', 'toolConfig', 'guardrailConfig', 'additionalModelRequestFields', 'promptVariables', 'additionalModelResponseFieldPaths', 'requestMetadata', 'performanceConfig'], '#');
  const chat = { model: decodeURIComponent(route[1]), messages: [] };
  if (body.system !== undefined) {
    if (!Array.isArray(body.system)) throw new MockError('mock: system must be an array');
    body.system.forEach((s, i) => {
      if (unionKey(s, ['text', 'guardContent', 'cachePoint'], `system.${i}`) === 'text') chat.messages.push({ role: 'system', content: nonBlank(s.text, `system.${i}`) });
    });
  }
  const toolBlocks = messagesToChat(body.messages, chat.messages);
  if (body.toolConfig !== undefined) toolsToChat(body.toolConfig, chat);
  else if (toolBlocks) throw new MockError('mock: The toolConfig field must be defined when using toolUse and toolResult content blocks.');
  if (body.inferenceConfig !== undefined) checkInference(body.inferenceConfig);
  if (body.additionalModelRequestFields !== undefined && !isObject(body.additionalModelRequestFields)) throw new MockError('mock: additionalModelRequestFields must be an object');
  return chat;
}

// ---- answers ----

/** One AWS event stream message: prelude, headers (strings), payload, CRC32s. */
export function eventStreamMessage(headers, payload) {
  const hs = Object.entries(headers).map(([name, value]) => {
    const n = Buffer.from(name);
    const v = Buffer.from(value);
    const b = Buffer.alloc(1 + n.length + 1 + 2 + v.length);
    b.writeUInt8(n.length, 0);
    n.copy(b, 1);
    b.writeUInt8(7, 1 + n.length);
    b.writeUInt16BE(v.length, 2 + n.length);
    v.copy(b, 4 + n.length);
    return b;
  });
  const headerBytes = Buffer.concat(hs);
  const body = Buffer.from(payload);
  const total = 12 + headerBytes.length + body.length + 4;
  const msg = Buffer.alloc(total);
  msg.writeUInt32BE(total, 0);
  msg.writeUInt32BE(headerBytes.length, 4);
  msg.writeUInt32BE(zlib.crc32(msg.subarray(0, 8)), 8);
  headerBytes.copy(msg, 12);
  body.copy(msg, 12 + headerBytes.length);
  msg.writeUInt32BE(zlib.crc32(msg.subarray(0, total - 4)), total - 4);
  return msg;
}

function frame(ev) {
  if (ev.exception) {
    return eventStreamMessage({ ':exception-type': ev.exception, ':content-type': 'application/json', ':message-type': 'exception' }, JSON.stringify(ev.payload));
  }
  const payload = { ...ev.payload, p: PADDING.slice(0, 1 + (ev.payload.contentBlockIndex ?? 0) * 7) }; // Bedrock pads its events
  return eventStreamMessage({ ':event-type': ev.type, ':content-type': 'application/json', ':message-type': 'event' }, JSON.stringify(payload));
}

function converseAnswer(a) {
  const { text, calls } = a.turn;
  const exception = /^BEDROCK-EXCEPTION (\w+): (.*)$/s.exec(text ?? '');
  const usage = { inputTokens: a.usage.prompt_tokens, outputTokens: a.usage.completion_tokens, totalTokens: a.usage.prompt_tokens + a.usage.completion_tokens };
  const stopReason = calls.length ? 'tool_use' : 'end_turn';
  if (!a.stream) {
    if (exception) throw new MockError(`mock: ${exception[2]}`);
    const content = [];
    if (text !== null) content.push({ text });
    for (const c of calls) content.push({ toolUse: { toolUseId: c.callId, name: c.name, input: JSON.parse(c.arguments) } });
    return { json: { output: { message: { role: 'assistant', content } }, stopReason, usage, metrics: { latencyMs: 42 } } };
  }
  const events = [{ type: 'messageStart', payload: { role: 'assistant' } }];
  if (exception) {
    events.push({ type: 'contentBlockDelta', payload: { contentBlockIndex: 0, delta: { text: 'partial ' } } });
    events.push({ exception: exception[1], payload: { message: exception[2] } });
    return { events, frame, contentType: 'application/vnd.amazon.eventstream' };
  }
  let index = 0;
  if (text !== null) {
    for (const piece of a.splitChunks(text, a.chunkSize)) events.push({ type: 'contentBlockDelta', payload: { contentBlockIndex: index, delta: { text: piece } } });
    events.push({ type: 'contentBlockStop', payload: { contentBlockIndex: index++ } });
  }
  for (const c of calls) {
    events.push({ type: 'contentBlockStart', payload: { contentBlockIndex: index, start: { toolUse: { toolUseId: c.callId, name: c.name } } } });
    for (const frag of a.splitChunks(c.arguments, a.chunkSize)) events.push({ type: 'contentBlockDelta', payload: { contentBlockIndex: index, delta: { toolUse: { input: frag } } } });
    events.push({ type: 'contentBlockStop', payload: { contentBlockIndex: index++ } });
  }
  events.push({ type: 'messageStop', payload: { stopReason } });
  events.push({ type: 'metadata', payload: { usage, metrics: { latencyMs: 42 } } });
  return { events, frame, contentType: 'application/vnd.amazon.eventstream' };
}

/** The dialect object of startUpstream (upstream.mjs). */
export function bedrockDialect({ accessKeyId, secretAccessKey, sessionToken = null, region = 'us-east-1' }) {
  const creds = { accessKeyId, secretAccessKey, sessionToken, region };
  return {
    name: 'bedrock',
    credentials: creds, // what the upstream checks signatures with (a test may change them)
    match: (method, path) => method === 'POST' && ROUTE.test(path),
    stream: (path) => path.endsWith('/converse-stream'),
    check: (req) => checkSignature(req, creds),
    toChat: converseToChat,
    answer: converseAnswer,
    error(status, error) {
      const type = EXCEPTIONS[status] ?? (status >= 500 ? 'InternalServerException' : 'ValidationException');
      return { body: { message: error.message }, headers: { 'x-amzn-errortype': `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/` } };
    },
  };
}
