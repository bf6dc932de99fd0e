// Google's generateContent API for the scripted upstream (upstream.mjs):
// Gemini's API (geminiDialect: /v1beta/models/M:generateContent, an
// x-goog-api-key) and Vertex AI (vertexDialect:
// /v1/projects/P/locations/L/publishers/google/models/M:generateContent with
// an OAuth2 access token, and the service account's token endpoint POST
// /token, which verifies the JWT the gateway signs). Requests are validated
// as Google's API does (unknown fields, types, roles, function call and
// response pairing, thought signatures sent back as they were received), and
// refused with a MockError; answers are GenerateContentResponse objects,
// streamed as SSE (alt=sse) events.
//
//   const dialect = geminiDialect({ apiKey: 'test-gemini-key' })
//   const dialect = vertexDialect({ project, location, clientEmail, keyId, publicKey })
//     dialect.tokenRequests   the token endpoint's exchanges [{ok, error}]
//     dialect.failNextStream = 'message'   the next stream ends in an error event
import crypto from 'node:crypto';

import { MockError } from './upstream.mjs';

const STATUS_NAMES = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  409: 'ABORTED',
  429: 'RESOURCE_EXHAUSTED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const fail = (msg) => {
  throw new MockError(`mock: ${msg}`);
};

/** Refuses keys of obj beyond allowed, as Google's JSON parser does. */
function onlyKeys(obj, allowed, where) {
  if (!isObject(obj)) fail(`Invalid value at '${where}': expected an object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) fail(`Invalid JSON payload received. Unknown name "${k}" at '${where}': Cannot find field.`);
  }
}

const SCHEMA_KEYS = ['type', 'format', 'title', 'description', 'nullable', 'enum', 'maxItems', 'minItems', 'properties', 'required', 'minProperties', 'maxProperties', 'minLength', 'maxLength', 'pattern', 'example', 'anyOf', 'propertyOrdering', 'default', 'items', 'minimum', 'maximum'];
const SCHEMA_TYPES = ['STRING', 'NUMBER', 'INTEGER', 'BOOLEAN', 'ARRAY', 'OBJECT', 'NULL'];

/** A Schema (the OpenAPI subset Gemini takes). */
function checkSchema(s, where) {
  onlyKeys(s, SCHEMA_KEYS, where);
  if (s.type !== undefined && (typeof s.type !== 'string' || !SCHEMA_TYPES.includes(s.type.toUpperCase()))) {
    fail(`Invalid value at '${where}.type' (type.googleapis.com/google.cloud.aiplatform.v1beta1.Type), ${JSON.stringify(s.type)}`);
  }
  if (s.enum !== undefined && (!Array.isArray(s.enum) || s.enum.some((e) => typeof e !== 'string'))) fail(`Invalid value at '${where}.enum': expected strings`);
  if (s.properties !== undefined) {
    if (!isObject(s.properties)) fail(`Invalid value at '${where}.properties'`);
    if (s.type?.toUpperCase() === 'OBJECT' && !Object.keys(s.properties).length) fail(`${where}.properties: should be non-empty for OBJECT type`);
    for (const [k, v] of Object.entries(s.properties)) checkSchema(v, `${where}.properties[${k}]`);
  }
  if (s.required !== undefined) {
    if (!Array.isArray(s.required)) fail(`Invalid value at '${where}.required'`);
    for (const r of s.required) if (!s.properties || !(r in s.properties)) fail(`${where}.required[${r}]: property is not defined`);
  }
  if (s.items !== undefined) checkSchema(s.items, `${where}.items`);
  if (s.anyOf !== undefined) s.anyOf.forEach((a, i) => checkSchema(a, `${where}.anyOf[${i}]`));
}

function checkTools(tools) {
  if (!Array.isArray(tools)) fail("Invalid value at 'tools': expected a list");
  const names = [];
  tools.forEach((t, i) => {
    onlyKeys(t, ['functionDeclarations', 'googleSearch', 'codeExecution', 'urlContext'], `tools[${i}]`);
    if (t.functionDeclarations === undefined) fail(`tools[${i}]: a tool needs functionDeclarations`);
    if (!Array.isArray(t.functionDeclarations) || !t.functionDeclarations.length) fail(`tools[${i}].function_declarations: must not be empty`);
    t.functionDeclarations.forEach((d, j) => {
      const where = `tools[${i}].function_declarations[${j}]`;
      onlyKeys(d, ['name', 'description', 'parameters', 'parametersJsonSchema', 'response'], where);
      if (typeof d.name !== 'string' || !/^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$/.test(d.name)) fail(`${where}.name: Invalid function name ${JSON.stringify(d.name)}`);
      if (d.description !== undefined && typeof d.description !== 'string') fail(`${where}.description: expected a string`);
      if (d.parameters !== undefined) checkSchema(d.parameters, `${where}.parameters`);
      names.push(d.name);
    });
  });
  return names;
}

function checkToolConfig(tc, names) {
  onlyKeys(tc, ['functionCallingConfig'], 'tool_config');
  const f = tc.functionCallingConfig;
  onlyKeys(f, ['mode', 'allowedFunctionNames'], 'tool_config.function_calling_config');
  if (!['AUTO', 'ANY', 'NONE', 'VALIDATED'].includes(f.mode)) fail(`Invalid value at 'tool_config.function_calling_config.mode', ${JSON.stringify(f.mode)}`);
  if (f.allowedFunctionNames !== undefined) {
    if (f.mode !== 'ANY' && f.mode !== 'VALIDATED') fail('allowed_function_names may be set only when the mode is ANY');
    for (const n of f.allowedFunctionNames) if (!names.includes(n)) fail(`allowed_function_names: ${n} is not a declared function`);
  }
}

function checkGenerationConfig(g) {
  onlyKeys(g, ['stopSequences', 'candidateCount', 'maxOutputTokens', 'temperature', 'topP', 'topK', 'seed', 'presencePenalty', 'frequencyPenalty', 'responseMimeType', 'responseSchema', 'thinkingConfig', 'responseLogprobs', 'logprobs'], 'generation_config');
  const int = (k, min) => {
    if (g[k] !== undefined && (!Number.isInteger(g[k]) || g[k] < min)) fail(`Invalid value at 'generation_config.${k}' (TYPE_INT32), ${JSON.stringify(g[k])}`);
  };
  int('candidateCount', 1);
  int('maxOutputTokens', 1);
  int('seed', -(2 ** 31));
  for (const k of ['temperature', 'topP', 'presencePenalty', 'frequencyPenalty']) {
    if (g[k] !== undefined && typeof g[k] !== 'number') fail(`Invalid value at 'generation_config.${k}' (TYPE_FLOAT), ${JSON.stringify(g[k])}`);
  }
  if (g.candidateCount !== undefined && g.candidateCount !== 1) fail('Only one candidate can be specified in the current model');
  if (g.stopSequences !== undefined && (!Array.isArray(g.stopSequences) || g.stopSequences.length > 5 || g.stopSequences.some((s) => typeof s !== 'string'))) fail('generation_config.stop_sequences: at most 5 strings');
  if (g.responseSchema !== undefined) checkSchema(g.responseSchema, 'generation_config.response_schema');
  if (g.thinkingConfig !== undefined) onlyKeys(g.thinkingConfig, ['thinkingBudget', 'includeThoughts', 'thinkingLevel'], 'generation_config.thinking_config');
}

const PART_DATA = ['text', 'inlineData', 'fileData', 'functionCall', 'functionResponse', 'executableCode', 'codeExecutionResult'];

/** A part: exactly one kind of data, the kinds its role may send. */
function checkPart(p, role, where, signatures) {
  onlyKeys(p, [...PART_DATA, 'thought', 'thoughtSignature'], where);
  const kinds = PART_DATA.filter((k) => p[k] !== undefined);
  if (kinds.length !== 1) fail(`${where}: a part must hold exactly one of text, inline_data, function_call, function_response... (it holds ${kinds.length})`);
  const kind = kinds[0];
  if (kind === 'text' && (typeof p.text !== 'string' || (p.text === '' && p.thoughtSignature === undefined))) fail(`Unable to submit request because it has an empty text parameter (${where}).`);
  if (kind === 'inlineData') {
    onlyKeys(p.inlineData, ['mimeType', 'data'], `${where}.inline_data`);
    if (typeof p.inlineData.mimeType !== 'string' || typeof p.inlineData.data !== 'string') fail(`${where}.inline_data: mime_type and data are required`);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(p.inlineData.data) || !p.inlineData.data) fail(`Invalid value at '${where}.inline_data.data' (TYPE_BYTES), Base64 decoding failed`);
  }
  if (kind === 'fileData') onlyKeys(p.fileData, ['mimeType', 'fileUri'], `${where}.file_data`);
  if (kind === 'functionCall') {
    if (role !== 'model') fail(`${where}: function calls are the model's`);
    onlyKeys(p.functionCall, ['name', 'args', 'id'], `${where}.function_call`);
    if (typeof p.functionCall.name !== 'string' || !p.functionCall.name) fail(`${where}.function_call.name: required`);
    if (p.functionCall.args !== undefined && !isObject(p.functionCall.args)) fail(`Invalid value at '${where}.function_call.args' (type.googleapis.com/google.protobuf.Struct)`);
  }
  if (kind === 'functionResponse') {
    if (role !== 'user') fail(`${where}: function responses are the user's`);
    onlyKeys(p.functionResponse, ['name', 'response', 'id'], `${where}.function_response`);
    if (typeof p.functionResponse.name !== 'string' || !isObject(p.functionResponse.response)) fail(`${where}.function_response: name and response (an object) are required`);
  }
  if (p.thought !== undefined && typeof p.thought !== 'boolean') fail(`Invalid value at '${where}.thought' (TYPE_BOOL)`);
  if (p.thoughtSignature !== undefined) {
    const issued = signatures.get(p.thoughtSignature);
    if (!issued) fail(`${where}: Corrupted thought signature.`);
    const same = kind === 'functionCall' ? issued.name === p.functionCall.name : issued.kind === kind;
    if (!same) fail(`${where}: the thought signature belongs to another part`);
  }
  return kind;
}

