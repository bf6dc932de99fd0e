// The OpenAI-compatible services LiteLLM knows by name (groq/, mistral/,
// deepseek/, together_ai/, openrouter/, fireworks_ai/, xai/, perplexity/,
// cerebras/): a config naming each starts and resolves to the provider's
// public base (as `corral serve --check` shows it), and with the base
// overridden to loopback a request arrives with the provider's usual key
// variable as its Bearer token. Also the retries of failed upstream
// requests (num_retries, router_settings.num_retries).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { promisify } from 'node:util';

import { CI_TOOL, exposeGateway, serverLines } from './gateway-helpers.mjs';
import { CORRAL, useServer } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

const T = { timeout: 120_000 };

/** Each provider, its public base, and the variable its key is read from. */
const PROVIDERS = [
  ['groq', 'https://api.groq.com/openai/v1', 'GROQ_API_KEY'],
  ['mistral', 'https://api.mistral.ai/v1', 'MISTRAL_API_KEY'],
  ['deepseek', 'https://api.deepseek.com/beta', 'DEEPSEEK_API_KEY'],
  ['together_ai', 'https://api.together.xyz/v1', 'TOGETHERAI_API_KEY'],
  ['openrouter', 'https://openrouter.ai/api/v1', 'OPENROUTER_API_KEY'],
  ['fireworks_ai', 'https://api.fireworks.ai/inference/v1', 'FIREWORKS_AI_API_KEY'],
  ['xai', 'https://api.x.ai/v1', 'XAI_API_KEY'],
  ['perplexity', 'https://api.perplexity.ai', 'PERPLEXITYAI_API_KEY'],
  ['cerebras', 'https://api.cerebras.ai/v1', 'CEREBRAS_API_KEY'],
];
const keyOf = (provider) => `key-of-${provider}`;
const ENV = Object.fromEntries(PROVIDERS.map(([p, , v]) => [v, keyOf(p)]));

const modelLines = (name, model, extra = []) => [`  - model_name: ${name}`, '    litellm_params:', `      model: ${model}`, ...extra.map((l) => `      ${l}`)];

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-providers-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
let upstream = null;

const ctx = useServer(async () => {
  upstream = await startUpstream();
  const config = path.join(dir, 'gateway.yaml');
  fs.writeFileSync(
    config,
    [
      'model_list:',
      ...PROVIDERS.flatMap(([p]) => modelLines(p, `${p}/mock-model`, [`api_base: ${upstream.url}`])),
      ...modelLines('retried', 'openai/mock-model', [`api_base: ${upstream.url}`, 'api_key: sk-r', 'upstream_api: chat_completions', 'num_retries: 2']),
      ...modelLines('router-retried', 'openai/mock-model', [`api_base: ${upstream.url}`, 'api_key: sk-r', 'upstream_api: chat_completions']),
      ...modelLines('not-retried', 'openai/mock-model', [`api_base: ${upstream.url}`, 'api_key: sk-r', 'upstream_api: chat_completions', 'num_retries: 0']),
      'router_settings:',
      '  routing_strategy: simple-shuffle',
      '  num_retries: 1',
      ...serverLines({ dataDir: path.join(dir, 'data') }),
    ].join('\n'),
  );
  return { config, gateway: true, env: ENV };
});
after(async () => upstream?.close());
const served = {};
exposeGateway(served, ctx);
const gw = () => served.client;
let seq = 0;
const marker = (name) => `{{${name}#${++seq}}}`;

test('serve --check shows each named provider at its public base, with its key variable', T, async () => {
  const config = path.join(dir, 'check.yaml');
  fs.writeFileSync(
    config,
    [
      'model_list:',
      ...PROVIDERS.flatMap(([p]) => modelLines(p, `${p}/some-model`)),
      // a LiteLLM config's native models, as users write them
      ...modelLines('claude', 'anthropic/claude-sonnet-4-5', ['api_key: os.environ/ANTHROPIC_API_KEY', 'rpm: 60']),
      ...modelLines('gemini', 'gemini/gemini-2.5-pro'),
      ...modelLines('bedrock', 'bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0', ['aws_region_name: eu-west-1']),
      'router_settings:',
      '  routing_strategy: usage-based-routing',
      'environment_variables:',
      '  SOME_VARIABLE: x',
      '',
    ].join('\n'),
  );
  const env = { ...process.env, ...ENV, ANTHROPIC_API_KEY: 'sk-ant-x', GEMINI_API_KEY: 'gem-x', AWS_ACCESS_KEY_ID: 'AKIDX', AWS_SECRET_ACCESS_KEY: 'secret-x' };
  for (const name of Object.keys(env)) if (/_API_BASE$/.test(name)) delete env[name];
  const { stdout } = await promisify(execFile)(CORRAL, ['serve', '--check', '--config', config], { env });
  for (const [p, base, variable] of PROVIDERS) {
    assert.ok(
      stdout.includes(`  ${p}: ${p}/some-model at ${base} (OpenAI Chat Completions; key from ${variable})\n`),
      `${p} in:\n${stdout}`,
    );
  }
  assert.ok(stdout.includes('  claude: anthropic/claude-sonnet-4-5 at https://api.anthropic.com (Anthropic Messages; key given)\n'), stdout);
  assert.ok(stdout.includes('  gemini: gemini/gemini-2.5-pro at https://generativelanguage.googleapis.com (Gemini generateContent; key from GEMINI_API_KEY)\n'), stdout);
  assert.ok(
    stdout.includes('  bedrock: bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0 at https://bedrock-runtime.eu-west-1.amazonaws.com (Bedrock Converse; AWS keys, region eu-west-1)\n'),
    stdout,
  );
  for (const key of [...Object.values(ENV), 'sk-ant-x', 'gem-x', 'AKIDX', 'secret-x']) assert.ok(!stdout.includes(key), `a key appears in the check: ${key}`);
});

