// Kernels beyond Python through the official @e2b/code-interpreter SDK:
// runCode(code, {language}) and createCodeContext({language}) for
// javascript, typescript, bash and r (docs/languages.md). Each language:
// state across cells, streamed output in order, errors, rich results, an
// interrupt (the SDK's timeoutMs: the server interrupts the cell when the
// client leaves) and the server's own execution timeout.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import { Sandbox, TimeoutError } from '@e2b/code-interpreter';

import { eventually, useServer, withSandbox } from './harness.mjs';

let dir = null;
// A template whose pooled sandbox starts a JavaScript and a bash kernel ahead;
// one whose JavaScript kernel cannot start.
const ctx = useServer(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-languages-'));
  const config = path.join(dir, 'corral.yaml');
  fs.writeFileSync(
    config,
    [
      'templates:',
      '  warm-langs:',
      '    preload: []',
      '    pool_size: 1',
      '    languages: [javascript, sh, js]', // js is javascript again: one kernel
      // Too few tasks for Node's threads: its JavaScript kernel cannot start ahead.
      '  no-node:',
      '    preload: []',
      '    pool_size: 1',
      '    languages: [javascript]',
      '    limits: {pids: 10}',
      '',
    ].join('\n'),
  );
  // The server's own limit of an execution: a cell that sleeps past it is a timeout.
  return { config, args: ['--execute-timeout', '4s'] };
});
after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const T = { timeout: 180_000 };
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The execution without an error (the error in the message otherwise). */
function ok(execution, what) {
  assert.equal(execution.error, undefined, `${what} raised: ${JSON.stringify(execution.error)}`);
  return execution;
}

/** Runs code, collecting [stream, text] events of onStdout/onStderr as they come. */
async function runStreamed(sbx, code, opts) {
  const events = [];
  const execution = await sbx.runCode(code, {
    ...opts,
    onStdout: (m) => events.push(['stdout', m.line]),
    onStderr: (m) => events.push(['stderr', m.line]),
  });
  const at = (text) => events.findIndex(([, line]) => line.includes(text));
  return { execution, events, at };
}

/* ---- JavaScript ---- */

test('javascript: state across cells, the last value, require, top-level await', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const js = { language: 'javascript' };
    ok(await sbx.runCode('let n = 40; const twice = (x) => x * 2; function add(a, b) { return a + b }', js), 'declarations');
    const value = ok(await sbx.runCode('add(n, 1) + 1', js), 'a call');
    assert.equal(value.text, '42', 'the last expression is the main result, as Node shows it');
    assert.equal(ok(await sbx.runCode('twice(n)', js), 'a const arrow').text, '80');
    assert.equal(ok(await sbx.runCode("({ a: 1, b: 'x' })", js), 'an object').text, "{ a: 1, b: 'x' }");
    // A string's quotes are taken off, as E2B's server does for every language.
    assert.equal(ok(await sbx.runCode("require('node:path').join('a', 'b')", js), 'require').text, 'a/b');
    const awaited = ok(
      await sbx.runCode('const later = await new Promise((resolve) => setTimeout(() => resolve(n + 2), 50));\nlater', js),
      'top-level await',
    );
    assert.equal(awaited.text, '42', 'a Promise awaited at top level gives its value');
    assert.equal(ok(await sbx.runCode('later + 1', js), 'a const declared beside an await').text, '43');
    const nothing = ok(await sbx.runCode('n = 1;\nundefined', js), 'undefined');
    assert.deepEqual(nothing.results, [], 'undefined is no result');
  }),
);

