// Vertex AI as a native upstream (vertex_ai/ models): the shared scenarios
// (native-scenarios.mjs) through the generateContent dialect
// (upstream-gemini.mjs), with a service account's key the test makes: the
// gateway signs a JWT with it, exchanges it at the mock's token endpoint
// (which verifies it) once, and sends the access token with every request;
// a key the endpoint refuses gives the client a clear error.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { NATIVE_MODEL, nativeScenarioTests, useNativeGateway } from './native-scenarios.mjs';
import { serviceAccount, vertexDialect } from './upstream-gemini.mjs';

const T = { timeout: 120_000 };
const account = serviceAccount();
const stranger = serviceAccount(); // a key the token endpoint does not know
const keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-vertex-'));
after(() => fs.rmSync(keyDir, { recursive: true, force: true }));
const badKeyFile = path.join(keyDir, 'bad-key.json');
const secondKeyFile = path.join(keyDir, 'second-key.json'); // the same account, another key text: a token of its own

const dialect = vertexDialect({ project: 'proj-test', location: 'us-central1', clientEmail: account.email, keyId: account.keyId, publicKey: account.publicKey });
const gw = useNativeGateway({
  dialect,
  modelLines: (base, dir) => {
    const keyFile = path.join(dir, 'service-account.json');
    fs.writeFileSync(keyFile, JSON.stringify(account.keyJson(base)));
    fs.writeFileSync(badKeyFile, JSON.stringify({ ...stranger.keyJson(base), client_email: account.email, private_key_id: account.keyId }));
    fs.writeFileSync(secondKeyFile, JSON.stringify({ ...account.keyJson(base), universe_domain: 'googleapis.com' }));
    return ['model: vertex_ai/gemini-test', `api_base: ${base}`, 'vertex_project: proj-test', 'vertex_location: us-central1', `vertex_credentials: ${keyFile}`];
  },
  topLines: (base) => [
    '  - model_name: vertex-bad-key',
    '    litellm_params:',
    '      model: vertex_ai/gemini-test',
    '      api_base: http://127.0.0.1:9/unused',
    '      vertex_project: proj-test',
    `      vertex_credentials: ${badKeyFile}`,
    '  - model_name: vertex-second-key',
    '    litellm_params:',
    '      model: vertex_ai/gemini-test',
    `      api_base: ${base}`,
    '      vertex_project: proj-test',
    `      vertex_credentials: ${secondKeyFile}`,
  ],
});

nativeScenarioTests(gw, { dialect });

test('vertex: the access token is exchanged once and sent as a Bearer token to the project\'s path', T, async () => {
  const marker = gw.upstream.script(gw.marker('token'), [{ text: 'ok' }]);
  for (let i = 0; i < 3; i++) {
    const c = await gw.client.chat.completions.create({ model: NATIVE_MODEL, messages: [{ role: 'user', content: `${marker} hi` }] });
    assert.equal(c.choices[0].message.content, 'ok');
  }
  assert.deepEqual(dialect.tokenRequests, [{ ok: true }], 'one exchange for every request of the file');
  const seen = gw.upstream.requestsFor(marker);
  assert.equal(seen.length, 3);
  for (const r of seen) {
    assert.equal(r.path, '/v1/projects/proj-test/locations/us-central1/publishers/google/models/gemini-test:generateContent');
    assert.match(r.headers.authorization, /^Bearer ya29\.mock-/);
    assert.equal(r.headers['x-goog-api-key'], undefined);
  }
});

test('vertex: a key the token endpoint refuses gives the client its error', T, async () => {
  const exchanges = dialect.tokenRequests.length;
  for (const stream of [false, true]) {
    const body = { model: 'vertex-bad-key', messages: [{ role: 'user', content: 'hi' }] };
    await assert.rejects(stream ? gw.client.chat.completions.stream(body).finalChatCompletion() : gw.client.chat.completions.create(body), (err) => {
      assert.match(err.message, /token endpoint .*400: invalid_grant: Invalid JWT Signature\./);
      return true;
    });
  }
  assert.deepEqual(dialect.tokenRequests.slice(exchanges).map((r) => r.ok), [false, false], 'a refused key is not cached');
});

test('vertex: requests that need a first token together wait for one exchange', T, async () => {
  const marker = gw.upstream.script(gw.marker('together'), [{ text: 'ok' }]);
  const exchanges = dialect.tokenRequests.length;
  const answers = await Promise.all(
    Array.from({ length: 6 }, () => gw.client.chat.completions.create({ model: 'vertex-second-key', messages: [{ role: 'user', content: `${marker} hi` }] })),
  );
  for (const c of answers) assert.equal(c.choices[0].message.content, 'ok');
  assert.deepEqual(dialect.tokenRequests.slice(exchanges), [{ ok: true }], 'one exchange for the six requests');
});
