// E2B's template API through the official SDK's `Template`: a build from
// Debian packages with its log streamed, its status, a failing step's output
// in the build's error, the images corral refuses, a key's templates kept
// from other keys, and a sandbox on the built template (docs/e2b.md,
// "Templates"). The store is shared with the other suites
// (CORRAL_TEMPLATE_DIR=/var/tmp/corral-test-templates), so that the base
// layer and the apt step are built once and taken from the step cache after.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { Sandbox as OsbSandbox, SandboxApiException } from '@alibaba-group/opensandbox';
import { BuildError, NotFoundError, Sandbox, Template, waitForFile } from 'e2b';

import { killAfter, randomApiKey, startServer, useServer } from './harness.mjs';

const STORE = '/var/tmp/corral-test-templates';
const KEY_A = randomApiKey();
const KEY_B = randomApiKey();
const KEY_C = randomApiKey(); // the per-key cap's
// The test's names are taken out of the shared store again, whatever passed
// (a hook registered before the server's, so that it runs while it is up).
after(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  for (const name of [ALIAS, FAILING, REBUILT, STARTED, LONG])
    await fetch(`${ctx.server.url}/templates/${name}`, { method: 'DELETE', headers: { 'X-API-Key': KEY_A } });
});
// every key builds (--template-builds all): the tests are of a key's own templates
const ctx = useServer({ apiKeys: [KEY_A, KEY_B, KEY_C], args: ['--template-builds', 'all'], env: { CORRAL_TEMPLATE_DIR: STORE } });

const T = { timeout: 600_000 }; // the first build of the store makes the base with mmdebstrap
const RUN = crypto.randomBytes(4).toString('hex');
const ALIAS = `e2b-test-${RUN}`;
const FAILING = `e2b-test-fail-${RUN}`;
const REBUILT = `e2b-test-rebuilt-${RUN}`;
const STARTED = `e2b-test-started-${RUN}`;
const LONG = `e2b-test-long-${RUN}`;
const GREETING = `hello from ${RUN}\n`;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-e2b-template-'));
fs.writeFileSync(path.join(dir, 'greeting.txt'), GREETING);

const asB = () => ({ ...ctx.server.sdkOpts(), apiKey: KEY_B });

/** The template every test of the file builds on (built once, by the first). */
function tools() {
  return Template({ fileContextPath: dir })
    .fromDebianImage('bookworm')
    .aptInstall('jq')
    .copy('greeting.txt', '/opt/app/')
    .copy('greeting.txt', '/home/user/')
    .setEnvs({ GREETING_MODE: 'test' })
    .setWorkdir('/home/user');
}

let built = null; // what Template.build answered
let corralId = null; // corral's build id of it, from its log

test('Template.build builds from Debian packages and streams the build log', T, async () => {
  const logs = [];
  built = await Template.build(tools(), ALIAS, { tags: ['default', 'v1'], onBuildLogs: (entry) => logs.push(entry) });
  assert.equal(built.templateId, ALIAS);
  assert.equal(typeof built.buildId, 'string');
  const lines = logs.map((entry) => entry.message);
  assert.ok(
    lines.some((line) => /\bapt\b.*\bjq\b/.test(line)),
    `no log line of the apt step:\n${lines.join('\n')}`,
  );
  assert.ok(lines.some((line) => /^Template ready/.test(line)), lines.join('\n'));
  corralId = lines.map((line) => /^Template ready \(corral build ([0-9a-f]{16})\)/.exec(line)?.[1]).find(Boolean);
  assert.ok(lines.includes("Uploaded 'greeting.txt'") || lines.includes("Skipping upload of 'greeting.txt', already cached"));

  assert.equal(await Template.exists(ALIAS), true);
  const status = await Template.getBuildStatus(built);
  assert.equal(status.status, 'ready');
  assert.equal(status.reason, undefined);
  const read = []; // every entry of the status, a page at a time, as the SDK reads them
  for (let page = status; page.logEntries.length; ) {
    read.push(...page.logEntries.map((entry) => entry.message));
    page = await Template.getBuildStatus(built, { logsOffset: read.length });
  }
  let at = 0; // the status's entries are the lines the build streamed, in order
  for (const line of lines) if (line === read[at]) at++;
  assert.equal(at, read.length, `the status's log is not what was streamed:\n${read.join('\n')}`);

  const tags = (await Template.getTags(ALIAS)).map((t) => t.tag).sort();
  assert.deepEqual(tags, ['default', 'v1']);
});