test('javascript: console output streams in order; errors have name, message and stack', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const code = [
      "console.log('out-1');",
      "console.error('err-1');",
      'await new Promise((resolve) => setTimeout(resolve, 300));',
      "console.log('out-2');",
    ].join('\n');
    const { execution, events, at } = await runStreamed(sbx, code, { language: 'javascript' });
    ok(execution, 'the logging cell');
    assert.equal(execution.logs.stdout.join(''), 'out-1\nout-2\n');
    assert.equal(execution.logs.stderr.join(''), 'err-1\n');
    assert.ok(at('out-1') < at('err-1') && at('err-1') < at('out-2'), `out of order: ${JSON.stringify(events)}`);

    const failed = await sbx.runCode('function f() { return null.x }\nf()', { language: 'javascript' });
    assert.equal(failed.error?.name, 'TypeError');
    assert.match(failed.error.value, /null/);
    assert.match(failed.error.traceback, /at f /, 'the stack names the function');
    const thrown = await sbx.runCode("throw new RangeError('too far')", { language: 'javascript' });
    assert.equal(thrown.error?.name, 'RangeError');
    assert.equal(thrown.error.value, 'too far');
    const syntax = await sbx.runCode('let = = 1', { language: 'javascript' });
    assert.equal(syntax.error?.name, 'SyntaxError');
  }),
);

test('javascript: display() gives HTML and PNG results', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    const execution = ok(
      await sbx.runCode(`display.html('<b>bold</b>');\ndisplay.png('${png}');\n'end'`, { language: 'javascript' }),
      'display',
    );
    const html = execution.results.find((r) => r.html);
    assert.equal(html?.html, '<b>bold</b>');
    const image = execution.results.find((r) => r.png);
    assert.ok(image, `a PNG result: ${JSON.stringify(execution.results)}`);
    assert.ok(Buffer.from(image.png, 'base64').subarray(0, 8).equals(PNG_SIGNATURE));
    assert.equal(execution.text, 'end');
  }),
);

/* ---- TypeScript ---- */

test('typescript: interfaces, generics and annotations run; state is kept', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const ts = { language: 'typescript' };
    ok(
      await sbx.runCode(
        [
          'interface Point { x: number; y: number }',
          'function first<T>(items: T[]): T { return items[0] }',
          'const p: Point = { x: 3, y: 4 };',
          'enum Color { Red = 1, Green }',
        ].join('\n'),
        ts,
      ),
      'declarations',
    );
    assert.equal(ok(await sbx.runCode('first<number>([p.x, p.y]) + Color.Green', ts), 'a generic call').text, '5');
    const typed = ok(await sbx.runCode('const names: string[] = await Promise.resolve(["a", "b"]);\nnames.length as number', ts), 'await');
    assert.equal(typed.text, '2');
    const failed = await sbx.runCode('const q: number = (undefined as any).y', ts);
    assert.equal(failed.error?.name, 'TypeError');
  }),
);

/* ---- bash ---- */

test('bash: cd, variables and functions persist; output streams; a failure has its status', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const sh = { language: 'bash' };
    ok(await sbx.runCode('mkdir -p /tmp/langs/deep && cd /tmp/langs/deep\nGREETING=hello\ngreet() { echo "$GREETING $1"; }', sh), 'setup');
    const where = ok(await sbx.runCode('pwd; greet world', sh), 'pwd');
    assert.equal(where.logs.stdout.join(''), '/tmp/langs/deep\nhello world\n', 'cd and the function carry over');
    const { execution, events, at } = await runStreamed(sbx, 'echo out-1; echo err-1 >&2; sleep 0.3; echo out-2', sh);
    ok(execution, 'the streaming cell');
    assert.ok(at('out-1') < at('err-1') && at('err-1') < at('out-2'), `out of order: ${JSON.stringify(events)}`);
    const failed = await sbx.runCode('echo before; ls /nonexistent-dir', sh);
    assert.ok(failed.error, 'a failing last command is an error');
    assert.match(failed.error.value, /2/, `the exit status is in the error: ${JSON.stringify(failed.error)}`);
    assert.equal(failed.logs.stdout.join(''), 'before\n');
    assert.match(failed.logs.stderr.join(''), /nonexistent-dir/);
    const exited = await sbx.runCode('false', sh);
    assert.match(exited.error?.value ?? '', /1/);
    assert.equal(ok(await sbx.runCode('pwd', sh), 'after errors').logs.stdout.join(''), '/tmp/langs/deep\n');
  }),
);