for (const [provider, , variable] of PROVIDERS) {
  test(`${provider}/: a request arrives with ${variable} as its Bearer token`, T, async () => {
    const m = upstream.script(marker(provider), [{ code: 'print(6 * 7)' }, (req, c) => ({ text: `It is ${/\d+/.exec(c.lastCodeOutput)?.[0]}.` })]);
    const c = await gw().chat.completions.create({ model: provider, messages: [{ role: 'user', content: `${m} Compute.` }], tools: [CI_TOOL] });
    assert.equal(c.choices[0].message.content, 'It is 42.');
    const seen = upstream.requestsFor(m);
    assert.equal(seen.length, 2);
    for (const req of seen) {
      assert.equal(req.path, '/v1/chat/completions');
      assert.equal(req.headers.authorization, `Bearer ${keyOf(provider)}`);
      assert.equal(req.body.model, 'mock-model');
    }
    // and a request without the tool, proxied as it is
    const plain = upstream.script(marker(`${provider}-plain`), [{ text: 'Hi.' }]);
    await gw().chat.completions.create({ model: provider, messages: [{ role: 'user', content: `${plain} hi` }] });
    assert.equal(upstream.requestsFor(plain)[0].headers.authorization, `Bearer ${keyOf(provider)}`);
  });
}

/** A script whose first `failures` answers are `error`, then a text. */
function flaky(failures, error) {
  let n = 0;
  return [() => (n++ < failures ? error : { text: `answered after ${failures} failures` })];
}

test('num_retries: failed upstream requests are tried again, in the loop and when proxied', T, async () => {
  const m = upstream.script(marker('retry-loop'), flaky(2, { status: 503, error: { message: 'mock: overloaded', type: 'server_error' } }));
  const r = await gw().responses.create({ model: 'retried', input: `${m} hi`, tools: [CI_TOOL] });
  assert.equal(r.output_text, 'answered after 2 failures');
  assert.deepEqual(upstream.requestsFor(m).map((q) => q.status), [503, 503, 200]);

  const p = upstream.script(marker('retry-proxy'), flaky(1, { status: 429, error: { message: 'mock: slow down', type: 'rate_limit_error' }, headers: { 'retry-after': '0' } }));
  const c = await gw().chat.completions.create({ model: 'retried', messages: [{ role: 'user', content: `${p} hi` }] });
  assert.equal(c.choices[0].message.content, 'answered after 1 failures');
  assert.deepEqual(upstream.requestsFor(p).map((q) => q.status), [429, 200]);

  const s = upstream.script(marker('retry-stream'), flaky(1, { status: 500, error: { message: 'mock: oops', type: 'server_error' } }));
  const streamed = await gw().responses.stream({ model: 'retried', input: `${s} hi`, tools: [CI_TOOL] }).finalResponse();
  assert.equal(streamed.output_text, 'answered after 1 failures');
});

test('retries stop at the limit, keep the last error, and a 400 is never retried', T, async () => {
  const m = upstream.script(marker('retry-limit'), flaky(5, { status: 502, error: { message: 'mock: bad gateway', type: 'server_error' } }));
  await assert.rejects(gw().responses.create({ model: 'retried', input: `${m} hi`, tools: [CI_TOOL] }), (err) => {
    assert.equal(err.status, 502);
    assert.match(err.message, /mock: bad gateway/);
    return true;
  });
  assert.equal(upstream.requestsFor(m).length, 3, 'one request and two retries');

  const bad = upstream.script(marker('retry-400'), flaky(5, { status: 400, error: { message: 'mock: bad request' } }));
  await assert.rejects(gw().chat.completions.create({ model: 'retried', messages: [{ role: 'user', content: `${bad} hi` }] }), { status: 400 });
  assert.equal(upstream.requestsFor(bad).length, 1);

  const none = upstream.script(marker('retry-none'), flaky(1, { status: 503, error: { message: 'mock: overloaded' } }));
  await assert.rejects(gw().chat.completions.create({ model: 'not-retried', messages: [{ role: 'user', content: `${none} hi` }] }), { status: 503 });
  assert.equal(upstream.requestsFor(none).length, 1);

  // an upstream that asks for more than a minute is not waited for: its error stands
  const later = upstream.script(marker('retry-later'), flaky(1, { status: 429, error: { message: 'mock: come back in an hour' }, headers: { 'retry-after': '3600' } }));
  await assert.rejects(gw().chat.completions.create({ model: 'retried', messages: [{ role: 'user', content: `${later} hi` }] }), (err) => {
    assert.equal(err.status, 429);
    assert.match(err.message, /come back in an hour/);
    return true;
  });
  assert.equal(upstream.requestsFor(later).length, 1);

  const router = upstream.script(marker('retry-router'), flaky(1, { status: 503, error: { message: 'mock: overloaded' } }));
  const c = await gw().chat.completions.create({ model: 'router-retried', messages: [{ role: 'user', content: `${router} hi` }] });
  assert.equal(c.choices[0].message.content, 'answered after 1 failures', 'router_settings.num_retries applies');
});