/** The contents: roles, alternation, each model turn's calls answered by the next user turn. */
function checkContents(contents, signatures) {
  if (!Array.isArray(contents) || !contents.length) fail('* GenerateContentRequest.contents: contents is not specified');
  contents.forEach((c, i) => {
    onlyKeys(c, ['role', 'parts'], `contents[${i}]`);
    if (c.role !== 'user' && c.role !== 'model') fail(`Please use a valid role: user, model (contents[${i}].role: ${JSON.stringify(c.role)}).`);
    if (!Array.isArray(c.parts) || !c.parts.length) fail(`* GenerateContentRequest.contents[${i}].parts: contents.parts must not be empty.`);
    if (i === 0 && c.role !== 'user') fail('Please ensure that the first content is the user\'s.');
    if (i > 0 && contents[i - 1].role === c.role) fail('Please ensure that multiturn requests alternate between user and model.');
    c.parts.forEach((p, j) => checkPart(p, c.role, `contents[${i}].parts[${j}]`, signatures));
  });
  contents.forEach((c, i) => {
    const calls = c.parts.filter((p) => p.functionCall).map((p) => p.functionCall.name);
    const next = contents[i + 1];
    const answers = c.role === 'user' ? c.parts.filter((p) => p.functionResponse).map((p) => p.functionResponse.name) : [];
    if (answers.length) {
      const prev = contents[i - 1]?.parts.filter((p) => p.functionCall).map((p) => p.functionCall.name) ?? [];
      if (prev.length !== answers.length) {
        fail('Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.');
      }
      if (prev.some((n, k) => n !== answers[k])) fail(`function responses [${answers}] do not answer the calls [${prev}] in order`);
    }
    if (calls.length && next && !next.parts.some((p) => p.functionResponse)) {
      fail('Please ensure that function call turn comes immediately after a user turn or after a function response turn.');
    }
  });
}

