// Containers' network_policy (OpenAI's Containers API and the
// code_interpreter tool's auto container), through the official `openai`
// SDK against `corral serve`: echoed, kept across a restart, refused in
// OpenAI's error shape when malformed or asking for domain_secrets; and,
// with the local provider, what the code inside finds: with the network off
// a connection fails at once (ENETUNREACH), with internet or a policy
// 192.0.2.1 (reserved: corral always refuses it) is refused
// (ECONNREFUSED). No traffic leaves the machine.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import { PROVIDER, codeToolOf, useGateway } from './gateway-helpers.mjs';

const LOCAL = PROVIDER === 'local';
// local: the interception's tool has internet (the server allows every
// mode); a container's network_policy narrows it.
const gw = useGateway({
  topLines: LOCAL
    ? [
        'network:',
        '  modes: [off, internet, policy]',
        'sandbox_tools:',
        '  - sandbox_tool_name: net',
        '    litellm_params:',
        '      sandbox_provider: local',
        '      allow_internet_access: true',
        'litellm_settings:',
        '  code_interpreter_interception_params:',
        '    sandbox_tool_name: net',
      ]
    : [],
});
const T = { timeout: 120_000 };
const MODEL = 'mock-chat';

const PROBE = [
  'import errno, socket',
  'try:',
  '    socket.create_connection(("192.0.2.1", 80), timeout=5)',
  '    print("connected")',
  'except OSError as e:',
  '    print(type(e).__name__, errno.errorcode.get(e.errno))',
].join('\n');
const UNREACHABLE = 'OSError ENETUNREACH';
const REFUSED = 'ConnectionRefusedError ECONNREFUSED';

const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? `(no stdout: ${out})`;

/** An OpenAI.BadRequestError (400) with that param, from `promise`. */
async function rejects400(promise, param, code = null) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, `expected a 400, got ${e}`);
    assert.equal(e.status, 400);
    assert.equal(e.error?.type, 'invalid_request_error', JSON.stringify(e.error));
    assert.equal(e.param, param, JSON.stringify(e.error));
    if (code) assert.equal(e.code, code, JSON.stringify(e.error));
    assert.ok(typeof e.error?.message === 'string' && e.error.message.length, 'a message');
    return true;
  });
}

/** Runs PROBE in `tool`'s container; what it printed, and the code tool's description. */
async function probe(tool) {
  const m = gw.marker('net');
  gw.upstream.script(m, [{ code: PROBE }, (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) })]);
  const r = await gw.client.responses.create({ model: MODEL, input: `${m} probe`, tools: [tool] });
  const call = r.output.find((i) => i.type === 'code_interpreter_call');
  assert.equal(call?.status, 'completed', JSON.stringify(r.output));
  const seen = gw.upstream.requests.filter((q) => q.marker === m);
  return { printed: r.output_text, description: codeToolOf(seen[0])?.description ?? '' };
}

let keptDisabled = null, keptAllow = null;

test('POST /v1/containers: network_policy echoed by create, retrieve and list', T, async () => {
  const c = gw.client;
  const off = await c.containers.create({ name: 'off', network_policy: { type: 'disabled' } });
  assert.deepEqual(off.network_policy, { type: 'disabled' });
  const allow = await c.containers.create({
    name: 'allow',
    network_policy: { type: 'allowlist', allowed_domains: ['pypi.org', '*.pythonhosted.org'] },
  });
  assert.deepEqual(allow.network_policy, { type: 'allowlist', allowed_domains: ['pypi.org', '*.pythonhosted.org'] });
  const plain = await c.containers.create({ name: 'plain' });
  assert.equal(plain.network_policy, undefined);
  assert.deepEqual((await c.containers.retrieve(off.id)).network_policy, { type: 'disabled' });
  assert.deepEqual((await c.containers.retrieve(allow.id)).network_policy, allow.network_policy);
  const listed = [];
  for await (const x of await c.containers.list()) listed.push(x);
  assert.deepEqual(listed.find((x) => x.id === allow.id)?.network_policy, allow.network_policy);
  keptDisabled = off.id;
  keptAllow = allow.id;
});

