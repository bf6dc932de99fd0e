// Per-sandbox network egress through the official SDKs: E2B's
// allowInternetAccess, network {allowOut, denyOut} and updateNetwork
// (`@e2b/code-interpreter`, `e2b`), OpenSandbox's networkPolicy and egress
// API (getEgressPolicy, patchEgressRules, deleteEgressRules of
// `@alibaba-group/opensandbox`), against two servers: one without a
// `network` section in its config (only `off` allowed), one allowing
// `network: {modes: [off, internet, policy]}`.
//
// From inside a sandbox only what needs no test host is checked: a
// connection to 192.0.2.1:80 (TEST-NET-1, reserved: corral never lets it
// through, so nothing leaves the machine) fails at once with ENETUNREACH
// when the sandbox has no network, and is refused (ECONNREFUSED) at once when
// it has one. No other address is contacted.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { Sandbox as OsbSandbox, SandboxApiException } from '@alibaba-group/opensandbox';
import { Sandbox } from '@e2b/code-interpreter';
import { ALL_TRAFFIC, SandboxError, SandboxNotFoundError } from 'e2b';

import { killAfter, startServer, useServer } from './harness.mjs';

// The default server is the harness's (E2B_API_URL etc. point at it); the
// open one is started beside it and stopped before the host is checked.
let open = null;
let configDir = null;
const ctx = useServer(
  async () => {
    configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-network-test-'));
    const config = path.join(configDir, 'corral.yaml');
    fs.writeFileSync(config, 'network:\n  modes: [off, internet, policy]\n');
    open = await startServer({ config, gateway: false });
    return { gateway: false };
  },
  {
    afterStop: async () => {
      try {
        await open?.stop();
      } finally {
        if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
      }
    },
  },
);

const T = { timeout: 120_000 };
const UNKNOWN_ID = 'i0000000000000000000';
const OSB_IMAGE = 'python:3.12';
const LISTED = { allowOut: ['example.com', '*.example.org', '198.51.100.0/24'], denyOut: [ALL_TRAFFIC] };

/** Prints "probe: ERRNO-NAME QUICK" (QUICK: True if it failed within 3 s). */
const PROBE = `import errno, socket, time
t = time.monotonic()
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5).close()
    print("probe: connected")
except OSError as e:
    print("probe:", errno.errorcode.get(e.errno, e.errno), time.monotonic() - t < 3)
`;

/** The probe's result from its output: [errno name, 'True' if quick]. */
function probeResult(out, what) {
  const m = /probe: (\S+)(?: (\S+))?/.exec(out);
  assert.ok(m, `${what}: no probe line in the output: ${JSON.stringify(out)}`);
  return m[2] === undefined ? [m[1]] : [m[1], m[2]];
}

/** Runs the probe in an E2B sandbox through runCode. */
async function e2bProbe(sbx) {
  const ex = await sbx.runCode(PROBE, { timeoutMs: 30_000 });
  assert.equal(ex.error, undefined, `the probe raised: ${ex.error?.name}: ${ex.error?.value}`);
  return probeResult(ex.logs.stdout.join(''), `sandbox ${sbx.sandboxId}`);
}

/** Runs the probe in an OpenSandbox sandbox: written with files.writeFiles, run with commands.run. */
async function osbProbe(sbx) {
  await sbx.files.writeFiles([{ path: '/tmp/probe.py', data: PROBE }]);
  const ex = await sbx.commands.run('python3 /tmp/probe.py');
  assert.equal(ex.exitCode, 0, `the probe failed: ${JSON.stringify(ex.logs)}`);
  return probeResult(ex.logs.stdout.map((m) => m.text).join('\n'), `sandbox ${sbx.id}`);
}

/** Sandbox.create(opts) of @e2b/code-interpreter, fn(sandbox), then kill whatever happens. */
async function withE2B(opts, fn) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts });
  await killAfter(sbx, fn, { checkKill: (killed) => assert.equal(killed, true, 'kill() found the sandbox') });
}

/** The OpenSandbox SDK's connection to `server`. */
function osbConnection(server) {
  return { domain: new URL(server.osbUrl).host, protocol: 'http', apiKey: server.apiKey, requestTimeoutSeconds: 30 };
}

function osbCreate(server, opts = {}) {
  return OsbSandbox.create({ connectionConfig: osbConnection(server), image: OSB_IMAGE, timeoutSeconds: 300, ...opts });
}