/** The request validated, as a chat request for the scripts. */
function toChat(body, model) {
  onlyKeys(body, ['contents', 'systemInstruction', 'tools', 'toolConfig', 'generationConfig', 'safetySettings', 'cachedContent', 'labels'], 'request');
  const out = { model, messages: [] };
  if (body.systemInstruction !== undefined) {
    onlyKeys(body.systemInstruction, ['parts', 'role'], 'system_instruction');
    const texts = body.systemInstruction.parts.map((p, i) => {
      onlyKeys(p, ['text'], `system_instruction.parts[${i}]`);
      if (typeof p.text !== 'string' || !p.text) fail(`system_instruction.parts[${i}]: text required`);
      return p.text;
    });
    out.messages.push({ role: 'system', content: texts.join('\n') });
  }
  const names = body.tools !== undefined ? checkTools(body.tools) : [];
  if (body.toolConfig !== undefined) checkToolConfig(body.toolConfig, names);
  if (body.generationConfig !== undefined) checkGenerationConfig(body.generationConfig);
  checkContents(body.contents, this.signatures);
  let lastIds = [];
  body.contents.forEach((c, i) => {
    if (c.role === 'model') {
      const text = c.parts.filter((p) => typeof p.text === 'string' && !p.thought).map((p) => p.text).join('');
      const calls = c.parts.filter((p) => p.functionCall);
      lastIds = calls.map((p, k) => this.signatures.get(p.thoughtSignature)?.callId ?? `gcall_${i}_${k}`);
      const msg = { role: 'assistant', content: text || null };
      if (calls.length) msg.tool_calls = calls.map((p, k) => ({ id: lastIds[k], type: 'function', function: { name: p.functionCall.name, arguments: JSON.stringify(p.functionCall.args ?? {}) } }));
      out.messages.push(msg);
      return;
    }
    let k = 0;
    const rest = [];
    for (const p of c.parts) {
      if (p.functionResponse) {
        const r = p.functionResponse.response;
        out.messages.push({ role: 'tool', tool_call_id: lastIds[k++], content: typeof r.content === 'string' ? r.content : JSON.stringify(r) });
      } else if (p.text !== undefined) rest.push({ type: 'text', text: p.text });
      else if (p.inlineData) rest.push({ type: 'image_url', image_url: { url: `data:${p.inlineData.mimeType};base64,${p.inlineData.data}` } });
      else if (p.fileData) rest.push({ type: 'image_url', image_url: { url: p.fileData.fileUri } });
    }
    if (rest.length) out.messages.push({ role: 'user', content: rest.every((p) => p.type === 'text') ? rest.map((p) => p.text).join('') : rest });
  });
  if (names.length) out.tools = body.tools.flatMap((t) => t.functionDeclarations).map((d) => ({ type: 'function', function: { name: d.name, description: d.description, parameters: d.parameters ?? { type: 'object', properties: {} } } }));
  const mode = body.toolConfig?.functionCallingConfig?.mode;
  if (mode) out.tool_choice = { AUTO: 'auto', ANY: 'required', NONE: 'none', VALIDATED: 'auto' }[mode];
  return out;
}