test("bash: a cell's exec redirections last for that cell only", T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const sh = { language: 'bash' };
    const logs = (execution) => [execution.logs.stdout.join(''), execution.logs.stderr.join('')];
    const hidden = ok(await sbx.runCode('exec >/tmp/cell-out 2>/dev/null; echo in-file; echo lost >&2', sh), 'redirected');
    assert.deepEqual(logs(hidden), ['', '']);
    assert.deepEqual(logs(ok(await sbx.runCode('echo out; echo err >&2; cat /tmp/cell-out', sh), 'the next cell')),
      ['out\nin-file\n', 'err\n']);
    const closed = await sbx.runCode('exec 1>&- 2>&-; echo nowhere', sh);
    assert.deepEqual(logs(closed), ['', '']);
    assert.deepEqual(logs(ok(await sbx.runCode('echo back', sh), 'after closing')), ['back\n', '']);
  }),
);

/* ---- R ---- */

test('r: values printed as R prints them, a data frame, a plot as PNG, errors', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const r = { language: 'r' };
    ok(await sbx.runCode('x <- c(1, 2, 3)\nsq <- function(v) v^2', r), 'assignments');
    assert.equal(ok(await sbx.runCode('sum(sq(x))', r), 'a value').text, '[1] 14');
    const df = ok(await sbx.runCode('data.frame(name = c("a", "b"), value = c(10, 20))', r), 'a data frame');
    assert.match(df.text, /name value/);
    assert.match(df.text, /1\s+a\s+10/);
    assert.match(df.text, /2\s+b\s+20/);
    const plot = ok(await sbx.runCode('plot(x, sq(x), main = "squares")', r), 'a plot');
    const image = plot.results.find((res) => res.png);
    assert.ok(image, `a PNG result: ${JSON.stringify(plot.results.map((res) => Object.keys(res)))}`);
    assert.ok(Buffer.from(image.png, 'base64').subarray(0, 8).equals(PNG_SIGNATURE), 'the plot is a PNG');
    const { execution, events, at } = await runStreamed(sbx, 'cat("out-1\\n"); message("err-1"); Sys.sleep(0.3); cat("out-2\\n")', r);
    ok(execution, 'the streaming cell');
    assert.ok(at('out-1') < at('err-1') && at('err-1') < at('out-2'), `out of order: ${JSON.stringify(events)}`);
    const failed = await sbx.runCode('y <- 5\nstop("boom")\ny <- 6', r);
    assert.ok(failed.error, 'stop() is an error');
    assert.match(failed.error.value, /boom/);
    assert.equal(ok(await sbx.runCode('y', r), 'after the error').text, '[1] 5', 'the cell stopped at the error');
  }),
);

/* ---- contexts, interrupts, timeouts ---- */

test('contexts of every language live side by side in one sandbox', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const langs = ['python', 'javascript', 'typescript', 'bash', 'r'];
    const contexts = {};
    for (const language of langs) {
      contexts[language] = await sbx.createCodeContext({ language, cwd: '/tmp' });
      assert.equal(contexts[language].language, language);
      assert.equal(contexts[language].cwd, '/tmp');
    }
    const set = { python: 'v = "py"', javascript: 'var v = "js"', typescript: 'let v: string = "ts"', bash: 'v=sh', r: 'v <- "r"' };
    const get = { python: 'print(v)', javascript: 'console.log(v)', typescript: 'console.log(v)', bash: 'echo $v', r: 'cat(v, "\\n", sep = "")' };
    const want = { python: 'py', javascript: 'js', typescript: 'ts', bash: 'sh', r: 'r' };
    for (const language of langs) ok(await sbx.runCode(set[language], { context: contexts[language] }), `${language} set`);
    for (const language of langs) {
      const got = ok(await sbx.runCode(get[language], { context: contexts[language] }), `${language} get`);
      assert.equal(got.logs.stdout.join(''), `${want[language]}\n`, `${language} keeps its own state`);
    }
    const listed = await sbx.listCodeContexts();
    for (const language of langs) {
      assert.ok(listed.some((c) => c.id === contexts[language].id && c.language === language), `${language} is listed`);
    }
    await sbx.removeCodeContext(contexts.javascript);
    const still = ok(await sbx.runCode(get.bash, { context: contexts.bash }), 'bash after removing javascript');
    assert.equal(still.logs.stdout.join(''), 'sh\n');
  }),
);