test('a failing step fails the build with what it printed', T, async () => {
  const logs = [];
  const failing = Template().fromDebianImage('bookworm').runCmd(`echo "marker ${RUN}: about to fail"; exit 3`);
  await assert.rejects(Template.build(failing, FAILING, { onBuildLogs: (entry) => logs.push(entry) }), (err) => {
    assert.ok(err instanceof BuildError, `${err.name}: ${err.message}`);
    assert.match(err.message, new RegExp(`marker ${RUN}: about to fail`));
    return true;
  });
  assert.ok(
    logs.some((entry) => entry.level === 'error'),
    `no error line in the log:\n${logs.map(String).join('\n')}`,
  );
  assert.equal(await Template.exists(FAILING), false, 'a failed build names nothing');
});

test('images corral cannot build are refused, saying what to use instead', T, async () => {
  for (const template of [
    Template().fromImage('ubuntu:22.04'),
    Template().fromNodeImage('20'),
    Template().fromPythonImage('3.12'),
    Template().fromImage('registry.example.com/team/debian:bookworm', { username: 'u', password: 'p' }),
  ]) {
    await assert.rejects(Template.build(template, `e2b-test-refused-${RUN}`), (err) => {
      assert.ok(err instanceof BuildError, `${err.name}: ${err.message}`);
      assert.match(err.message, /^400: .*cannot be built by corral.*(fromDebianImage\('bookworm'\)|fromPythonImage\('3\.11'\))/);
      return true;
    });
  }
});

test("a key's template is not seen nor taken by another key", T, async () => {
  assert.ok(built, 'the first test built the template');
  assert.equal(await Template.exists(ALIAS, asB()), false);
  await assert.rejects(Template.getTags(ALIAS, asB()), (err) => /^404: /.test(err.message));
  await assert.rejects(Template.build(tools(), ALIAS, asB()), (err) => {
    assert.ok(err instanceof BuildError, `${err.name}: ${err.message}`);
    assert.match(err.message, /^403: .*belongs to another API key/);
    return true;
  });
  await assert.rejects(Sandbox.create(ALIAS, asB()), (err) => {
    assert.ok(err instanceof NotFoundError || /404/.test(err.message), `${err.name}: ${err.message}`);
    return true;
  });
  assert.equal(await Template.exists(ALIAS), true, "still its owner's");
});

// Sandboxes on built images are the template runtime's (tpl-runtime).
test('a sandbox on the built template has its packages, files, environment and folder', T, async () => {
  assert.ok(built, 'the first test built the template');
  const sbx = await Sandbox.create(`${ALIAS}:v1`);
  // nothing of a template built through the API runs outside a sandbox: no
  // zygote inside it (its sandboxes start cold)
  assert.match(ctx.server.stderr, new RegExp(`template '${ALIAS}:v1' cannot start, its sandboxes start cold: it was built through the API`));
  try {
    const jq = await sbx.commands.run('jq --version');
    assert.match(jq.stdout, /^jq-\d/);
    assert.equal(await sbx.files.read('/opt/app/greeting.txt'), GREETING);
    const env = await sbx.commands.run('echo "$GREETING_MODE $(pwd)"');
    assert.equal(env.stdout.trim(), 'test /home/user');
  } finally {
    await sbx.kill();
  }
});

/** OpenSandbox's SDK on this server's OpenSandbox listener, as key. */
const osbConnection = (apiKey) => ({
  domain: new URL(ctx.server.osbUrl).host,
  protocol: 'http',
  apiKey,
  requestTimeoutSeconds: 60,
});

test("OpenSandbox's image.uri names a built template; other images are refused", T, async () => {
  assert.ok(built, 'the first test built the template');
  const sbx = await OsbSandbox.create({ connectionConfig: osbConnection(KEY_A), image: `${ALIAS}:v1`, timeoutSeconds: 120 });
  await killAfter(
    sbx,
    async () => {
      const jq = await sbx.commands.run('jq --version && cat /opt/app/greeting.txt');
      assert.equal(jq.exitCode, 0, JSON.stringify(jq.error));
      assert.match(jq.logs.stdout.map((m) => m.text).join('\n'), new RegExp(`^jq-\\d[\\s\\S]*hello from ${RUN}`));
    },
    { afterKill: () => sbx.close() },
  );
  const refused = (image, key) =>
    assert.rejects(OsbSandbox.create({ connectionConfig: osbConnection(key), image, timeoutSeconds: 120 }), (err) => {
      assert.ok(err instanceof SandboxApiException, `${image}: ${err?.stack ?? err}`);
      assert.equal(err.statusCode, 400, `${image}: ${err.message}`);
      assert.match(JSON.stringify(err.rawBody ?? err.message), /not served here.*Template\.build/);
      return true;
    });
  await refused('ubuntu:22.04', KEY_A);
  await refused(`${ALIAS}:v1`, KEY_B); // another key's template is an image not served
});

