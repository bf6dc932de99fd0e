// OpenSandbox's clients against `corral serve`'s OpenSandbox API.
//
// The official npm SDK `@alibaba-group/opensandbox` (pinned in package.json)
// drives the lifecycle (create, getInfo, pause and resume, renew, kill) and
// execd (commands with streamed output, exit codes and background commands,
// files, metrics). OpenSandbox's code-interpreter client is not published on
// npm, so code execution is driven by a raw HTTP client that follows the flow
// of that client and of LiteLLM's OpenSandbox provider
// (litellm/llms/opensandbox/sandbox/transformation.py): create with a deny-all
// network policy, poll GET /v1/sandboxes/{id} until Running, resolve the
// endpoint of port 44772 and send its headers, POST /code with
// Accept: text/event-stream, parse the lines tolerantly, delete.
//
// The server requires an API key here (useServer({apiKeys})), so every
// lifecycle call also checks that the SDK sends it.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Sandbox, SandboxApiException } from '@alibaba-group/opensandbox';

import { eventually, killAfter, randomApiKey, useServer } from './harness.mjs';

const ctx = useServer({ apiKeys: [randomApiKey()] });

const IMAGE = 'python:3.12';
const EXECD_PORT = 44772;
const TOKEN_HEADER = 'X-EXECD-ACCESS-TOKEN';
const TAG = { suite: 'corral-opensandbox' };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The SDK's connection options for this server: host:port, plain HTTP, the key. */
function connectionConfig(extra = {}) {
  const { server } = ctx;
  return {
    domain: new URL(server.osbUrl).host,
    protocol: 'http',
    apiKey: server.apiKey,
    requestTimeoutSeconds: 30,
    ...extra,
  };
}

/** Sandbox.create with this suite's defaults; `opts` overrides them. */
function createSandbox(opts = {}) {
  return Sandbox.create({
    connectionConfig: connectionConfig(),
    image: IMAGE,
    metadata: TAG,
    timeoutSeconds: 300,
    ...opts,
  });
}

/**
 * Creates a sandbox, runs fn(sandbox) and kills it whatever happens (a
 * failing kill is reported only when fn succeeded); the SDK's HTTP agent is
 * closed at the end.
 */
async function withSandbox(fn, opts) {
  const sbx = await createSandbox(opts);
  return killAfter(sbx, fn, { afterKill: () => sbx.close() });
}

/** Asserts that `promise` rejects with a SandboxApiException of this HTTP status. */
async function rejectsWithStatus(promise, status, what) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `${what}: expected a SandboxApiException, got ${err?.stack ?? err}`);
    assert.equal(err.statusCode, status, `${what}: HTTP status (${err.message}; body ${JSON.stringify(err.rawBody)})`);
    return true;
  });
}

const texts = (messages) => messages.map((m) => m.text);

/* ------------------------------------------------------------------------ */
/* Lifecycle and authentication                                             */

test('Sandbox.create and getInfo: a running sandbox with its metadata, entrypoint and expiry', async () => {
  const before = Date.now();
  await withSandbox(
    async (sbx) => {
      assert.equal(typeof sbx.id, 'string');
      assert.ok(sbx.id.length > 0, 'the sandbox has an id');

      const info = await sbx.getInfo();
      assert.equal(info.id, sbx.id);
      assert.equal(info.status.state, 'Running');
      assert.deepEqual(info.metadata, { ...TAG, case: 'info' });
      assert.deepEqual(info.entrypoint, ['tail', '-f', '/dev/null'], 'the default entrypoint the SDK sent');
      assert.equal(info.image?.uri, IMAGE);
      assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()), 'createdAt is a date');
      assert.ok(
        info.createdAt.getTime() >= before - 2_000 && info.createdAt.getTime() <= Date.now() + 2_000,
        `createdAt ${info.createdAt.toISOString()} is now`,
      );
      assert.ok(info.expiresAt instanceof Date, 'a sandbox created with a timeout has an expiresAt');
      const ttl = info.expiresAt.getTime() - info.createdAt.getTime();
      assert.ok(Math.abs(ttl - 300_000) < 5_000, `expiresAt is createdAt + 300 s (it is + ${ttl} ms)`);

      assert.equal(await sbx.isHealthy(), true, 'execd answers /ping');

      // The endpoint of execd: no scheme, and a header to send with every call.
      const ep = await sbx.getEndpoint(EXECD_PORT);
      assert.ok(!ep.endpoint.includes('://'), `the endpoint has no scheme: ${ep.endpoint}`);
      assert.ok(ep.headers && typeof ep.headers[TOKEN_HEADER] === 'string', `the endpoint carries ${TOKEN_HEADER}`);
      assert.ok(ep.headers[TOKEN_HEADER].length >= 16, 'the execd token is not trivial');
    },
    { metadata: { ...TAG, case: 'info' } },
  );
});