const LONG = {
  javascript: 'await new Promise((resolve) => setTimeout(resolve, 60_000))',
  typescript: 'const wait: number = 60_000;\nawait new Promise<void>((resolve) => setTimeout(resolve, wait))',
  bash: 'sleep 60',
  r: 'Sys.sleep(60)',
};
const BUSY = {
  javascript: 'while (true) {}',
  typescript: 'let spins: number = 0;\nwhile (true) { spins++ }',
  bash: 'while :; do :; done',
  r: 'repeat {}',
};
const KEEP = {
  javascript: ['var kept = 41', 'kept + 1', '42'],
  typescript: ['var kept: number = 41', 'kept + 1', '42'],
  bash: ['kept=41', 'echo $((kept + 1))', null],
  r: ['kept <- 41', 'kept + 1', '[1] 42'],
};

for (const language of Object.keys(LONG)) {
  test(`${language}: an interrupted cell (the client's timeoutMs) keeps the context's state`, T, () =>
    withSandbox(Sandbox, async (sbx) => {
      const context = await sbx.createCodeContext({ language });
      const [set, get, want] = KEEP[language];
      ok(await sbx.runCode(set, { context }), 'the state');
      for (const code of [LONG[language], BUSY[language]]) {
        await assert.rejects(sbx.runCode(code, { context, timeoutMs: 1_500, requestTimeoutMs: 30_000 }), TimeoutError);
      }
      const after = ok(await sbx.runCode(get, { context, timeoutMs: 30_000 }), 'the next cell');
      if (want === null) assert.equal(after.logs.stdout.join(''), '42\n');
      else assert.equal(after.text, want);
    }),
  );

  test(`${language}: a cell past the server's execution timeout is a TimeoutError, the state stays`, T, () =>
    withSandbox(Sandbox, async (sbx) => {
      const context = await sbx.createCodeContext({ language });
      const [set, get, want] = KEEP[language];
      ok(await sbx.runCode(set, { context }), 'the state');
      const slow = await sbx.runCode(BUSY[language], { context, timeoutMs: 60_000 });
      assert.equal(slow.error?.name, 'TimeoutError', JSON.stringify(slow.error));
      const after = ok(await sbx.runCode(get, { context, timeoutMs: 30_000 }), 'the next cell');
      if (want === null) assert.equal(after.logs.stdout.join(''), '42\n');
      else assert.equal(after.text, want);
    }),
  );
}

test('a template starts its languages ahead: the first context of each takes that kernel', T, async () => {
  // run alone, the test may come before the pool is full
  assert.ok(await eventually(async () => (await metric(POOLED)) === 1, { timeoutMs: 60_000 }), 'the pool of warm-langs holds its sandbox');
  const sbx = await Sandbox.create('warm-langs');
  try {
    // The kernels already run when the sandbox is handed out.
    const ps = await sbx.commands.run('ps -eo pid=,args=');
    const pidOf = (re) => ps.stdout.split('\n').filter((l) => re.test(l)).map((l) => Number(l.trim().split(/\s+/)[0]));
    const nodes = pidOf(/^\s*\d+ node -e /);
    const shells = pidOf(/^\s*\d+ \S*python3 -I -c .* bash$/);
    assert.equal(nodes.length, 1, `one JavaScript kernel started ahead:\n${ps.stdout}`);
    assert.equal(shells.length, 1, `one bash kernel started ahead:\n${ps.stdout}`);
    const js = ok(await sbx.runCode('process.pid', { language: 'javascript' }), 'javascript');
    assert.equal(js.text, String(nodes[0]), 'runCode in javascript ran in the kernel started ahead');
    const context = await sbx.createCodeContext({ language: 'bash' });
    const sh = ok(await sbx.runCode('echo $PPID', { context }), 'bash');
    assert.equal(sh.logs.stdout.join(''), `${shells[0]}\n`, 'the bash context took the kernel started ahead');
  } finally {
    await sbx.kill();
  }
});

