// The gateway against Bedrock's Converse API (upstream-bedrock.mjs) with
// the AWS keys and region taken from the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION_NAME; no session token), and the model
// written with LiteLLM's route prefix (bedrock/converse/MODEL).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CI_TOOL, INCLUDE_OUTPUTS } from './gateway-helpers.mjs';
import { checkNativeRequests, NATIVE_MODEL, useNativeGateway } from './native-scenarios.mjs';
import { bedrockDialect } from './upstream-bedrock.mjs';

const T = { timeout: 120_000 };
const KEYS = { accessKeyId: 'AKIDFROMTHEENVIRONMENT', secretAccessKey: 'env/secret+key', sessionToken: null, region: 'eu-west-3' };

const dialect = bedrockDialect(KEYS);
const gw = useNativeGateway({
  dialect,
  modelLines: (base) => ['model: bedrock/converse/amazon.nova-test-v1:0', `api_base: ${base}`],
  env: { AWS_ACCESS_KEY_ID: KEYS.accessKeyId, AWS_SECRET_ACCESS_KEY: KEYS.secretAccessKey, AWS_SESSION_TOKEN: '', AWS_REGION_NAME: KEYS.region },
});

test('bedrock: keys and region from the environment sign the requests, whole and streamed', T, async () => {
  const marker = gw.upstream.script(gw.marker('env'), [{ code: 'print(6 * 7)' }, (req, ctx) => ({ text: `Got ${/(\d+)/.exec(ctx.lastCodeOutput)?.[1]}.` })]);
  for (const stream of [false, true]) {
    const body = { model: NATIVE_MODEL, input: `${marker} compute`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS };
    const r = stream ? await gw.client.responses.stream(body).finalResponse() : await gw.client.responses.create(body);
    assert.equal(r.output_text, 'Got 42.');
  }
  const seen = checkNativeRequests(gw, dialect, marker);
  assert.equal(seen.length, 4);
  for (const req of seen) {
    assert.match(req.path, /^\/model\/amazon\.nova-test-v1%3A0\/converse(-stream)?$/);
    assert.match(req.headers.authorization, /Credential=AKIDFROMTHEENVIRONMENT\/\d{8}\/eu-west-3\/bedrock\/aws4_request/);
    assert.equal(req.headers['x-amz-security-token'], undefined);
  }
});