test('the API key is required by the lifecycle API, and the execd token by execd', async () => {
  const { server } = ctx;
  const noKey = await fetch(`${server.osbUrl}/v1/sandboxes`, { headers: { 'X-Request-ID': 'corral-osb-test-1' } });
  assert.equal(noKey.status, 401, 'GET /v1/sandboxes without OPEN-SANDBOX-API-KEY');
  assert.equal((await noKey.json()).code, 'MISSING_API_KEY');
  assert.equal(noKey.headers.get('x-request-id'), 'corral-osb-test-1', 'X-Request-ID is echoed');

  await rejectsWithStatus(
    Sandbox.create({ connectionConfig: connectionConfig({ apiKey: 'not-the-key' }), image: IMAGE, timeoutSeconds: 120 }),
    401,
    'Sandbox.create with a wrong key',
  );

  await withSandbox(async (sbx) => {
    const url = await sbx.getEndpointUrl(EXECD_PORT);
    const { headers } = await sbx.getEndpoint(EXECD_PORT);
    const bare = await fetch(`${url}/ping`);
    assert.equal(bare.status, 401, `GET ${url}/ping without ${TOKEN_HEADER}`);
    await bare.arrayBuffer();
    const wrong = await fetch(`${url}/ping`, { headers: { [TOKEN_HEADER]: 'f'.repeat(headers[TOKEN_HEADER].length) } });
    assert.equal(wrong.status, 401, `GET ${url}/ping with a wrong ${TOKEN_HEADER}`);
    await wrong.arrayBuffer();
    const right = await fetch(`${url}/ping`, { headers });
    assert.equal(right.status, 200, `GET ${url}/ping with the endpoint's headers`);
    await right.arrayBuffer();

    // Another sandbox's token does not open this one.
    await withSandbox(async (other) => {
      const otherHeaders = (await other.getEndpoint(EXECD_PORT)).headers;
      const cross = await fetch(`${url}/ping`, { headers: otherHeaders });
      assert.equal(cross.status, 401, "a sandbox's execd with another sandbox's token");
      await cross.arrayBuffer();
    });
  });
});

test('renew moves expiresAt; an earlier expiry is refused', async () => {
  await withSandbox(async (sbx) => {
    const before = (await sbx.getInfo()).expiresAt;
    const asked = Date.now() + 1_200_000;
    const renewed = await sbx.renew(1_200);
    assert.ok(renewed.expiresAt instanceof Date, 'renew answers the new expiresAt');
    assert.ok(Math.abs(renewed.expiresAt.getTime() - asked) < 5_000, `renewed to now + 1200 s (${renewed.expiresAt.toISOString()})`);
    assert.ok(renewed.expiresAt > before, 'the new expiry is later than the old one');
    const info = await sbx.getInfo();
    assert.ok(
      Math.abs(info.expiresAt.getTime() - renewed.expiresAt.getTime()) < 2_000,
      `getInfo shows the renewed expiry (${info.expiresAt.toISOString()} vs ${renewed.expiresAt.toISOString()})`,
    );
    await rejectsWithStatus(sbx.renew(120), 409, 'renew to an expiry earlier than the current one');
    assert.equal(await sbx.isHealthy(), true, 'the sandbox still runs');
  });
});

test('kill removes the sandbox: getInfo, execd and a second kill answer 404', async () => {
  const sbx = await createSandbox();
  try {
    const url = await sbx.getEndpointUrl(EXECD_PORT);
    const { headers } = await sbx.getEndpoint(EXECD_PORT);
    await sbx.kill();
    await rejectsWithStatus(sbx.getInfo(), 404, 'getInfo after kill');
    const ping = await fetch(`${url}/ping`, { headers });
    assert.equal(ping.status, 404, 'execd of a killed sandbox');
    await ping.arrayBuffer();
    await rejectsWithStatus(sbx.kill(), 404, 'a second kill');
  } finally {
    await sbx.close();
  }
});

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */

test('commands.run streams stdout and stderr line by line, as they are produced', async () => {
  await withSandbox(async (sbx) => {
    const seen = { init: [], stdout: [], stderr: [], complete: [], error: [] };
    const t0 = Date.now();
    const ex = await sbx.commands.run(
      'echo first; echo oops >&2; sleep 1; printf "second\\nthird"',
      {},
      {
        onInit: (m) => seen.init.push(m),
        onStdout: (m) => seen.stdout.push({ ...m, at: Date.now() - t0 }),
        onStderr: (m) => seen.stderr.push(m),
        onExecutionComplete: (m) => seen.complete.push(m),
        onError: (m) => seen.error.push(m),
      },
    );
    assert.deepEqual(texts(ex.logs.stdout), ['first', 'second', 'third'], 'one stdout event per line, without its newline');
    assert.deepEqual(texts(ex.logs.stderr), ['oops']);
    assert.deepEqual(texts(seen.stdout), ['first', 'second', 'third'], 'the handlers saw the same lines');
    assert.deepEqual(texts(seen.stderr), ['oops']);
    assert.equal(ex.exitCode, 0);
    assert.equal(ex.error, undefined);
    assert.ok(ex.complete, 'execution_complete was sent');
    assert.equal(seen.complete.length, 1);
    assert.equal(seen.error.length, 0);
    assert.equal(seen.init.length, 1, 'one init event');
    assert.ok(ex.id && seen.init[0].id === ex.id, 'init carries the command id');
    assert.ok(
      seen.stdout[1].at - seen.stdout[0].at >= 600,
      `"first" arrived while the command ran (first at ${seen.stdout[0].at} ms, second at ${seen.stdout[1].at} ms)`,
    );
    for (const m of ex.logs.stdout) assert.ok(Math.abs(m.timestamp - Date.now()) < 60_000, 'timestamps are ms since the epoch');
  });
});