/** The answer of a turn: a GenerateContentResponse, or its stream's events. */
function answer(a) {
  const { turn, usage, stream, chunkSize, nextId, splitChunks } = a;
  const responseId = nextId('resp').slice(0, 20);
  const modelVersion = 'gemini-test-001';
  const parts = [];
  const signed = (part, info) => {
    const sig = crypto.randomBytes(24).toString('base64');
    this.signatures.set(sig, info);
    return { ...part, thoughtSignature: sig };
  };
  turn.calls.forEach((c, k) => {
    const part = { functionCall: { name: c.name, args: JSON.parse(c.arguments) } };
    // the first call carries the turn's thought signature, as Gemini's thinking models send it
    parts.push(k === 0 ? signed(part, { kind: 'functionCall', name: c.name, callId: c.callId }) : part);
  });
  const usageMetadata = {
    promptTokenCount: usage.prompt_tokens,
    candidatesTokenCount: usage.completion_tokens,
    totalTokenCount: usage.prompt_tokens + usage.completion_tokens,
    promptTokensDetails: [{ modality: 'TEXT', tokenCount: usage.prompt_tokens }],
  };
  const response = (p, finish, u) => {
    const cand = { content: { parts: p, role: 'model' }, index: 0 };
    if (finish) cand.finishReason = finish;
    return { candidates: [cand], usageMetadata: u, modelVersion, responseId };
  };
  if (!stream) {
    const all = turn.text !== null ? [{ text: turn.text }, ...parts] : parts;
    return { json: response(all.length ? all : [{ text: '' }], 'STOP', usageMetadata) };
  }
  const events = [];
  const partial = { promptTokenCount: usage.prompt_tokens, totalTokenCount: usage.prompt_tokens };
  for (const piece of turn.text !== null ? splitChunks(turn.text, chunkSize) : []) events.push(response([{ text: piece }], null, partial));
  for (const p of parts) events.push(response([p], null, partial));
  if (events.length) {
    const last = events[events.length - 1];
    last.candidates[0].finishReason = 'STOP';
    last.usageMetadata = usageMetadata;
  } else events.push(response([{ text: '' }], 'STOP', usageMetadata));
  if (this.failNextStream) {
    const message = this.failNextStream;
    this.failNextStream = null;
    events.splice(Math.max(1, events.length - 1));
    events.push({ error: { code: 500, message, status: 'INTERNAL' } });
  }
  return { events, frame: (ev) => `data: ${JSON.stringify(ev)}\r\n\r\n`, contentType: 'text/event-stream' };
}

