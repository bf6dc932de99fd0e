// The code-interpreter data plane (E2b-Sandbox-Port: 49999) through the
// official @e2b/code-interpreter SDK: POST /execute (streamed NDJSON) and
// /contexts.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter';

import { useServer, withSandbox } from './harness.mjs';

// Keep-alive lines after 1 s of silence (5 s by default): every slower cell
// of this file gets some, which the SDK must pass over.
const served = useServer({ args: ['--keepalive-interval', '1s'] });

const T = { timeout: 120_000 };
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

test('runCode keeps state between cells of the default context', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const first = await sbx.runCode('x = 1');
    assert.equal(first.error, undefined, `x = 1 raised: ${JSON.stringify(first.error)}`);
    const second = await sbx.runCode('x+=1; x');
    assert.equal(second.error, undefined, `x+=1; x raised: ${JSON.stringify(second.error)}`);
    assert.equal(second.text, '2');
    assert.equal(typeof second.executionCount, 'number', 'no number_of_executions line');
    assert.ok(second.executionCount > first.executionCount, 'execution count did not grow');
  }),
);

test('onStdout/onStderr receive the output in order, logs collect it', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const events = [];
    const code = [
      'import sys',
      'print("out-1", flush=True)',
      'print("err-1", file=sys.stderr, flush=True)',
      'print("out-2", flush=True)',
    ].join('\n');
    const execution = await sbx.runCode(code, {
      onStdout: (msg) => events.push(['stdout', msg.line]),
      onStderr: (msg) => events.push(['stderr', msg.line]),
    });
    assert.equal(execution.error, undefined);
    const joined = (stream) => events.filter(([s]) => s === stream).map(([, l]) => l).join('');
    assert.equal(joined('stdout'), 'out-1\nout-2\n');
    assert.equal(joined('stderr'), 'err-1\n');
    const at = (text) => events.findIndex(([, line]) => line.includes(text));
    assert.ok(at('out-1') < at('err-1') && at('err-1') < at('out-2'), `out of order: ${JSON.stringify(events)}`);
    assert.equal(execution.logs.stdout.join(''), 'out-1\nout-2\n');
    assert.equal(execution.logs.stderr.join(''), 'err-1\n');
  }),
);

test('runCode with per-execution envs', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const execution = await sbx.runCode('import os; os.environ["CORRAL_IT"]', { envs: { CORRAL_IT: 'per-run' } });
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.text, 'per-run');
  }),
);

test('non-ASCII output and results survive intact', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    // Long enough to span several network chunks: multi-byte characters must not be cut.
    const execution = await sbx.runCode('print("é✓" * 20000)\n"héllo ✓"');
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.logs.stdout.join(''), `${'é✓'.repeat(20000)}\n`);
    assert.equal(execution.text, 'héllo ✓');
  }),
);

test('a cell silent for longer than the keepalive interval still completes', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const execution = await sbx.runCode('import time; time.sleep(2); "done"'); // the server's interval: 1 s
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.text, 'done');
  }),
);

test('a matplotlib figure comes back as a PNG result', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const execution = await sbx.runCode('import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()');
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    const png = execution.results.find((r) => r.png);
    assert.ok(png, `no png result among ${JSON.stringify(execution.results.map((r) => r.formats()))}`);
    const bytes = Buffer.from(png.png, 'base64');
    assert.deepEqual(bytes.subarray(0, 8), PNG_SIGNATURE, 'not a PNG');
    assert.ok(bytes.length > 1000, `suspiciously small PNG (${bytes.length} bytes)`);
    assert.equal(png.isMainResult, false, 'plt.show() output is display data, not the main result');
  }),
);

test('a DataFrame as the last expression is a main result with html and data', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const execution = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})');
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    const main = execution.results.find((r) => r.isMainResult);
    assert.ok(main, 'no main result');
    assert.match(main.html ?? '', /<table/, 'no HTML table');
    assert.ok(main.text, 'no text/plain');
    assert.deepEqual(main.data, { a: [1, 2], b: ['x', 'y'] });
  }),
);

test('an exception is reported as an error with name, value and traceback', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const execution = await sbx.runCode('1 / 0');
    assert.ok(execution.error, 'no error reported');
    assert.equal(execution.error.name, 'ZeroDivisionError');
    assert.match(execution.error.value, /division by zero/);
    assert.equal(typeof execution.error.traceback, 'string');
    assert.match(execution.error.traceback, /ZeroDivisionError/);
    assert.equal(execution.text, undefined);
    // The context is still usable afterwards.
    assert.equal((await sbx.runCode('40 + 2')).text, '42');
  }),
);