test('commands.run: exit codes, working directory, environment and timeout', async () => {
  await withSandbox(async (sbx) => {
    const failed = await sbx.commands.run('echo before; exit 7');
    assert.equal(failed.exitCode, 7, 'the exit code of a failing command');
    assert.equal(failed.error?.name, 'CommandExecError');
    assert.equal(failed.error?.value, '7');
    assert.equal(failed.complete, undefined, 'no execution_complete after a failure');
    assert.deepEqual(texts(failed.logs.stdout), ['before']);

    const ok = await sbx.commands.run('true');
    assert.equal(ok.exitCode, 0);
    assert.deepEqual(ok.logs.stdout, []);

    const where = await sbx.commands.run('pwd; echo "$GREETING"', {
      workingDirectory: '/tmp',
      envs: { GREETING: 'hello from envs' },
    });
    assert.equal(where.exitCode, 0);
    assert.deepEqual(texts(where.logs.stdout), ['/tmp', 'hello from envs']);

    const t0 = Date.now();
    const slow = await sbx.commands.run('echo started; sleep 30; echo never', { timeoutSeconds: 1 });
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `a command past its 1 s timeout is stopped (it took ${took} ms)`);
    assert.ok(slow.error, 'a timed-out command ends with an error event');
    assert.notEqual(slow.exitCode, 0);
    assert.deepEqual(texts(slow.logs.stdout), ['started']);
  });
});

test('background commands: status, logs with a cursor, interrupt', async () => {
  await withSandbox(async (sbx) => {
    const command = 'for i in 1 2 3; do echo line$i; sleep 0.5; done; echo done >&2';
    const t0 = Date.now();
    const bg = await sbx.commands.run(command, { background: true });
    assert.ok(Date.now() - t0 < 1_000, `a background command answers before it ends (after ${Date.now() - t0} ms)`);
    assert.ok(bg.id, 'a background command has an id');
    assert.ok(bg.complete, 'its stream ends with execution_complete');

    const running = await sbx.commands.getCommandStatus(bg.id);
    assert.equal(running.running, true, 'running while it runs');
    assert.equal(running.exitCode, null);
    assert.equal(running.content, command, 'the status names the command');
    assert.ok(running.startedAt instanceof Date);

    const finished = await eventually(async () => {
      const st = await sbx.commands.getCommandStatus(bg.id);
      return st.running ? null : st;
    });
    assert.ok(finished, 'the command finishes');
    assert.equal(finished.exitCode, 0);
    assert.ok(finished.finishedAt instanceof Date && finished.finishedAt >= finished.startedAt);

    const logs = await sbx.commands.getBackgroundCommandLogs(bg.id);
    const lines = logs.content.split('\n').filter(Boolean);
    assert.deepEqual(lines.filter((l) => l.startsWith('line')), ['line1', 'line2', 'line3'], `logs: ${JSON.stringify(logs.content)}`);
    assert.ok(lines.includes('done'), 'stderr is in the logs too');
    assert.equal(typeof logs.cursor, 'number', 'EXECD-COMMANDS-TAIL-CURSOR');
    const rest = await sbx.commands.getBackgroundCommandLogs(bg.id, logs.cursor);
    assert.equal(rest.content, '', 'nothing after the last cursor');
    assert.equal(rest.cursor, logs.cursor);

    const failing = await sbx.commands.run('exit 3', { background: true });
    const failed = await eventually(async () => {
      const st = await sbx.commands.getCommandStatus(failing.id);
      return st.running ? null : st;
    });
    assert.equal(failed?.exitCode, 3, 'the exit code of a failed background command');

    const sleeper = await sbx.commands.run('sleep 60', { background: true });
    assert.equal((await sbx.commands.getCommandStatus(sleeper.id)).running, true);
    await sbx.commands.interrupt(sleeper.id);
    const stopped = await eventually(async () => {
      const st = await sbx.commands.getCommandStatus(sleeper.id);
      return st.running ? null : st;
    }, { timeoutMs: 5_000 });
    assert.ok(stopped, 'an interrupted command stops');
    assert.notEqual(stopped.exitCode, 0);

    await rejectsWithStatus(sbx.commands.getCommandStatus('0123456789abcdef0123456789abcdef'), 404, 'status of an unknown command');
  });
});

/* ------------------------------------------------------------------------ */
/* Files                                                                    */