function error(status, e) {
  return { body: { error: { code: status, message: e.message ?? 'mock error', status: STATUS_NAMES[status] ?? 'UNKNOWN' } } };
}

/** Whether a generateContent request asks for a stream (which needs alt=sse). */
function isStream(path, url) {
  const s = path.endsWith(':streamGenerateContent');
  if (s && url.searchParams.get('alt') !== 'sse') fail('streamGenerateContent without alt=sse answers a JSON array, not the SSE stream asked for');
  if (!s && url.searchParams.size) fail(`unexpected query ${url.search}`);
  return s;
}

function checkJsonHeaders(headers) {
  if (!/^application\/json\b/.test(headers['content-type'] ?? '')) return { status: 400, message: `mock: content-type ${headers['content-type']} is not application/json` };
  return null;
}

/** Gemini's API: x-goog-api-key. */
export function geminiDialect({ apiKey = 'test-gemini-key' } = {}) {
  const route = /^\/v1beta\/models\/([A-Za-z0-9._-]+):(generateContent|streamGenerateContent)$/;
  const d = {
    name: 'gemini',
    wholeCalls: true, // Gemini streams a function call whole, in one part
    signatures: new Map(),
    failNextStream: null,
    match: (method, path) => method === 'POST' && /^\/v1beta\/models\//.test(path),
    stream: (path, body, url) => isStream(path, url),
    check(req) {
      if (!route.test(req.path)) return { status: 404, message: `mock: no route ${req.path}` };
      if (req.headers.authorization) return { status: 401, message: 'mock: Gemini\'s API takes its key in x-goog-api-key, not Authorization' };
      const key = req.headers['x-goog-api-key'];
      if (!key) return { status: 403, message: "mock: Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API." };
      if (key !== apiKey) return { status: 400, message: 'mock: API key not valid. Please pass a valid API key.' };
      return checkJsonHeaders(req.headers);
    },
    toChat(body, req) {
      return toChat.call(d, body, route.exec(req.path)[1]);
    },
    answer: (a) => answer.call(d, a),
    error,
  };
  return d;
}

