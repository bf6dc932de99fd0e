// The gateway against Amazon Bedrock's Converse API (a scripted upstream
// speaking it through upstream-bedrock.mjs, which checks every request's
// SigV4 signature): the scenarios every native upstream plays
// (native-scenarios.mjs), and Bedrock's own: the signed headers and the
// encoded model id, a wrong secret answered 403, an exception in the event
// stream reaching a streamed client, images as bytes, http image URLs
// refused, usage.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { APIError } from 'openai';

import { CI_TOOL, INCLUDE_OUTPUTS, drain } from './gateway-helpers.mjs';
import { checkNativeRequests, nativeScenarioTests, NATIVE_MODEL, useNativeGateway } from './native-scenarios.mjs';
import { bedrockDialect } from './upstream-bedrock.mjs';
import { expectedUsage } from './upstream.mjs';

const T = { timeout: 120_000 };
const KEYS = {
  accessKeyId: 'AKIDCORRALTEST0001',
  secretAccessKey: 'corral/Secret+Key=0123456789abcdefghij',
  sessionToken: 'IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ==',
  region: 'us-east-1',
};
const MODEL_ID = 'anthropic.claude-test-v1:0';
// A 1x1 PNG.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

const dialect = bedrockDialect(KEYS);
const gw = useNativeGateway({
  dialect,
  modelLines: (base) => [
    `model: bedrock/${MODEL_ID}`,
    `api_base: ${base}`,
    `aws_access_key_id: ${KEYS.accessKeyId}`,
    `aws_secret_access_key: "${KEYS.secretAccessKey}"`,
    `aws_session_token: "${KEYS.sessionToken}"`,
    `aws_region_name: ${KEYS.region}`,
  ],
});

nativeScenarioTests(gw, { dialect });


test('bedrock: requests are signed with SigV4, the model id encoded in the path, no model in the body', T, async () => {
  const marker = gw.upstream.script(gw.marker('signed'), [{ text: 'Signed.' }]);
  await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
  const s = await gw.client.chat.completions.stream({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] }).finalChatCompletion();
  assert.equal(s.choices[0].message.content, 'Signed.');
  const seen = checkNativeRequests(gw, dialect, marker);
  assert.deepEqual(seen.map((r) => r.path), ['/model/anthropic.claude-test-v1%3A0/converse', '/model/anthropic.claude-test-v1%3A0/converse-stream']);
  for (const r of seen) {
    assert.match(r.headers.authorization, /^AWS4-HMAC-SHA256 Credential=AKIDCORRALTEST0001\/\d{8}\/us-east-1\/bedrock\/aws4_request, SignedHeaders=[a-z;-]*host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=[0-9a-f]{64}$/);
    assert.equal(r.headers['x-amz-security-token'], KEYS.sessionToken);
    assert.equal(r.body.model, undefined);
    assert.equal(r.body.modelId, undefined);
  }
  assert.equal(seen[1].headers.accept, 'application/vnd.amazon.eventstream');
});

test('bedrock: a wrong secret is answered 403 with the signature message', T, async () => {
  const marker = gw.upstream.script(gw.marker('wrong-secret'), [{ text: 'never' }]);
  const right = KEYS.secretAccessKey;
  dialect.credentials.secretAccessKey = 'not-the-secret'; // the upstream's key differs from the gateway's
  try {
    for (const call of [
      () => gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] }),
      () => gw.client.responses.create({ model: NATIVE_MODEL, input: `${marker} hi`, tools: [CI_TOOL] }),
    ]) {
      await assert.rejects(call(), (err) => {
        assert.equal(err.status, 403);
        assert.match(err.message, /The request signature we calculated does not match the signature you provided/);
        assert.equal(err.error?.type, 'permission_error');
        return true;
      });
    }
  } finally {
    dialect.credentials.secretAccessKey = right;
  }
});

test('bedrock: an exception in the event stream ends a streamed answer with its message', T, async () => {
  const marker = gw.upstream.script(gw.marker('exception'), [{ text: 'BEDROCK-EXCEPTION modelStreamErrorException: mock: the model broke down' }]);
  const chat = await gw.client.chat.completions.create({ model: NATIVE_MODEL, stream: true, messages: [{ role: 'user', content: `${marker} hi` }] });
  const c = await drain(chat);
  assert.ok(c.thrown instanceof APIError, `expected an APIError, got ${c.thrown?.constructor?.name}: ${c.thrown?.message}`);
  assert.match(c.thrown.message, /mock: the model broke down/);
  const resp = await gw.client.responses.create({ model: NATIVE_MODEL, stream: true, input: `${marker} hi`, tools: [CI_TOOL] });
  const r = await drain(resp);
  assert.ok(r.thrown instanceof APIError, `expected an APIError, got ${r.thrown?.constructor?.name}: ${r.thrown?.message}`);
  assert.match(r.thrown.message, /mock: the model broke down/);
  assert.equal(r.events[0].type, 'response.created');
});

test('bedrock: a client image goes as bytes, an http image URL is refused', T, async () => {
  const marker = gw.upstream.script(gw.marker('image'), [
    (chat) => ({ text: `images: ${chat.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((p) => p.type === 'image_url').map((p) => p.image_url.url.slice(0, 22)).join(',')}` }),
  ]);
  const c = await gw.client.chat.completions.create({
    model: NATIVE_MODEL,
    messages: [{ role: 'user', content: [{ type: 'text', text: `${marker} look` }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }] }],
  });
  assert.equal(c.choices[0].message.content, 'images: data:image/png;base64,');
  const sent = checkNativeRequests(gw, dialect, marker).at(-1).body.messages[0].content;
  assert.deepEqual(sent[1], { image: { format: 'png', source: { bytes: PNG } } });
  await assert.rejects(
    gw.client.chat.completions.create({
      model: NATIVE_MODEL,
      messages: [{ role: 'user', content: [{ type: 'text', text: `${marker} look` }, { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }],
    }),
    (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /data: URL/);
      return true;
    },
  );
});

test('bedrock: usage is the upstream\'s, summed over the rounds', T, async () => {
  const marker = gw.upstream.script(gw.marker('usage'), [{ code: 'print(1)' }, { text: 'Done.' }]);
  for (const stream of [false, true]) {
    const body = { model: NATIVE_MODEL, input: `${marker} run`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS };
    const r = stream ? await gw.client.responses.stream(body).finalResponse() : await gw.client.responses.create(body);
    const want = expectedUsage(2);
    assert.equal(r.usage.input_tokens, want.input_tokens);
    assert.equal(r.usage.output_tokens, want.output_tokens);
  }
});