test('files: write, read, stat, search and delete', async () => {
  await withSandbox(async (sbx) => {
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    await sbx.files.writeFiles([
      { path: '/tmp/osb/a.txt', data: 'alpha\n', mode: 600 },
      { path: '/tmp/osb/sub/b.txt', data: 'beta ünïcode' },
      { path: '/tmp/osb/c.bin', data: bytes },
      { path: '/tmp/osb/empty.txt' },
      { path: '/tmp/osb/d.txt', data: 'delta' },
    ]);

    assert.equal(await sbx.files.readFile('/tmp/osb/a.txt'), 'alpha\n');
    assert.equal(await sbx.files.readFile('/tmp/osb/sub/b.txt'), 'beta ünïcode', 'parent directories are made');
    assert.deepEqual(await sbx.files.readBytes('/tmp/osb/c.bin'), bytes, 'binary content round-trips');
    assert.equal(await sbx.files.readFile('/tmp/osb/empty.txt'), '');
    assert.equal(await sbx.files.readFile('/tmp/osb/a.txt', { range: 'bytes=1-3' }), 'lph', 'a Range read');

    const info = await sbx.files.getFileInfo(['/tmp/osb/a.txt', '/tmp/osb/c.bin']);
    assert.equal(info['/tmp/osb/a.txt'].size, 6);
    assert.equal(info['/tmp/osb/a.txt'].mode, 600, 'the mode written, as decimal digits of the octal value');
    assert.equal(info['/tmp/osb/c.bin'].size, 256);
    assert.ok(info['/tmp/osb/a.txt'].modifiedAt instanceof Date);

    const found = await sbx.files.search({ path: '/tmp/osb', pattern: '*.txt' });
    assert.deepEqual(
      found.map((f) => f.path).sort(),
      ['/tmp/osb/a.txt', '/tmp/osb/d.txt', '/tmp/osb/empty.txt', '/tmp/osb/sub/b.txt'],
      'search matches file names in the directory and below it',
    );
    const all = await sbx.files.search({ path: '/tmp/osb' });
    assert.equal(all.length, 5, `the default pattern matches every file: ${all.map((f) => f.path)}`);

    await sbx.files.deleteFiles(['/tmp/osb/a.txt', '/tmp/osb/c.bin']);
    await rejectsWithStatus(sbx.files.readFile('/tmp/osb/a.txt'), 404, 'reading a deleted file');
    await rejectsWithStatus(sbx.files.getFileInfo(['/tmp/osb/c.bin']), 404, 'stat of a deleted file');
    const left = await sbx.files.search({ path: '/tmp/osb', pattern: '*' });
    assert.deepEqual(
      left.map((f) => f.path).sort(),
      ['/tmp/osb/d.txt', '/tmp/osb/empty.txt', '/tmp/osb/sub/b.txt'],
      'deleted files are no longer found',
    );
    await rejectsWithStatus(sbx.files.readFile('/tmp/osb/never-written'), 404, 'reading a missing file');
  });
});

test('commands and files see the same filesystem', async () => {
  await withSandbox(async (sbx) => {
    await sbx.files.writeFiles([{ path: '/tmp/osb/written.txt', data: 'beta ünïcode', mode: 600 }]);
    const cat = await sbx.commands.run(
      'cat /tmp/osb/written.txt; echo; stat -c %a /tmp/osb/written.txt; printf "from shell" > /tmp/osb/shell.txt',
    );
    assert.equal(cat.exitCode, 0, `the command failed: ${JSON.stringify(cat.error)}`);
    assert.deepEqual(texts(cat.logs.stdout), ['beta ünïcode', '600'], 'a command reads what files.writeFiles wrote');
    assert.equal(await sbx.files.readFile('/tmp/osb/shell.txt'), 'from shell', 'files.readFile reads what a command wrote');
  });
});

/* ------------------------------------------------------------------------ */
/* Metrics, pause and resume                                                */

test('getMetrics reports the CPU and memory of the sandbox', async () => {
  await withSandbox(
    async (sbx) => {
      const m = await sbx.getMetrics();
      assert.equal(m.cpuCount, 1, 'the CPU limit asked for');
      assert.equal(m.memoryTotalMiB, 512, 'the memory limit asked for');
      assert.ok(m.memoryUsedMiB > 0 && m.memoryUsedMiB < m.memoryTotalMiB, `memory used: ${m.memoryUsedMiB} MiB`);
      assert.ok(m.cpuUsedPercentage >= 0 && m.cpuUsedPercentage <= 100 * m.cpuCount + 1, `CPU used: ${m.cpuUsedPercentage} %`);
      assert.ok(Math.abs(m.timestamp - Date.now()) < 60_000, `timestamp in ms: ${m.timestamp}`);
    },
    { resource: { cpu: '1', memory: '512Mi' } },
  );
});

test('isolation: capabilities say none, and an isolated session is refused by name', async () => {
  await withSandbox(async (sbx) => {
    const caps = await sbx.isolation.capabilities();
    assert.equal(caps.available, false);
    assert.equal(caps.commit_supported, false);
    // The SDK's isolation client reports the status and the body as they came.
    await assert.rejects(
      sbx.isolation.create({ workspace: { path: '/tmp' } }),
      /failed: 501 \{"code":"NOT_SUPPORTED","message":"isolated sessions are not supported by this server"\}/,
    );
    assert.equal((await sbx.commands.run('echo still here')).logs.stdout[0].text, 'still here');
  });
});

test('the credential vault is refused by name, in the protocol\'s error shape', async () => {
  await withSandbox(async (sbx) => {
    for (const call of [() => sbx.credentialVault.get(), () => sbx.credentialVault.listCredentials()]) {
      await assert.rejects(call(), (err) => {
        assert.equal(err.statusCode, 501, err.message);
        assert.equal(err.error?.code, 'NOT_SUPPORTED');
        assert.match(err.message, /the credential vault is not supported by this server/);
        return true;
      });
    }
  });
});