/** OpenSandbox's Sandbox.create(...), fn(sandbox), then kill and close whatever happens. */
async function withOsb(server, opts, fn) {
  const sbx = await osbCreate(server, opts);
  await killAfter(sbx, fn, { afterKill: () => sbx.close() });
}

/** Asserts that `promise` rejects with the E2B SDK's SandboxError of this status, its message holding `words`. */
async function rejectsE2B(promise, status, words, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxError, `${what}: expected a SandboxError, got ${err?.stack ?? err}`);
    assert.equal(err.statusCode, status, `${what}: HTTP status (${err.message})`);
    for (const w of words) assert.ok(err.message.includes(w), `${what}: the message ${JSON.stringify(err.message)} names ${JSON.stringify(w)}`);
    return true;
  });
}

/** Asserts that `promise` rejects with the OpenSandbox SDK's SandboxApiException of this status (and code). */
async function rejectsOsb(promise, status, code, words, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: expected a SandboxApiException, got ${err?.stack ?? err}`);
    const body = JSON.stringify(err.rawBody);
    assert.equal(err.statusCode, status, `${what}: HTTP status (${err.message}; body ${body})`);
    if (code) assert.equal(err.error?.code, code, `${what}: error code (body ${body})`);
    for (const w of words) assert.ok(err.message.includes(w), `${what}: the message ${JSON.stringify(err.message)} names ${JSON.stringify(w)}`);
    return true;
  });
}

/** getInfo's network fields. */
async function netInfo(sbx, opts) {
  const info = opts ? await Sandbox.getInfo(sbx.sandboxId, opts) : await sbx.getInfo();
  return { allowInternetAccess: info.allowInternetAccess, allowOut: info.network?.allowOut, denyOut: info.network?.denyOut, network: info.network };
}

/* ------------------------------------------------------------------------ */
/* A server without a network section: only `off`                           */

// The SDK's defaults: no allowInternetAccess, no network in the request.
test('default server: Sandbox.create() with the SDK defaults works and has no network', T, () =>
  withE2B({}, async (sbx) => {
    const info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, false, 'getInfo: no internet');
    assert.equal(info.network, undefined, 'getInfo: no network rules');
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);
  }));

// What E2B documents as the default (and the Python SDK sends).
test('default server: allowInternetAccess true quietly gives no network', T, () =>
  withE2B({ allowInternetAccess: true }, async (sbx) => {
    assert.equal((await netInfo(sbx)).allowInternetAccess, false);
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);
  }));

test('default server: an allowOut rule is refused with a 400 the SDK surfaces', T, async () => {
  await rejectsE2B(
    Sandbox.create({ network: { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] }, timeoutMs: 60_000 }),
    400,
    ['network mode policy is not allowed by this server'],
    'create with allowOut',
  );
});

test('default server: denying ALL_TRAFFIC is no network, accepted; updateNetwork may not open it', T, () =>
  withE2B({ network: { denyOut: [ALL_TRAFFIC] } }, async (sbx) => {
    const info = await netInfo(sbx);
    assert.deepEqual([info.allowInternetAccess, info.allowOut, info.denyOut], [false, [], ['0.0.0.0/0']]);
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);

    await rejectsE2B(
      sbx.updateNetwork({ allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] }),
      400,
      ['not allowed by this server'],
      'updateNetwork with allowOut',
    );
    const unchanged = await netInfo(sbx);
    assert.deepEqual([unchanged.allowOut, unchanged.denyOut], [[], ['0.0.0.0/0']], 'a refused update changes nothing');

    // An update without rules asks for the internet: quietly no network here.
    await sbx.updateNetwork({});
    const cleared = await netInfo(sbx);
    assert.equal(cleared.allowInternetAccess, false);
    assert.equal(cleared.network, undefined, 'the rules are cleared');
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);
  }));

test('default server: an OpenSandbox networkPolicy allowing a name is a 403 the SDK surfaces', T, async () => {
  await rejectsOsb(
    osbCreate(ctx.server, { networkPolicy: { defaultAction: 'deny', egress: [{ action: 'allow', target: 'example.com' }] } }),
    403,
    'SANDBOX::NETWORK_NOT_ALLOWED',
    ['not allowed by this server'],
    'create with an allow rule',
  );
});

test('default server: OpenSandbox deny-all policy works; patchEgressRules may not open it', T, () =>
  withOsb(ctx.server, { networkPolicy: { defaultAction: 'deny', egress: [] } }, async (sbx) => {
    assert.deepEqual(await sbx.getEgressPolicy(), { defaultAction: 'deny', egress: [] });
    assert.deepEqual(await osbProbe(sbx), ['ENETUNREACH', 'True']);
    await rejectsOsb(
      sbx.patchEgressRules([{ action: 'allow', target: 'example.com' }]),
      403,
      null,
      ['not allowed by this server'],
      'patchEgressRules with an allow rule',
    );
    assert.deepEqual(await sbx.getEgressPolicy(), { defaultAction: 'deny', egress: [] }, 'a refused patch changes nothing');
  }));

/* ------------------------------------------------------------------------ */
/* A server allowing every mode                                             */

test('open server: allowInternetAccess true is the internet (192.0.2.1 refused by corral)', T, () =>
  withE2B({ ...open.sdkOpts(), allowInternetAccess: true }, async (sbx) => {
    const info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, true);
    assert.equal(info.network, undefined);
    assert.deepEqual(await e2bProbe(sbx), ['ECONNREFUSED', 'True']);
  }));

// The JS SDK sends no allow_internet_access unless told (the Python SDK
// sends true): such a create names no network and gets its template's,
// none for the default template, even where the server allows the internet.
test('open server: Sandbox.create() with the SDK defaults gets the template\'s network: none', T, () =>
  withE2B(open.sdkOpts(), async (sbx) => {
    const info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, false);
    assert.equal(info.network, undefined);
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);
  }));

test('open server: allowInternetAccess false is no network', T, () =>
  withE2B({ ...open.sdkOpts(), allowInternetAccess: false }, async (sbx) => {
    assert.equal((await netInfo(sbx)).allowInternetAccess, false);
    assert.deepEqual(await e2bProbe(sbx), ['ENETUNREACH', 'True']);
  }));

test('open server: allowOut/denyOut is a policy; updateNetwork changes it live', T, () =>
  withE2B({ ...open.sdkOpts(), network: LISTED }, async (sbx) => {
    let info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, false, 'ALL_TRAFFIC denied: what no rule names is not reachable');
    assert.deepEqual([info.allowOut, info.denyOut], [LISTED.allowOut, ['0.0.0.0/0']]);
    // The same, read with the static getInfo and explicit connection options.
    assert.deepEqual((await Sandbox.getInfo(sbx.sandboxId, open.sdkOpts())).network?.allowOut, LISTED.allowOut);
    assert.deepEqual(await e2bProbe(sbx), ['ECONNREFUSED', 'True']);

    // Deny all: the rules go, the plumbing stays.
    await sbx.updateNetwork({ denyOut: [ALL_TRAFFIC] });
    info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, false);
    assert.deepEqual([info.allowOut, info.denyOut], [[], ['0.0.0.0/0']]);
    assert.ok(['ECONNREFUSED', 'ENETUNREACH'].includes((await e2bProbe(sbx))[0]), 'deny-all reaches nothing');

    // The static form, with the SDK's selector callback.
    await Sandbox.updateNetwork(
      sbx.sandboxId,
      { allowOut: ['example.com'], denyOut: ({ allTraffic }) => [allTraffic] },
      open.sdkOpts(),
    );
    info = await netInfo(sbx);
    assert.deepEqual([info.allowInternetAccess, info.allowOut, info.denyOut], [false, ['example.com'], ['0.0.0.0/0']]);
    assert.deepEqual(await e2bProbe(sbx), ['ECONNREFUSED', 'True']);

    // Omitted fields are cleared: the internet.
    await sbx.updateNetwork({});
    info = await netInfo(sbx);
    assert.equal(info.allowInternetAccess, true);
    assert.equal(info.network, undefined);
    assert.deepEqual(await e2bProbe(sbx), ['ECONNREFUSED', 'True']);

    // And off.
    await sbx.updateNetwork({ allowInternetAccess: false });
    assert.equal((await netInfo(sbx)).allowInternetAccess, false);
    assert.ok(['ECONNREFUSED', 'ENETUNREACH'].includes((await e2bProbe(sbx))[0]), 'off reaches nothing');
  }));

test('open server: bad network options are refused with a 400 naming them; bad updates change nothing', T, async () => {
  await rejectsE2B(
    Sandbox.create({ ...open.sdkOpts(), network: { maskRequestHost: '${PORT}-x.example.com' }, timeoutMs: 60_000 }),
    400,
    ["'network.maskRequestHost' is not supported by corral"],
    'create with maskRequestHost',
  );
  await rejectsE2B(
    Sandbox.create({
      ...open.sdkOpts(),
      network: { allowOut: ['api.example.com'], rules: { 'api.example.com': [{ transform: { headers: { A: 'b' } } }] } },
      timeoutMs: 60_000,
    }),
    400,
    ["'network.rules'", 'not supported by corral'],
    'create with transform rules',
  );
  await rejectsE2B(
    Sandbox.create({ ...open.sdkOpts(), network: { denyOut: ['example.com'] }, timeoutMs: 60_000 }),
    400,
    ['invalid denied CIDR example.com'],
    'create with a name in denyOut',
  );
  await assert.rejects(
    Sandbox.updateNetwork(UNKNOWN_ID, { allowOut: ['example.com'] }, open.sdkOpts()),
    SandboxNotFoundError,
    'updateNetwork of an unknown sandbox',
  );

  await withE2B({ ...open.sdkOpts(), network: { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] } }, async (sbx) => {
    await rejectsE2B(sbx.updateNetwork({ denyOut: ['example.com'] }), 400, ['invalid denied CIDR example.com'], 'update with a name in denyOut');
    await rejectsE2B(sbx.updateNetwork({ allowOut: ['bad..name'] }), 400, ['bad..name'], 'update with a bad name');
    await rejectsE2B(
      sbx.updateNetwork({ egressProxy: { address: 'proxy.example.com:1080' } }),
      400,
      ["'egressProxy' is not supported by corral"],
      'update with egressProxy',
    );
    const info = await netInfo(sbx);
    assert.deepEqual([info.allowInternetAccess, info.allowOut, info.denyOut], [false, ['example.com'], ['0.0.0.0/0']], 'unchanged');
  });
});

test('open server: an OpenSandbox networkPolicy is enforced, read and changed through the egress API', T, () => {
  const given = { defaultAction: 'deny', egress: [{ action: 'allow', target: 'example.com' }] };
  return withOsb(open, { networkPolicy: given }, async (sbx) => {
    assert.deepEqual(await sbx.getEgressPolicy(), given);
    assert.deepEqual(await osbProbe(sbx), ['ECONNREFUSED', 'True']);

    // PATCH: the new rules first (the first of a target wins), the others kept.
    await sbx.patchEgressRules([
      { action: 'allow', target: '*.example.org' },
      { action: 'deny', target: 'example.com' },
      { action: 'allow', target: 'example.com' },
    ]);
    assert.deepEqual(await sbx.getEgressPolicy(), {
      defaultAction: 'deny',
      egress: [
        { action: 'allow', target: '*.example.org' },
        { action: 'deny', target: 'example.com' },
      ],
    });
    // DELETE by target; an absent one is ignored.
    await sbx.deleteEgressRules(['example.com', 'not-there.example']);
    assert.deepEqual(await sbx.getEgressPolicy(), { defaultAction: 'deny', egress: [{ action: 'allow', target: '*.example.org' }] });
    assert.deepEqual(await osbProbe(sbx), ['ECONNREFUSED', 'True']);

    // A bad patch is refused and changes nothing.
    await rejectsOsb(
      sbx.patchEgressRules([{ action: 'allow', target: 'bad target' }]),
      400,
      'INVALID_POLICY',
      ['bad target'],
      'patchEgressRules with a bad target',
    );
    assert.deepEqual((await sbx.getEgressPolicy()).egress, [{ action: 'allow', target: '*.example.org' }]);
  });
});

test('open server: an OpenSandbox sandbox without a policy has no network until a rule is patched in', T, () =>
  withOsb(open, {}, async (sbx) => {
    assert.deepEqual(await sbx.getEgressPolicy(), { defaultAction: 'deny', egress: [] });
    assert.deepEqual(await osbProbe(sbx), ['ENETUNREACH', 'True']);
    await sbx.patchEgressRules([{ action: 'allow', target: 'example.com' }]);
    assert.deepEqual(await sbx.getEgressPolicy(), { defaultAction: 'deny', egress: [{ action: 'allow', target: 'example.com' }] });
    assert.deepEqual(await osbProbe(sbx), ['ECONNREFUSED', 'True']);
  }));