test('a language without a kernel is refused with the list of those there are', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    // requestTimeoutMs: the SDK leaves its request timer running after an
    // error answer, which holds the test's process that long (60 s by default).
    const err = await sbx.runCode('System.out.println(1)', { language: 'java', requestTimeoutMs: 10_000 }).then(
      () => null,
      (e) => e,
    );
    assert.ok(err, 'java is refused');
    assert.match(err.message, /400/, 'a 400 (the SDK shows only its status)');
    await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), /400/);
    // What the answer says, read as it comes.
    const raw = await fetch(new URL('/contexts', ctx.server.url), {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
      body: JSON.stringify({ language: 'cobol' }),
    });
    assert.equal(raw.status, 400);
    assert.match(await raw.text(), /'cobol' is not supported \(supported: python, javascript, typescript, bash, r\)/);
  }),
);

test("a context's working directory that cannot be entered is a 400 naming it (not a missing runtime); a cwd that is no string is refused", T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const post = async (body) => {
      const raw = await fetch(new URL('/contexts', ctx.server.url), {
        method: 'POST',
        headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
        body: JSON.stringify(body),
      });
      return { status: raw.status, text: await raw.text() };
    };
    for (const language of ['python', 'javascript', 'bash']) {
      assert.deepEqual(await post({ language, cwd: '/nonexistent' }), {
        status: 400,
        text: 'cannot enter directory /nonexistent: No such file or directory',
      }, language);
      assert.deepEqual(await post({ language, cwd: '/etc/hostname' }), {
        status: 400,
        text: 'cannot enter directory /etc/hostname: Not a directory',
      }, language);
    }
    // The SDK's own error for it: a 400, not a server error.
    await assert.rejects(sbx.createCodeContext({ language: 'bash', cwd: '/nonexistent/dir' }), (e) => {
      assert.match(e.message, /^400 /);
      return true;
    });
    const numeric = await post({ language: 'javascript', cwd: 5 });
    assert.deepEqual(numeric, { status: 400, text: "'cwd' must be a string" });
    // None of those was left behind as a context.
    const bad = ['/nonexistent', '/etc/hostname', '/nonexistent/dir'];
    assert.deepEqual((await sbx.listCodeContexts()).filter((c) => bad.includes(c.cwd)), []);
  }),
);