/** The counter the background loop writes, or NaN. */
async function readCounter(sbx) {
  return Number.parseInt(await sbx.files.readFile('/tmp/counter'), 10);
}

test('pause freezes a running process and resume continues it where it was', async () => {
  await withSandbox(async (sbx) => {
    // A process whose state is in its memory: a shell variable, written out on each tick.
    const counter = await sbx.commands.run(
      'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done',
      { background: true },
    );
    const started = await eventually(async () => {
      try {
        return (await readCounter(sbx)) >= 3;
      } catch {
        return false; // not written yet
      }
    });
    assert.ok(started, 'the counter runs');

    const c0 = await readCounter(sbx);
    await sbx.pause();
    assert.equal((await sbx.getInfo()).status.state, 'Paused');
    // execd of a frozen sandbox answers an error at once rather than hanging.
    const t0 = Date.now();
    await assert.rejects(sbx.files.readFile('/tmp/counter'), (err) => {
      assert.ok(err instanceof SandboxApiException && err.statusCode >= 400, `execd of a paused sandbox: ${err?.stack ?? err}`);
      return true;
    });
    assert.ok(Date.now() - t0 < 5_000, 'execd of a paused sandbox answers at once');
    await sleep(2_000); // 20 ticks if it were not frozen

    const resumed = await sbx.resume();
    assert.equal((await resumed.getInfo()).status.state, 'Running');
    const c1 = await readCounter(resumed);
    assert.ok(c1 >= c0 && c1 - c0 < 10, `the counter did not advance while paused (${c0} before, ${c1} after 2 s paused)`);

    const status = await resumed.commands.getCommandStatus(counter.id);
    assert.equal(status.running, true, 'the process survived the pause');
    const advanced = await eventually(async () => (await readCounter(resumed)) >= c1 + 5, { timeoutMs: 5_000 });
    assert.ok(advanced, `the counter advances again after resume (from ${c1})`);
    const c2 = await readCounter(resumed);
    assert.ok(c2 > c1, `it continues from where it was (${c1}, then ${c2}), it did not start over`);
    // `resumed` shares sbx's connection (and HTTP agent), closed by withSandbox.
  });
});

/* ------------------------------------------------------------------------ */
/* Code execution: the raw flow of LiteLLM's provider and the               */
/* code-interpreter client                                                  */