test("a build's id is not a template name, on E2B's API nor OpenSandbox's", T, async () => {
  assert.ok(corralId, 'the first test built the template');
  await assert.rejects(Sandbox.create(corralId, asB()), (err) => {
    assert.ok(err instanceof NotFoundError || /404/.test(err.message), `${err.name}: ${err.message}`);
    return true;
  });
  await assert.rejects(
    OsbSandbox.create({ connectionConfig: osbConnection(KEY_B), image: corralId, timeoutSeconds: 120 }),
    (err) => {
      assert.ok(err instanceof SandboxApiException, `${err?.stack ?? err}`);
      assert.equal(err.statusCode, 400, err.message);
      return true;
    },
  );
});

test('a templateID that is not a name is not found, and reads no file by it', async () => {
  for (const templateID of ['../../../../etc/passwd', '..', 'a/../../b', '.hidden']) {
    const res = await fetch(`${ctx.server.url}/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': KEY_A, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID }),
    });
    const body = await res.json();
    assert.equal(res.status, 404, `${templateID}: ${JSON.stringify(body)}`);
    assert.equal(body.code, 404);
  }
});

test('a key has at most 4 builds asked for, queued or running', async () => {
  const names = [0, 1, 2, 3, 4].map((i) => `e2b-test-cap-${i}-${RUN}`);
  try {
    const ask = (name) =>
      fetch(`${ctx.server.url}/v3/templates`, {
        method: 'POST',
        headers: { 'X-API-Key': KEY_C, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name }),
      });
    for (const name of names.slice(0, 4)) assert.equal((await ask(name)).status, 202);
    const res = await ask(names[4]);
    const body = await res.json();
    assert.equal(res.status, 429);
    assert.equal(body.code, 429);
    assert.match(body.message, /4 template builds/);
  } finally {
    for (const name of names) fs.rmSync(path.join(STORE, 'e2b', 'owners', name), { force: true });
  }
});

test("a build's log keeps 10000 output lines, says how many it dropped, and pages right", T, async () => {
  const logs = [];
  const long = Template().fromDebianImage('bookworm').runCmd(`seq 1 12000 # ${RUN}`);
  const info = await Template.build(long, LONG, { onBuildLogs: (entry) => logs.push(entry.message) });
  assert.ok(logs.length > 10000 && logs.length < 10100, `${logs.length} entries`);
  assert.ok(logs.some((line) => /later output lines are dropped/.test(line)));
  assert.ok(logs.some((line) => /^\d+ output lines were dropped/.test(line)), logs.slice(-5).join('\n'));
  assert.ok(logs.some((line) => /^Template ready/.test(line)));
  const read = []; // the status's entries, a page at a time: the lines streamed, in order
  for (let page = await Template.getBuildStatus(info); page.logEntries.length; ) {
    read.push(...page.logEntries.map((entry) => entry.message));
    page = await Template.getBuildStatus(info, { logsOffset: read.length });
  }
  let at = 0;
  for (const line of logs) if (line === read[at]) at++;
  assert.equal(at, read.length, 'the status pages are the lines streamed');
  const numbers = read.filter((line) => /^\d+$/.test(line)); // seq's lines: the first ones kept
  assert.ok(numbers.length > 9000 && numbers.length < 12000, `${numbers.length} of seq's lines`);
  assert.deepEqual(numbers, numbers.map((_, i) => String(i + 1)));
});

// By default only admin keys build through the API (build commands run as
// root, with the host's network); other keys see, list and run templates.
test('by default, only admin keys build templates through the API', T, async () => {
  const ADMIN = randomApiKey();
  // a state folder of its own: its start clears what it finds there
  const state = fs.mkdtempSync('/run/corral-tpl-admin-');
  const server = await startServer({
    apiKeys: [KEY_A],
    args: ['--admin-key', ADMIN, '--state-dir', state],
    gateway: false,
    env: { CORRAL_TEMPLATE_DIR: STORE },
  });
  const name = `e2b-test-admin-${RUN}`;
  try {
    const ask = (key) =>
      fetch(`${server.url}/v3/templates`, {
        method: 'POST',
        headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name }),
      });
    const refused = await ask(KEY_A);
    const body = await refused.json();
    assert.equal(refused.status, 403);
    assert.equal(body.code, 403);
    assert.match(body.message, /limited to admin keys.*--template-builds all/);
    const del = await fetch(`${server.url}/templates/${name}`, { method: 'DELETE', headers: { 'X-API-Key': KEY_A } });
    assert.equal(del.status, 403);
    const list = await fetch(`${server.url}/templates`, { headers: { 'X-API-Key': KEY_A } });
    assert.equal(list.status, 200);
    assert.equal((await ask(ADMIN)).status, 202);
  } finally {
    await server.stop();
    fs.rmSync(state, { recursive: true, force: true });
    fs.rmSync(path.join(STORE, 'e2b', 'owners', name), { force: true });
  }
});