/** The value of the first series of the server's /metrics that re matches (0: none). */
async function metric(re) {
  const text = await (await fetch(`${ctx.server.directUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => re.test(l));
  return line ? Number(line.trim().split(/\s+/).pop()) : 0;
}

/** Host PIDs of the processes under pid whose name is comm. */
function descendantsNamed(pid, comm) {
  const parent = new Map();
  const name = new Map();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      name.set(Number(entry), stat.slice(stat.indexOf('(') + 1, close));
      parent.set(Number(entry), Number(stat.slice(close + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const under = (p) => {
    for (let up = parent.get(p); up; up = parent.get(up)) if (up === pid) return true;
    return false;
  };
  return [...name].filter(([p, n]) => n === comm && under(p)).map(([p]) => p);
}

const POOLED = /^corral_sandboxes\{.*state="pooled".*template="warm-langs".*\} /;
const HITS = /^corral_sandbox_pool_takes_total\{.*template="warm-langs".*result="hit".*\} /;

test('a kernel started ahead that died in the pool fails neither the create nor the first cell', T, async () => {
  for (const opts of [{}, { envs: { LANG_TEST: 'kept' } }]) {
    const full = await eventually(async () => (await metric(POOLED)) === 1, { timeoutMs: 60_000 });
    assert.ok(full, 'the pool of warm-langs holds its sandbox');
    const nodes = descendantsNamed(ctx.server.pid, 'node');
    assert.equal(nodes.length, 1, 'the pooled sandbox runs one JavaScript kernel');
    process.kill(nodes[0], 'SIGKILL');
    assert.ok(await eventually(() => !fs.existsSync(`/proc/${nodes[0]}`), { timeoutMs: 30_000 }), 'the kernel ended');
    const hits = await metric(HITS);
    const sbx = await Sandbox.create('warm-langs', opts);
    try {
      assert.equal(await metric(HITS), hits + 1, 'the pooled sandbox was handed out');
      const js = ok(await sbx.runCode('process.env.LANG_TEST ?? "unset"', { language: 'javascript' }), 'javascript');
      assert.equal(js.text, opts.envs ? 'kept' : 'unset');
    } finally {
      await sbx.kill();
    }
  }
});

test("a template's language whose kernel cannot start ahead keeps its sandboxes in the pool, said once", T, async () => {
  const pooled = /^corral_sandboxes\{.*state="pooled".*template="no-node".*\} /;
  const hits = /^corral_sandbox_pool_takes_total\{.*template="no-node".*result="hit".*\} /;
  assert.ok(await eventually(async () => (await metric(pooled)) === 1, { timeoutMs: 60_000 }), 'the pool of no-node fills');
  const before = await metric(hits);
  const sbx = await Sandbox.create('no-node');
  try {
    assert.equal(await metric(hits), before + 1, 'the pooled sandbox was handed out');
    assert.equal(ok(await sbx.runCode('6 * 7'), 'python').text, '42');
    const err = await sbx.runCode('1', { language: 'javascript' }).then(() => null, (e) => e);
    assert.match(String(err?.message), /500/, 'a JavaScript context cannot start there either');
  } finally {
    await sbx.kill();
  }
  const said = ctx.server.stderr.split('\n').filter((l) => l.includes("template 'no-node': its pooled sandboxes cannot start a javascript kernel ahead"));
  assert.equal(said.length, 1, ctx.server.stderr.slice(-3000));
});

test('a context removed twice at once while it runs: one removal, the other finds it gone, the server lives', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const call = async (method, path, body) => {
      const res = await fetch(new URL(path, ctx.server.url), {
        method,
        headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, text: await res.text() };
    };
    for (let round = 0; round < 3; round++) {
      const context = JSON.parse((await call('POST', '/contexts', { language: 'bash' })).text);
      const running = call('POST', '/execute', { code: 'echo started; sleep 3; echo ended', context_id: context.id });
      // both removals look the context up while it runs (the server's 4 s
      // execute timeout keeps the cell short; code-interpreter.test.mjs
      // checks what a removal does to the execution)
      await eventually(async () => (await sbx.commands.run('pgrep -x sleep || true')).stdout.trim() !== '');
      const removals = await Promise.all([call('DELETE', `/contexts/${context.id}`), call('DELETE', `/contexts/${context.id}`)]);
      assert.deepEqual(removals.map((r) => r.status).sort(), [200, 404], JSON.stringify(removals));
      const ran = await running;
      assert.equal(ran.status, 200);
      assert.match(ran.text, /started/);
      assert.equal((await call('POST', '/execute', { code: 'echo x', context_id: context.id })).status, 404);
    }
    assert.equal(ok(await sbx.runCode('6 * 7'), 'python after the removals').text, '42');
  }),
);