test('network_policy: domain_secrets is refused (no TLS interception)', T, async () => {
  const policy = {
    type: 'allowlist',
    allowed_domains: ['api.example.com'],
    domain_secrets: [{ domain: 'api.example.com', name: 'API_KEY', value: 'secret' }],
  };
  await rejects400(gw.client.containers.create({ name: 's', network_policy: policy }),
    'network_policy.domain_secrets', 'unsupported_parameter');
  await rejects400(
    gw.client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'code_interpreter', container: { type: 'auto', network_policy: policy } }] }),
    'tools[0].container.network_policy.domain_secrets', 'unsupported_parameter');
});

test('network_policy: bad shapes are 400s naming the parameter', T, async () => {
  const bad = [
    ['disabled', 'network_policy'],
    [{}, 'network_policy.type'],
    [{ type: 'open' }, 'network_policy.type'],
    [{ type: 'allowlist' }, 'network_policy.allowed_domains'],
    [{ type: 'allowlist', allowed_domains: [] }, 'network_policy.allowed_domains'],
    [{ type: 'allowlist', allowed_domains: 'pypi.org' }, 'network_policy.allowed_domains'],
    [{ type: 'allowlist', allowed_domains: ['pypi.org', 'exa mple.com'] }, 'network_policy.allowed_domains[1]'],
    [{ type: 'allowlist', allowed_domains: ['192.0.2.1'] }, 'network_policy.allowed_domains[0]'],
    [{ type: 'allowlist', allowed_domains: ['10.0.0.0/8'] }, 'network_policy.allowed_domains[0]'],
    [{ type: 'allowlist', allowed_domains: ['*'] }, 'network_policy.allowed_domains[0]'],
    [{ type: 'allowlist', allowed_domains: [42] }, 'network_policy.allowed_domains[0]'],
  ];
  for (const [policy, param] of bad) {
    await rejects400(gw.client.containers.create({ name: 'bad', network_policy: policy }), param);
  }
  await rejects400(
    gw.client.responses.create({ model: MODEL, input: 'x', tools: [{ type: 'code_interpreter', container: { type: 'auto', network_policy: { type: 'nope' } } }] }),
    'tools[0].container.network_policy.type', 'invalid_value');
});

test('the sandbox: the tool\'s network, narrowed by the container\'s', { ...T, skip: !LOCAL && 'local provider only' }, async () => {
  // no network_policy: the tool's internet (192.0.2.1 is refused, never reached)
  let r = await probe({ type: 'code_interpreter', container: { type: 'auto' } });
  assert.equal(r.printed, REFUSED);
  assert.match(r.description, /It has internet access/);
  // disabled: off
  r = await probe({ type: 'code_interpreter', container: { type: 'auto', network_policy: { type: 'disabled' } } });
  assert.equal(r.printed, UNREACHABLE);
  assert.match(r.description, /There is no internet access\./);
  // an allowlist: a policy of those names
  r = await probe({ type: 'code_interpreter', container: { type: 'auto', network_policy: { type: 'allowlist', allowed_domains: ['pypi.org', '*.pythonhosted.org'] } } });
  assert.equal(r.printed, REFUSED);
  assert.match(r.description, /reaches only these hosts.*pypi\.org, \*\.pythonhosted\.org\./);
  // an explicit container keeps its own
  r = await probe({ type: 'code_interpreter', container: keptDisabled });
  assert.equal(r.printed, UNREACHABLE);
  assert.match(r.description, /There is no internet access\./);
});

test('network_policy survives a restart, and still applies', T, async () => {
  await gw.restart();
  assert.deepEqual((await gw.client.containers.retrieve(keptDisabled)).network_policy, { type: 'disabled' });
  assert.deepEqual((await gw.client.containers.retrieve(keptAllow)).network_policy,
    { type: 'allowlist', allowed_domains: ['pypi.org', '*.pythonhosted.org'] });
  if (!LOCAL) return;
  const r = await probe({ type: 'code_interpreter', container: keptDisabled });
  assert.equal(r.printed, UNREACHABLE);
});