test('a created context keeps its own state, apart from the default one', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const ctx = await sbx.createCodeContext();
    assert.equal(typeof ctx.id, 'string');
    assert.ok(ctx.id.length > 0);
    assert.equal(ctx.language, 'python');
    assert.equal(ctx.cwd, '/home/user');
    await sbx.runCode('y = "default"');
    await sbx.runCode('y = "mine"', { context: ctx });
    assert.equal((await sbx.runCode('y', { context: ctx })).text, 'mine');
    assert.equal((await sbx.runCode('y')).text, 'default');
  }),
);

test('createCodeContext honours cwd', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
    assert.equal(ctx.cwd, '/tmp');
    assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp');
  }),
);

test('listCodeContexts lists created contexts', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const ctx = await sbx.createCodeContext();
    const contexts = await sbx.listCodeContexts();
    assert.ok(Array.isArray(contexts), 'not an array');
    const listed = contexts.find((c) => c.id === ctx.id);
    assert.ok(listed, `${ctx.id} not in ${JSON.stringify(contexts)}`);
    assert.equal(listed.language, 'python');
  }),
);

/** runCode that must end with the kernel's death; the stdout seen live and logged. */
async function runUntilDeath(sbx, code) {
  const live = [];
  const execution = await sbx.runCode(code, { onStdout: (m) => live.push(m.line) });
  assert.ok(execution.error, `the kernel did not die: ${JSON.stringify(execution)}`);
  assert.equal(execution.error.name, 'KernelDied', JSON.stringify(execution.error));
  assert.deepEqual(live, execution.logs.stdout, 'the live output and the logs differ');
  // The next cell runs in a new kernel.
  assert.equal((await sbx.runCode('1 + 1')).text, '2');
  return execution.logs.stdout.join('');
}

test('flushed output reaches the client before a kernel killed right after it', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const out = await runUntilDeath(sbx, 'import os, sys\nprint("x", flush=True)\nsys.stdout.write("y")\nsys.stdout.flush()\nos.kill(os.getpid(), 9)');
    assert.equal(out, 'x\ny');
  }),
);

test('progress printed before an out-of-memory kill is not lost', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const out = await runUntilDeath(
      sbx,
      'blocks = []\nfor i in range(1000):\n    print("step", i, flush=True)\n    blocks.append(bytearray(64 << 20))\nprint("survived")',
    );
    const steps = out.trimEnd().split('\n');
    assert.deepEqual(steps, steps.map((_, i) => `step ${i}`), 'every step up to the kill, in order');
    // The sandbox has 1 GiB: the kill comes once the blocks fill it.
    assert.ok(steps.length >= 8 && steps.length <= 17, `killed after ${steps.length} steps of 64 MiB`);
  }),
);

test('what C code wrote to fd 1 before aborting is not lost', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const out = await runUntilDeath(sbx, 'import ctypes\nlibc = ctypes.CDLL(None)\nlibc.write(1, b"from C\\n", 7)\nlibc.abort()');
    assert.equal(out, 'from C\n');
  }),
);

test('filling the disk gives ENOSPC, not an out-of-memory kill: state survives', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    // A default sandbox: 1 GiB of memory, 1 GiB of disk. Writing 1 GiB to
    // /tmp fills the disk, not the memory.
    await sbx.runCode('kept = 41');
    const code = [
      'import errno',
      'written = 0',
      'try:',
      '    with open("/tmp/big", "wb") as f:',
      '        for _ in range(1024):',
      '            f.write(b"x" * (1 << 20))',
      '            written += 1',
      'except OSError as e:',
      '    print(errno.errorcode[e.errno], written)',
    ].join('\n');
    const full = await sbx.runCode(code, { timeoutMs: 120_000 });
    assert.equal(full.error, undefined, JSON.stringify(full.error));
    const [name, mib] = full.logs.stdout.join('').trim().split(' ');
    assert.equal(name, 'ENOSPC');
    assert.ok(Number(mib) > 900 && Number(mib) < 1024, `ENOSPC after ${mib} MiB`);
    assert.equal((await sbx.runCode('kept + 1')).text, '42');
    const df = await sbx.commands.run('df -k --output=size,used,fstype /tmp /home/user /mnt/data | tail -n +2');
    const rows = df.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/));
    assert.deepEqual(rows.map((r) => r[2]), ['ext4', 'ext4', 'ext4']);
    assert.ok(rows.every((r) => r[0] === rows[0][0] && Number(r[0]) > 1000 * 1024), df.stdout);
  }),
);

test('restartCodeContext clears the state of a context', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    assert.equal(typeof sbx.restartCodeContext, 'function');
    const ctx = await sbx.createCodeContext();
    await sbx.runCode('z = 1', { context: ctx });
    await sbx.restartCodeContext(ctx);
    const execution = await sbx.runCode('z', { context: ctx });
    assert.ok(execution.error, 'z survived the restart');
    assert.equal(execution.error.name, 'NameError');
    assert.equal((await sbx.runCode('1 + 1', { context: ctx })).text, '2');
  }),
);