/** The token endpoint: the JWT verified, an access token issued. */
function tokenExchange(d, req) {
  const refuse = (description) => {
    d.tokenRequests.push({ ok: false, error: description });
    return { status: 400, body: { error: 'invalid_grant', error_description: description } };
  };
  if (req.headers['content-type'] !== 'application/x-www-form-urlencoded') return refuse(`mock: content-type ${req.headers['content-type']}`);
  const form = new URLSearchParams(req.rawBody);
  if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer') return refuse(`mock: grant_type ${form.get('grant_type')}`);
  const parts = (form.get('assertion') ?? '').split('.');
  if (parts.length !== 3) return refuse('mock: the assertion is not a JWT');
  let header;
  let claims;
  try {
    header = JSON.parse(Buffer.from(parts[0], 'base64url'));
    claims = JSON.parse(Buffer.from(parts[1], 'base64url'));
  } catch {
    return refuse('mock: the JWT is not base64url JSON');
  }
  if (/[+/=]/.test(parts.join(''))) return refuse('mock: the JWT is not base64url without padding');
  if (header.alg !== 'RS256' || header.typ !== 'JWT' || header.kid !== d.keyId) return refuse(`mock: JWT header ${JSON.stringify(header)}`);
  const ok = crypto.verify('RSA-SHA256', Buffer.from(`${parts[0]}.${parts[1]}`), d.publicKey, Buffer.from(parts[2], 'base64url'));
  if (!ok) return refuse('Invalid JWT Signature.');
  const now = Math.floor(Date.now() / 1000);
  const aud = `http://${req.headers.host}/token`;
  if (claims.iss !== d.clientEmail) return refuse(`mock: iss ${claims.iss}`);
  if (claims.aud !== aud) return refuse(`mock: aud ${claims.aud}, not ${aud}`);
  if (claims.scope !== 'https://www.googleapis.com/auth/cloud-platform') return refuse(`mock: scope ${claims.scope}`);
  if (!Number.isInteger(claims.iat) || Math.abs(claims.iat - now) > 300 || claims.exp !== claims.iat + 3600) return refuse(`mock: iat ${claims.iat} exp ${claims.exp}`);
  const token = `ya29.mock-${crypto.randomBytes(16).toString('hex')}`;
  d.tokens.add(token);
  d.tokenRequests.push({ ok: true });
  return { status: 200, body: { access_token: token, expires_in: 3599, token_type: 'Bearer' } };
}

/** Vertex AI: an access token from the service account's token endpoint (POST /token). */
export function vertexDialect({ project = 'proj-test', location = 'us-central1', clientEmail, keyId, publicKey }) {
  const route = /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/google\/models\/([A-Za-z0-9._-]+):(generateContent|streamGenerateContent)$/;
  const d = {
    name: 'vertex',
    wholeCalls: true,
    signatures: new Map(),
    failNextStream: null,
    clientEmail,
    keyId,
    publicKey,
    tokens: new Set(),
    tokenRequests: [],
    match: (method, path) => (method === 'POST' && path === '/token') || (method === 'POST' && /^\/v1\/projects\//.test(path)),
    serve: (req) => (req.path === '/token' ? tokenExchange(d, req) : null),
    stream: (path, body, url) => isStream(path, url),
    check(req) {
      const m = route.exec(req.path);
      if (!m) return { status: 404, message: `mock: no route ${req.path}` };
      if (m[1] !== project || m[2] !== location) return { status: 403, message: `mock: Permission denied on resource project ${m[1]} (location ${m[2]})` };
      if (req.headers['x-goog-api-key']) return { status: 400, message: 'mock: Vertex AI takes an access token, not x-goog-api-key' };
      const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      if (!token || !d.tokens.has(token)) {
        return { status: 401, message: 'mock: Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.' };
      }
      return checkJsonHeaders(req.headers);
    },
    toChat(body, req) {
      return toChat.call(d, body, route.exec(req.path)[3]);
    },
    answer: (a) => answer.call(d, a),
    error,
  };
  return d;
}

/** A service account's key pair, and its key file's JSON with token_uri at base. */
export function serviceAccount({ project = 'proj-test', email = 'corral-test@proj-test.iam.gserviceaccount.com' } = {}) {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyId = crypto.randomBytes(20).toString('hex');
  const keyJson = (base) => ({
    type: 'service_account',
    project_id: project,
    private_key_id: keyId,
    private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }),
    client_email: email,
    client_id: '1234567890',
    auth_uri: 'https://accounts.google.com/o/oauth2/auth',
    token_uri: `${base}/token`,
  });
  return { publicKey, keyId, email, keyJson };
}