/** One event from a line of the stream, as LiteLLM's _parse_sse_line reads it, or null. */
function parseSseLine(line) {
  const stripped = line.trim();
  if (!stripped || [':', 'event:', 'id:', 'retry:'].some((p) => stripped.startsWith(p))) return null;
  const data = stripped.startsWith('data:') ? stripped.slice(5).trim() : stripped;
  if (!data) return null;
  let parsed;
  try {
    parsed = JSON.parse(data);
  } catch {
    return null;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return null;
  if (!('type' in parsed) && 'code' in parsed && 'message' in parsed) {
    return { type: 'error', error: { ename: String(parsed.code), evalue: String(parsed.message), traceback: [] } };
  }
  return parsed;
}

/** LiteLLM's _parse_lines: stdout, stderr, results, the first error, the first execution_count. */
function parseLines(lines) {
  const events = lines.map(parseSseLine).filter(Boolean);
  const ofType = (t) => events.filter((e) => e.type === t);
  const firstError = ofType('error')[0];
  const count = ofType('execution_count').find((e) => Number.isInteger(e.execution_count));
  return {
    events,
    stdout: ofType('stdout').map((e) => String(e.text ?? '')).join(''),
    stderr: ofType('stderr').map((e) => String(e.text ?? '')).join(''),
    results: ofType('result').map((e) => (e.results && typeof e.results === 'object' ? e.results : e)),
    error: firstError
      ? {
          name: firstError.error?.ename ?? firstError.error?.name ?? '',
          value: firstError.error?.evalue ?? firstError.error?.value ?? '',
          traceback: firstError.error?.traceback ?? [],
        }
      : null,
    executionCount: count ? count.execution_count : null,
  };
}

/** A JSON request to the lifecycle API with LiteLLM's headers; returns {status, body, headers}. */
async function lifecycle(method, path, body) {
  const { server } = ctx;
  const res = await fetch(`${server.osbUrl}/v1${path}`, {
    method,
    headers: { 'Content-Type': 'application/json', 'OPEN-SANDBOX-API-KEY': server.apiKey },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, body: json ?? text, headers: res.headers };
}

/** POST {execd}/code as LiteLLM sends it; returns the parsed run and the raw lines. */
async function postCode(execd, code, context = { language: 'python' }) {
  const res = await fetch(`${execd.base}/code`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'text/event-stream',
      'Cache-Control': 'no-cache',
      ...execd.headers,
    },
    body: JSON.stringify({ code, context }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `POST /code answers 200 exactly (got ${res.status}: ${text})`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/, 'POST /code is an event stream');
  const lines = text.split(/\r?\n/);
  for (const line of lines.filter((l) => l.trim())) {
    assert.ok(parseSseLine(line), `every non-empty line of the stream is one JSON event: ${JSON.stringify(line)}`);
  }
  return parseLines(lines);
}

test('code execution through the raw flow of LiteLLM and the code-interpreter client', async () => {
  // Create, as LiteLLM's _create_body makes it (deny-all network policy by default).
  const created = await lifecycle('POST', '/sandboxes', {
    image: { uri: 'opensandbox/code-interpreter:v1.1.0' },
    entrypoint: ['/opt/code-interpreter/code-interpreter.sh'],
    timeout: 300,
    resourceLimits: { cpu: '1', memory: '2Gi' },
    metadata: { ...TAG, client: 'litellm' },
    networkPolicy: { defaultAction: 'deny', egress: [] },
  });
  assert.equal(created.status, 202, `POST /v1/sandboxes: ${JSON.stringify(created.body)}`);
  const id = created.body.id;
  assert.equal(typeof id, 'string');
  let deleted = false;
  try {
    // Poll until Running (LiteLLM's _wait_until_running; it gives up on Failed, Stopping, Terminated).
    const running = await eventually(
      async () => {
        const got = await lifecycle('GET', `/sandboxes/${id}`);
        assert.equal(got.status, 200, `GET /v1/sandboxes/${id}: ${JSON.stringify(got.body)}`);
        const state = got.body?.status?.state;
        assert.ok(!['Failed', 'Stopping', 'Terminated'].includes(state), `the sandbox entered ${state}`);
        return state === 'Running' ? got.body : null;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    assert.ok(running, 'the sandbox is Running within 30 s');

    // The execd endpoint (404 is retried, as LiteLLM does), its headers, and the scheme of api_base.
    const endpoint = await eventually(
      async () => {
        const got = await lifecycle('GET', `/sandboxes/${id}/endpoints/${EXECD_PORT}?use_server_proxy=false`);
        if (got.status === 404) return null;
        assert.equal(got.status, 200, `GET .../endpoints/${EXECD_PORT}: ${JSON.stringify(got.body)}`);
        return got.body;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    assert.ok(endpoint?.endpoint, 'an execd endpoint');
    const execd = {
      base: `http://${endpoint.endpoint.replace(/\/+$/, '')}`,
      headers: Object.fromEntries(Object.entries(endpoint.headers ?? {}).map(([k, v]) => [String(k), String(v)])),
    };

    // Two runs in the default python context share its state.
    const first = await postCode(execd, 'x = 21\nprint("x is set")');
    assert.equal(first.error, null, `first run: ${JSON.stringify(first.error)}`);
    assert.equal(first.stdout, 'x is set\n', 'code stdout keeps its newline');
    assert.deepEqual(first.results, [], 'no value: no result');
    assert.equal(first.events[0]?.type, 'init', 'the stream starts with init');
    assert.equal(first.events.at(-1)?.type, 'execution_complete', 'a successful run ends with execution_complete');

    const second = await postCode(execd, 'import sys\nprint("stdout", x)\nprint("stderr", file=sys.stderr)\nx * 2');
    assert.equal(second.error, null, `second run: ${JSON.stringify(second.error)}`);
    assert.equal(second.stdout, 'stdout 21\n', 'the state of the first run is kept');
    assert.equal(second.stderr, 'stderr\n');
    assert.equal(second.results.length, 1, `one result: ${JSON.stringify(second.results)}`);
    assert.equal(second.results[0].text, '42', 'the value of the last expression, as results.text');
    assert.ok(Number.isInteger(second.executionCount), 'an execution_count');
    assert.ok(first.executionCount === null || second.executionCount > first.executionCount, 'the count goes up');

    // An error: the error event with name, value and traceback; the state survives it.
    const failed = await postCode(execd, 'y = x + 1\nundefined_name');
    assert.ok(failed.error, 'an error event');
    assert.equal(failed.error.name, 'NameError');
    assert.match(failed.error.value, /undefined_name/);
    assert.ok(Array.isArray(failed.error.traceback) && failed.error.traceback.length > 0, 'a traceback');
    assert.equal(failed.events.filter((e) => e.type === 'error').length, 1, 'one error event');
    const after = await postCode(execd, 'y');
    assert.equal(after.error, null);
    assert.equal(after.results[0]?.text, '22', 'what ran before the error is kept');

    // The code-interpreter client's flow: a context of its own, isolated from the default one.
    const ctxRes = await fetch(`${execd.base}/code/context`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...execd.headers },
      body: JSON.stringify({ language: 'python' }),
    });
    const context = await ctxRes.json();
    assert.equal(ctxRes.status, 200, `POST /code/context: ${JSON.stringify(context)}`);
    assert.equal(context.language, 'python');
    assert.ok(context.id, 'the context has an id');
    const inCtx = await postCode(execd, 'z = 5', { id: context.id, language: 'python' });
    assert.equal(inCtx.error, null);
    assert.equal(inCtx.events[0]?.text, context.id, "init names the context");
    const inCtx2 = await postCode(execd, 'z + 1', { id: context.id, language: 'python' });
    assert.equal(inCtx2.results[0]?.text, '6', 'state is kept in the created context');
    const isolated = await postCode(execd, 'x', { id: context.id, language: 'python' });
    assert.equal(isolated.error?.name, 'NameError', "the default context's variables are not in another context");

    const listed = await (await fetch(`${execd.base}/code/contexts?language=python`, { headers: execd.headers })).json();
    assert.ok(Array.isArray(listed) && listed.some((c) => c.id === context.id), 'the context is listed');
    const del = await fetch(`${execd.base}/code/contexts/${context.id}`, { method: 'DELETE', headers: execd.headers });
    assert.equal(del.status, 200, 'DELETE /code/contexts/{id}');
    await del.arrayBuffer();
    const gone = await fetch(`${execd.base}/code/contexts/${context.id}`, { headers: execd.headers });
    assert.equal(gone.status, 404, 'a deleted context is gone');
    assert.equal((await gone.json()).code, 'CONTEXT_NOT_FOUND');
    const unknown = await fetch(`${execd.base}/code`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...execd.headers },
      body: JSON.stringify({ code: '1', context: { id: context.id, language: 'python' } }),
    });
    assert.equal(unknown.status, 404, 'POST /code in a deleted context');
    assert.equal((await unknown.json()).code, 'CONTEXT_NOT_FOUND');

    // Delete: 2xx is True for LiteLLM, 404 is False.
    const removed = await lifecycle('DELETE', `/sandboxes/${id}`);
    assert.equal(removed.status, 204, 'DELETE /v1/sandboxes/{id}');
    deleted = true;
    assert.equal((await lifecycle('DELETE', `/sandboxes/${id}`)).status, 404, 'a second DELETE');
    assert.equal((await lifecycle('GET', `/sandboxes/${id}`)).status, 404, 'GET after DELETE');
  } finally {
    if (!deleted) await lifecycle('DELETE', `/sandboxes/${id}`);
  }
});

test("the code API: a context's working directory that cannot be entered, and deleting the contexts of a language without a kernel, are the client's errors", () =>
  withSandbox(async (sbx) => {
    const execd = { base: await sbx.getEndpointUrl(EXECD_PORT), headers: (await sbx.getEndpoint(EXECD_PORT)).headers };
    const create = async (body) => {
      const res = await fetch(`${execd.base}/code/context`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...execd.headers },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: await res.json() };
    };
    for (const language of ['python', 'bash']) {
      assert.deepEqual(await create({ language, cwd: '/nonexistent' }), {
        status: 400,
        body: { code: 'INVALID_REQUEST_BODY', message: 'cannot enter directory /nonexistent: No such file or directory' },
      }, language);
      assert.deepEqual(await create({ language, cwd: '/etc/hostname' }), {
        status: 400,
        body: { code: 'INVALID_REQUEST_BODY', message: 'cannot enter directory /etc/hostname: Not a directory' },
      }, language);
    }
    const listed = await (await fetch(`${execd.base}/code/contexts?language=bash`, { headers: execd.headers })).json();
    assert.deepEqual(listed, [], 'no context was left of those');

    // DELETE /code/contexts?language= of a language without a kernel: as creating one.
    const kept = await newContext(execd, 'bash');
    for (const language of ['cobol', 'go']) {
      const res = await fetch(`${execd.base}/code/contexts?language=${language}`, { method: 'DELETE', headers: execd.headers });
      assert.equal(res.status, 400, language);
      const body = await res.json();
      assert.equal(body.code, 'NOT_SUPPORTED', language);
      assert.match(body.message, new RegExp(`'${language}' is not available: corral runs python, javascript, typescript, bash, r`));
    }
    const after = await fetch(`${execd.base}/code/contexts/${kept.id}`, { headers: execd.headers });
    assert.equal(after.status, 200, 'the contexts of other languages are untouched');
    await after.arrayBuffer();
  }));

/** POST {execd}/code, started: resolves to the fetch response (for a run to interrupt). */
function startCode(execd, code, context) {
  return fetch(`${execd.base}/code`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...execd.headers },
    body: JSON.stringify({ code, context }),
  });
}