// E2B's templates copy into /home/user, their sandboxes' home: a corral
// sandbox's /home/user is the image's under a layer of the sandbox's disk.
test("a sandbox's /home/user holds what the template copied there", T, async () => {
  assert.ok(built, 'the first test built the template');
  const sbx = await Sandbox.create(ALIAS);
  try {
    assert.equal(await sbx.files.read('/home/user/greeting.txt'), GREETING);
    // the sandbox's own changes go to its disk, not to the template
    await sbx.files.write('/home/user/greeting.txt', 'changed');
    assert.equal(await sbx.files.read('/home/user/greeting.txt'), 'changed');
    const again = await Sandbox.create(ALIAS);
    try {
      assert.equal(await again.files.read('/home/user/greeting.txt'), GREETING);
    } finally {
      await again.kill();
    }
  } finally {
    await sbx.kill();
  }
});

// The server answers creates from a template made when the name was first
// used: a rebuild of the name gives the next sandboxes the new build, and
// leaves running ones on theirs.
test("a rebuilt template's next sandboxes run on the new build; running ones keep theirs", T, async () => {
  const version = (n) => Template().fromDebianImage('bookworm').runCmd(`echo ${n} > /tmp/../home/user/version`);
  await Template.build(version('one'), REBUILT);
  const first = await Sandbox.create(REBUILT);
  try {
    assert.equal((await first.commands.run('cat /home/user/version')).stdout, 'one\n');
    await Template.build(version('two'), REBUILT);
    const second = await Sandbox.create(REBUILT);
    try {
      assert.equal((await second.commands.run('cat /home/user/version')).stdout, 'two\n');
      assert.equal((await first.commands.run('cat /home/user/version')).stdout, 'one\n');
    } finally {
      await second.kill();
    }
    // the first still runs, on the old build (its zygote lives as long)
    assert.equal((await first.commands.run('echo still')).stdout, 'still\n');
  } finally {
    await first.kill();
  }
});

test('buildInBackground answers at once, getBuildStatus follows the build, and each sandbox runs the start command until ready', T, async () => {
  const template = Template()
    .fromDebianImage('bookworm')
    .runCmd(`echo ${RUN} > /home/user/run-id`)
    .setStartCmd('sh -c "echo started > /tmp/ready; exec sleep infinity"', waitForFile('/tmp/ready'));
  const info = await Template.buildInBackground(template, STARTED);
  assert.equal(info.templateId, STARTED);
  let status = await Template.getBuildStatus(info);
  while (status.status === 'waiting' || status.status === 'building') {
    await new Promise((resolve) => setTimeout(resolve, 100)); // polled, as Template.build does
    status = await Template.getBuildStatus(info);
  }
  assert.equal(status.status, 'ready', JSON.stringify(status.reason));
  assert.ok(status.logEntries.some((e) => e.message.includes(`echo ${RUN}`)), 'the log names the step');
  const sbx = await Sandbox.create(STARTED);
  try {
    // the ready command passed before the create answered
    assert.equal(await sbx.files.read('/tmp/ready'), 'started\n');
    assert.equal(await sbx.files.read('/home/user/run-id'), `${RUN}\n`);
    const procs = await sbx.commands.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    assert.match(procs.stdout, /sleep infinity/);
  } finally {
    await sbx.kill();
  }
});

test('deleting a template removes its names', T, async () => {
  assert.ok(built, 'the first test built the template');
  const del = (key) =>
    fetch(`${ctx.server.url}/templates/${ALIAS}`, { method: 'DELETE', headers: { 'X-API-Key': key } });
  assert.equal((await del(KEY_B)).status, 404, "another key's delete finds nothing");
  assert.equal((await del(KEY_A)).status, 204);
  assert.equal(await Template.exists(ALIAS), false);
  // the server had sandboxes on it: none is made on it any more, for any key
  for (const opts of [{}, asB()])
    await assert.rejects(Sandbox.create(ALIAS, opts), (err) => {
      assert.ok(err instanceof NotFoundError || /404/.test(err.message), `${err.name}: ${err.message}`);
      return true;
    });
  assert.deepEqual(
    (await (await fetch(`${ctx.server.url}/templates`, { headers: { 'X-API-Key': KEY_A } })).json()).filter(
      (t) => t.templateID === ALIAS,
    ),
    [],
  );
});