test('removeCodeContext removes a context', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    assert.equal(typeof sbx.removeCodeContext, 'function');
    const ctx = await sbx.createCodeContext();
    await sbx.removeCodeContext(ctx.id);
    const contexts = await sbx.listCodeContexts();
    assert.ok(!contexts.some((c) => c.id === ctx.id), `${ctx.id} still listed`);
    await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError);
  }),
);

test('a context removed while one execution runs and another waits in it: both end with an error, after 70 other removals', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const ctx = await sbx.createCodeContext();
    let started;
    const seen = new Promise((resolve) => (started = resolve));
    const onStdout = (m) => m.line.includes('started') && started();
    // timeoutMs only bounds a hang: the removal ends the cell
    const code = "import os, time\nopen('/tmp/kernel-pid', 'w').write(str(os.getpid()))\nprint('started', flush=True)\ntime.sleep(200)";
    const running = sbx.runCode(code, { context: ctx, onStdout, timeoutMs: 110_000 });
    await seen;
    // A second execution of the context, its request under way (its answer's
    // headers came: the server holds the context for it) while it waits for
    // the first.
    const waiting = await fetch(new URL('/execute', served.server.url), {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
      body: JSON.stringify({ code: 'print("never")', context_id: ctx.id }),
    });
    assert.equal(waiting.status, 200);
    // Far more contexts made and removed than any number kept aside while
    // those two requests hold theirs.
    for (let i = 0; i < 70; i++) await sbx.removeCodeContext(await sbx.createCodeContext());
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id), `${ctx.id} is still listed`);
    await sbx.removeCodeContext(ctx);
    const ran = await running;
    assert.deepEqual(ran.logs.stdout, ['started\n']);
    assert.equal(ran.error?.name, 'ExecutionError', JSON.stringify(ran.error));
    assert.equal(ran.error.value, `context ${ctx.id} was removed during the execution`);
    const waited = (await waiting.text()).trim().split('\n').map((line) => JSON.parse(line)).filter((l) => l.type !== 'keepalive');
    assert.deepEqual(waited, [
      { type: 'error', name: 'ExecutionError', value: `context ${ctx.id} was removed`, traceback: '' },
      { type: 'end_of_execution' },
    ]);
    await assert.rejects(sbx.removeCodeContext(ctx), NotFoundError);
    await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), `${ctx.id} still listed`);
    // its kernel is gone (killed: the agent reaps it a moment later)
    await sbx.commands.run('pid=$(cat /tmp/kernel-pid); for i in $(seq 300); do [ -d /proc/$pid ] || exit 0; sleep 0.1; done; exit 1');
    assert.equal((await sbx.runCode('6 * 7')).text, '42');
  }),
);

test('an execution cut short by timeoutMs does not block the next one', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    // The runCode timeout is client-side only: the SDK aborts the request and
    // the server must notice the closed connection and interrupt the cell.
    await assert.rejects(sbx.runCode('import time; time.sleep(30)', { timeoutMs: 1_000, requestTimeoutMs: 10_000 }), TimeoutError);
    const t0 = Date.now();
    const execution = await sbx.runCode('1+1', { timeoutMs: 10_000, requestTimeoutMs: 10_000 });
    const elapsed = Date.now() - t0;
    assert.equal(execution.text, '2');
    assert.ok(elapsed < 10_000, `the next runCode took ${elapsed} ms`);
  }),
);

test('an aborted execution is interrupted, not restarted: state survives', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.runCode('kept = 41');
    await assert.rejects(sbx.runCode('import time; time.sleep(30)', { timeoutMs: 1_000, requestTimeoutMs: 10_000 }), TimeoutError);
    const execution = await sbx.runCode('kept + 1', { timeoutMs: 10_000, requestTimeoutMs: 10_000 });
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.text, '42');
  }),
);

test('killing the sandbox during runCode ends the call with an error', T, async () => {
  const sbx = await Sandbox.create();
  try {
    const running = sbx.runCode('import time; time.sleep(30)', { timeoutMs: 20_000 });
    running.catch(() => {}); // observed below
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const t0 = Date.now();
    assert.equal(await sbx.kill(), true);
    // The server must cut the stream (not end it cleanly) and answer /health
    // with 502, so that the SDK can say the sandbox was killed.
    const err = await running.then(
      (execution) => assert.fail(`runCode ended normally: ${JSON.stringify(execution)}`),
      (e) => e,
    );
    assert.ok(err instanceof TimeoutError, `expected TimeoutError, got ${err?.name}: ${err?.message}`);
    assert.match(err.message, /killed/);
    assert.ok(Date.now() - t0 < 5_000, 'runCode ended more than 5 s after the kill');
  } finally {
    await sbx.kill().catch(() => {});
  }
});