/** POST {execd}/code/context: the new context. */
async function newContext(execd, language) {
  const res = await fetch(`${execd.base}/code/context`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...execd.headers },
    body: JSON.stringify({ language }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, `POST /code/context ${language}: ${JSON.stringify(body)}`);
  assert.equal(body.language, language);
  return body;
}

/** Interrupts a run of a context: its stream ends with an error, and the context stays. */
async function interruptRun(execd, context, code) {
  const res = await startCode(execd, code, context);
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read(); // init: the run has started
  assert.match(Buffer.from(first.value).toString(), /"init"/);
  const stop = await fetch(`${execd.base}/code?id=${context.id}`, { method: 'DELETE', headers: execd.headers });
  assert.equal(stop.status, 200, 'DELETE /code?id= interrupts');
  await stop.arrayBuffer();
  let rest = Buffer.from(first.value).toString();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += Buffer.from(value).toString();
  }
  const run = parseLines(rest.split(/\r?\n/));
  assert.ok(run.error, `an interrupted run ends with an error: ${rest}`);
  return run;
}

test('a context deleted twice at once while a run uses it: one delete, the other 404, the run ends with an error', () =>
  withSandbox(async (sbx) => {
    const execd = { base: await sbx.getEndpointUrl(EXECD_PORT), headers: (await sbx.getEndpoint(EXECD_PORT)).headers };
    const own = await newContext(execd, 'python');
    const res = await startCode(execd, "import time\nprint('started', flush=True)\ntime.sleep(200)", { id: own.id, language: 'python' });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let text = '';
    while (!text.includes('started')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    const remove = () => fetch(`${execd.base}/code/contexts/${own.id}`, { method: 'DELETE', headers: execd.headers });
    const removals = await Promise.all([remove(), remove()]);
    const answers = await Promise.all(removals.map(async (r) => ({ status: r.status, text: await r.text() })));
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 404], JSON.stringify(answers));
    assert.equal(JSON.parse(answers.find((a) => a.status === 404).text).code, 'CONTEXT_NOT_FOUND');
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    const run = parseLines(text.split(/\r?\n/));
    assert.equal(run.stdout, 'started\n');
    assert.equal(run.error?.name, 'ExecutionError', text);
    assert.equal(run.error.value, `context ${own.id} was removed during the execution`);
    const stop = await fetch(`${execd.base}/code?id=${own.id}`, { method: 'DELETE', headers: execd.headers });
    assert.equal(stop.status, 404, 'interrupting a deleted context');
    assert.equal((await stop.json()).code, 'CONTEXT_NOT_FOUND');
    assert.equal((await postCode(execd, '6 * 7')).results[0]?.text, '42', 'the default context still runs');
  }));

test('the code API runs JavaScript and bash: state, streams, errors, contexts, interrupts', () =>
  withSandbox(async (sbx) => {
    const execd = { base: await sbx.getEndpointUrl(EXECD_PORT), headers: (await sbx.getEndpoint(EXECD_PORT)).headers };
    const js = { language: 'javascript' };
    // The default JavaScript context keeps its state; stdout and stderr apart.
    assert.equal((await postCode(execd, 'let total = 20', js)).error, null);
    const second = await postCode(execd, "console.log('js out'); console.error('js err'); total * 2 + 2", js);
    assert.equal(second.error, null, JSON.stringify(second.error));
    assert.equal(second.stdout, 'js out\n');
    assert.equal(second.stderr, 'js err\n');
    assert.equal(second.results[0]?.text, '42');
    const order = second.events.filter((e) => e.type === 'stdout' || e.type === 'stderr').map((e) => e.text);
    assert.deepEqual(order, ['js out\n', 'js err\n'], 'the streams in the order written');
    const thrown = await postCode(execd, "throw new TypeError('bad js')", js);
    assert.equal(thrown.error?.name, 'TypeError');
    assert.equal(thrown.error.value, 'bad js');
    assert.equal((await postCode(execd, 'total', js)).results[0]?.text, '20', 'the state survives the error');

    // bash: the default context and one of its own; the working directory carries over.
    const sh = { language: 'bash' };
    assert.equal((await postCode(execd, 'cd /tmp && export WHO=osb', sh)).error, null);
    const pwd = await postCode(execd, 'echo "$PWD $WHO"; echo warn >&2', sh);
    assert.equal(pwd.stdout, '/tmp osb\n');
    assert.equal(pwd.stderr, 'warn\n');
    const failed = await postCode(execd, 'exit_status() { return 3; }; exit_status', sh);
    assert.ok(failed.error, 'a failing command is an error');
    assert.match(failed.error.value, /3/);
    const own = await newContext(execd, 'bash');
    const isolated = await postCode(execd, 'echo "[$WHO]"', { id: own.id, language: 'bash' });
    assert.equal(isolated.stdout, '[]\n', 'a new context has its own shell');
    const listed = await (await fetch(`${execd.base}/code/contexts?language=bash`, { headers: execd.headers })).json();
    assert.ok(listed.some((c) => c.id === own.id && c.language === 'bash'), 'listed by language');
    const jsListed = await (await fetch(`${execd.base}/code/contexts?language=javascript`, { headers: execd.headers })).json();
    assert.ok(!jsListed.some((c) => c.id === own.id), 'not among the javascript contexts');

    // Interrupts: a bash sleep and a JavaScript busy loop; state kept after.
    assert.equal((await postCode(execd, 'KEPT=yes', { id: own.id, language: 'bash' })).error, null);
    await interruptRun(execd, { id: own.id, language: 'bash' }, 'sleep 60');
    assert.equal((await postCode(execd, 'echo $KEPT', { id: own.id, language: 'bash' })).stdout, 'yes\n');
    const jsOwn = await newContext(execd, 'javascript');
    assert.equal((await postCode(execd, 'var kept = 7', { id: jsOwn.id, language: 'javascript' })).error, null);
    await interruptRun(execd, { id: jsOwn.id, language: 'javascript' }, 'while (true) {}');
    assert.equal((await postCode(execd, 'kept', { id: jsOwn.id, language: 'javascript' })).results[0]?.text, '7');

    // A language without a kernel.
    const go = await startCode(execd, 'fmt.Println(1)', { language: 'go' });
    assert.equal(go.status, 400);
    const body = await go.json();
    assert.equal(body.code, 'NOT_SUPPORTED');
    assert.match(body.message, /javascript, typescript, bash, r/);
  }));
