// corral's MCP server through the official MCP SDK's Client: `corral mcp`
// over stdio (StdioClientTransport) and the streamable-HTTP endpoint /mcp
// of `corral serve` (StreamableHTTPClientTransport) with API keys as
// tenants. docs/mcp.md is the contract.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { CORRAL, randomApiKey, useServer } from './harness.mjs';

const KEY_A = randomApiKey();
const KEY_B = randomApiKey();
const ADMIN = randomApiKey();
const ctx = useServer({ apiKeys: [KEY_A, KEY_B], args: ['--admin-key', ADMIN], gateway: false });

const CALL = { timeout: 120_000 }; // a first call starts a sandbox, on a busy host too
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The text of a tool result's text content. */
function textOf(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
}

/** An MCP client over HTTP with key (null: none), as a Bearer token or
 * (header 'x-api-key') as E2B's header. */
async function httpClient(key, header = 'authorization') {
  const headers = !key ? {} : header === 'authorization' ? { Authorization: `Bearer ${key}` } : { 'X-API-Key': key };
  const transport = new StreamableHTTPClientTransport(new URL(`${ctx.server.directUrl}/mcp`), {
    requestInit: { headers },
  });
  const client = new Client({ name: 'corral-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

/** Ends an HTTP client's session (DELETE) and closes it. */
async function endHttp({ client, transport }) {
  await transport.terminateSession();
  await client.close();
}

// ---- stdio ----

const stdioProcesses = [];

/** `corral mcp` under a Client; its stderr is kept for the checks at the end. */
async function stdioClient(args = []) {
  const transport = new StdioClientTransport({ command: CORRAL, args: ['mcp', ...args], stderr: 'pipe' });
  const record = { stderr: '', transport };
  transport.stderr.on('data', (chunk) => {
    record.stderr += chunk.toString();
  });
  const client = new Client({ name: 'corral-test', version: '1.0.0' });
  await client.connect(transport);
  record.pid = transport.pid;
  // How it ended: the transport ends stdin, then sends SIGTERM after 2 s and
  // SIGKILL after 4; corral mcp is to exit by itself, with status 0.
  transport._process.once('exit', (code, signal) => {
    record.exit = { code, signal };
  });
  stdioProcesses.push(record);
  return { client, record };
}

function processAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

after(() => {
  for (const { pid, stderr, exit } of stdioProcesses) {
    assert.equal(processAlive(pid), false, `corral mcp (pid ${pid}) still runs after its client closed`);
    assert.deepEqual(exit, { code: 0, signal: null }, `corral mcp's exit; stderr:\n${stderr}`);
    for (const marker of ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:']) {
      assert.ok(!stderr.includes(marker), `corral mcp reported ${marker}:\n${stderr}`);
    }
  }
});

// ---- what both transports do alike ----

async function checksState(client) {
  const first = await client.callTool({ name: 'run_code', arguments: { code: 'x = 41' } }, undefined, CALL);
  assert.equal(first.isError, false, textOf(first));
  const second = await client.callTool({ name: 'run_code', arguments: { code: 'x + 1' } }, undefined, CALL);
  assert.equal(second.isError, false, textOf(second));
  assert.match(textOf(second), /42/);
  assert.deepEqual(second.structuredContent.results, ['42']);
  assert.equal(second.structuredContent.sandbox_id, first.structuredContent.sandbox_id);
}

async function checksChart(client) {
  const result = await client.callTool(
    {
      name: 'run_code',
      arguments: { code: 'import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])\nplt.show()\nprint("drawn")' },
    },
    undefined,
    CALL,
  );
  assert.equal(result.isError, false, textOf(result));
  const images = result.content.filter((c) => c.type === 'image');
  assert.equal(images.length, 1, JSON.stringify(result.content.map((c) => c.type)));
  assert.equal(images[0].mimeType, 'image/png');
  const png = Buffer.from(images[0].data, 'base64');
  assert.deepEqual(png.subarray(0, 8), PNG_SIGNATURE);
  assert.equal(result.structuredContent.images, 1);
  assert.equal(result.structuredContent.stdout, 'drawn\n');
}

async function checksCommands(client) {
  const failed = await client.callTool(
    { name: 'run_command', arguments: { command: 'echo out; echo err >&2; exit 3' } },
    undefined,
    CALL,
  );
  assert.equal(failed.isError, false, 'a non-zero exit is not a tool error');
  assert.equal(failed.structuredContent.exit_code, 3);
  assert.equal(failed.structuredContent.stdout, 'out\n');
  assert.equal(failed.structuredContent.stderr, 'err\n');
  assert.match(textOf(failed), /exit status: 3/);
  const ok = await client.callTool({ name: 'run_command', arguments: { command: 'pwd', cwd: '/tmp' } }, undefined, CALL);
  assert.equal(ok.isError, false, textOf(ok));
  assert.equal(ok.structuredContent.exit_code, 0);
  assert.equal(ok.structuredContent.stdout, '/tmp\n');
}

async function checksErrors(client) {
  const raised = await client.callTool(
    { name: 'run_code', arguments: { code: 'def f():\n    raise ValueError("no good")\nf()' } },
    undefined,
    CALL,
  );
  assert.equal(raised.isError, true);
  assert.match(textOf(raised), /ValueError: no good/);
  assert.match(textOf(raised), /Traceback|line 2/);
  assert.doesNotMatch(textOf(raised), /\x1b\[/, 'no terminal colours in the text');
  assert.equal(raised.structuredContent.error.name, 'ValueError');
  const missing = await client.callTool({ name: 'read_file', arguments: { path: 'nope/missing.txt' } }, undefined, CALL);
  assert.equal(missing.isError, true);
  assert.match(textOf(missing), /nope\/missing\.txt: no such file or directory/);
  const unknown = await client.callTool(
    { name: 'run_code', arguments: { code: '1', sandbox_id: 'f'.repeat(32) } },
    undefined,
    CALL,
  );
  assert.equal(unknown.isError, true);
  assert.match(textOf(unknown), /no sandbox/);
}

async function checksFiles(client) {
  const written = await client.callTool(
    { name: 'write_file', arguments: { path: 'notes/hello.txt', content: 'héllo\nwörld\n' } },
    undefined,
    CALL,
  );
  assert.equal(written.isError, false, textOf(written));
  const read = await client.callTool({ name: 'read_file', arguments: { path: '/home/user/notes/hello.txt' } }, undefined, CALL);
  assert.equal(read.isError, false, textOf(read));
  assert.equal(textOf(read), 'héllo\nwörld\n');
  const listed = await client.callTool({ name: 'list_files', arguments: { path: 'notes' } }, undefined, CALL);
  assert.equal(listed.isError, false, textOf(listed));
  assert.deepEqual(listed.structuredContent.entries.map((e) => [e.name, e.type]), [['hello.txt', 'file']]);
  const seen = await client.callTool({ name: 'run_code', arguments: { code: 'open("notes/hello.txt").read()' } }, undefined, CALL);
  assert.match(textOf(seen), /wörld/);
}

async function checksProgress(client) {
  const events = [];
  const result = await client.callTool(
    {
      name: 'run_code',
      arguments: { code: 'import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.3)' },
    },
    undefined,
    { ...CALL, onprogress: (p) => events.push(p) },
  );
  assert.equal(result.isError, false, textOf(result));
  assert.ok(events.length >= 1, 'progress notifications came before the result');
  for (let i = 1; i < events.length; i++) assert.ok(events[i].progress > events[i - 1].progress);
  assert.equal(events.map((e) => e.message).join(''), '0\n1\n2\n3\n4\n');
}

/** A call the client cancels (the SDK sends notifications/cancelled) stops
 * its code or command: the next call runs at once, the kernel's state kept
 * (checksState's x). Without the cancel the next call would wait 600 s. */
async function checksCancel(client) {
  for (const [name, args] of [
    ['run_code', { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(600)', timeout_seconds: 600 }],
    ['run_command', { command: 'echo sleeping; sleep 600', timeout_seconds: 600 }],
  ]) {
    const controller = new AbortController();
    const call = client.callTool({ name, arguments: args }, undefined, {
      timeout: 700_000,
      signal: controller.signal,
      onprogress: () => controller.abort('the user stopped it'),
    });
    await assert.rejects(call, /stopped it|abort/i);
    const next = await client.callTool({ name: 'run_code', arguments: { code: 'x + 1' } }, undefined, CALL);
    assert.deepEqual(next.structuredContent.results, ['42'], textOf(next));
  }
}

async function checksLanguages(client) {
  const call = (language, code) => client.callTool({ name: 'run_code', arguments: { language, code } }, undefined, CALL);
  assert.equal((await call('javascript', 'const base = 40')).isError, false);
  const js = await call('javascript', 'base + 2');
  assert.equal(js.isError, false, textOf(js));
  assert.deepEqual(js.structuredContent.results, ['42'], 'a JavaScript value, its state kept');
  const ts = await call('typescript', 'const twice = <T,>(x: T): T[] => [x, x];\ntwice<number>(21)');
  assert.deepEqual(ts.structuredContent.results, ['[ 21, 21 ]'], textOf(ts));
  assert.equal((await call('bash', 'cd /tmp')).isError, false);
  const sh = await call('bash', 'pwd; exit_code() { return 4; }; exit_code');
  assert.equal(sh.isError, true, 'a failing shell cell is an error');
  assert.equal(sh.structuredContent.stdout, '/tmp\n', 'the shell kept its directory');
  assert.match(textOf(sh), /4/);
  const r = await call('r', 'plot(1:3)\nsum(1:3)');
  assert.equal(r.isError, false, textOf(r));
  assert.deepEqual(r.structuredContent.results, ['[1] 6', '<R plot 504x504 px>'], 'the value, then the plot');
  assert.equal(r.content.filter((c) => c.type === 'image').length, 1, 'the R plot as an image');
  const java = await call('java', '1');
  assert.equal(java.isError, true);
  assert.match(textOf(java), /language 'java' is not supported \(supported: python, javascript, typescript, bash, r\)/);
}

async function checksTools(client) {
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), [
    'create_sandbox',
    'kill_sandbox',
    'list_files',
    'list_sandboxes',
    'read_file',
    'run_code',
    'run_command',
    'write_file',
  ]);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.ok(t.description.length > 20, t.name);
  }
  assert.deepEqual(byName.run_code.inputSchema.required, ['code']);
  assert.equal(byName.run_code.inputSchema.properties.code.type, 'string');
  assert.equal(byName.run_code.inputSchema.properties.sandbox_id.type, 'string');
  assert.deepEqual(byName.run_code.inputSchema.properties.language.enum, ['python', 'javascript', 'typescript', 'bash', 'r']);
  assert.deepEqual(byName.run_command.inputSchema.required, ['command']);
  assert.deepEqual(byName.write_file.inputSchema.required, ['path', 'content']);
  assert.deepEqual(byName.kill_sandbox.inputSchema.required, ['sandbox_id']);
}

// ---- stdio ----

test('stdio: corral mcp answers initialize and lists its tools', async () => {
  const { client } = await stdioClient();
  try {
    assert.equal(client.getServerVersion().name, 'corral');
    assert.ok(client.getServerCapabilities().tools);
    await checksTools(client);
  } finally {
    await client.close();
  }
});

test('stdio: state, charts, commands, files, errors, progress, cancels and languages', async () => {
  const { client } = await stdioClient();
  try {
    await checksState(client);
    await checksChart(client);
    await checksCommands(client);
    await checksFiles(client);
    await checksErrors(client);
    await checksProgress(client);
    await checksCancel(client);
    await checksLanguages(client);
  } finally {
    await client.close();
  }
});

test('stdio: create_sandbox, list_sandboxes and kill_sandbox', async () => {
  const { client } = await stdioClient(['--max-sandboxes', '2']);
  try {
    const made = await client.callTool({ name: 'create_sandbox', arguments: { timeout_seconds: 600 } }, undefined, CALL);
    assert.equal(made.isError, false, textOf(made));
    const id = made.structuredContent.sandbox_id;
    assert.match(id, /^[0-9a-f]{32}$/);
    const ran = await client.callTool({ name: 'run_code', arguments: { code: 'y = 7\ny * 6', sandbox_id: id } }, undefined, CALL);
    assert.deepEqual(ran.structuredContent.results, ['42']);
    const other = await client.callTool({ name: 'run_code', arguments: { code: "'y' in globals()" } }, undefined, CALL);
    assert.deepEqual(other.structuredContent.results, ['False'], 'the default sandbox is another one');
    const full = await client.callTool({ name: 'create_sandbox', arguments: {} }, undefined, CALL);
    assert.equal(full.isError, true);
    assert.match(textOf(full), /most sandboxes/);
    const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
    assert.equal(listed.structuredContent.sandboxes.length, 2);
    const killed = await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } }, undefined, CALL);
    assert.equal(killed.isError, false, textOf(killed));
    const gone = await client.callTool({ name: 'run_code', arguments: { code: '1', sandbox_id: id } }, undefined, CALL);
    assert.equal(gone.isError, true);
    assert.match(textOf(gone), /no sandbox/);
  } finally {
    await client.close();
  }
});

test('stdio: results and errors share one --max-output budget a call, images one of their own', async () => {
  const { client } = await stdioClient(['--max-output', '8KiB']);
  try {
    const big = await client.callTool({ name: 'run_code', arguments: { code: 's = "a" * (8 << 20)\ns' } }, undefined, CALL);
    assert.equal(big.isError, false, textOf(big).slice(0, 500));
    assert.ok(JSON.stringify(big).length < 40_000, `a result of ${JSON.stringify(big).length} bytes`);
    assert.equal(big.structuredContent.results_truncated, true);
    assert.match(textOf(big), /\[results cut: \d+ bytes of them are not shown/);
    const many = await client.callTool(
      { name: 'run_code', arguments: { code: 'for i in range(20000):\n    display(i)' } },
      undefined,
      CALL,
    );
    assert.ok(JSON.stringify(many).length < 40_000, `a result of ${JSON.stringify(many).length} bytes`);
    assert.ok(many.structuredContent.results.length < 20000);
    assert.match(textOf(many), /results left out whole/);
    const raised = await client.callTool(
      { name: 'run_code', arguments: { code: 'raise ValueError("v" * (8 << 20))' } },
      undefined,
      CALL,
    );
    assert.equal(raised.isError, true);
    assert.ok(JSON.stringify(raised).length < 40_000, `a result of ${JSON.stringify(raised).length} bytes`);
    assert.equal(raised.structuredContent.error.name, 'ValueError');
    assert.equal(raised.structuredContent.error_truncated, true);
    assert.match(textOf(raised), /\[error cut: \d+ bytes of it are not shown\]/);
    // images have a budget of their own: 16 a call, 8 MiB of base64 together
    const small = await client.callTool(
      {
        name: 'run_code',
        arguments: {
          code: 'from IPython.display import display\nimport base64\npng = base64.b64encode(bytes(6000)).decode()\nfor i in range(18):\n    display({"image/png": png, "text/plain": "img"}, raw=True)',
        },
      },
      undefined,
      CALL,
    );
    assert.equal(small.content.filter((c) => c.type === 'image').length, 16, textOf(small));
    assert.equal(small.structuredContent.images_dropped, 2);
    assert.match(textOf(small), /\[images cut: 2 more were made/);
    const large = await client.callTool(
      {
        name: 'run_code',
        arguments: {
          code: 'from IPython.display import display\nimport base64\npng = base64.b64encode(bytes(3 << 20)).decode()\nfor i in range(3):\n    display({"image/png": png, "text/plain": "img"}, raw=True)',
        },
      },
      undefined,
      CALL,
    );
    assert.equal(large.content.filter((c) => c.type === 'image').length, 2, textOf(large));
    assert.equal(large.structuredContent.images_dropped, 1);
    const bad = await client.callTool(
      { name: 'run_code', arguments: { code: "display({'image/png': 'not base64 at all!!', 'text/plain': 'x'}, raw=True)" } },
      undefined,
      CALL,
    );
    assert.equal(bad.content.filter((c) => c.type === 'image').length, 0);
    assert.match(textOf(bad), /\[images left out: 1 the code displayed are not valid base64\]/);
    assert.equal(bad.structuredContent.images_dropped, 1);
  } finally {
    await client.close();
  }
});

test('stdio: read_file through a link, names that are not UTF-8, and a replaced default sandbox', async () => {
  const { client } = await stdioClient();
  try {
    const made = await client.callTool(
      {
        name: 'run_command',
        arguments: {
          command: "head -c 1200000 /dev/zero | tr '\\0' a > big.txt && ln -s big.txt link.txt && mkdir odd && touch odd/$'bad\\xff' && ln -s $'t\\xff' odd/badlink",
        },
      },
      undefined,
      CALL,
    );
    assert.equal(made.structuredContent.exit_code, 0, textOf(made));
    const read = await client.callTool({ name: 'read_file', arguments: { path: 'link.txt' } }, undefined, CALL);
    assert.equal(read.isError, false, textOf(read).slice(0, 300));
    assert.equal(read.structuredContent.truncated, true);
    assert.equal(read.structuredContent.size, 1200000);
    assert.match(textOf(read), /\[cut: the first 1048576 of 1200000 bytes are shown\]/);
    const listed = await client.callTool({ name: 'list_files', arguments: { path: 'odd' } }, undefined, CALL);
    assert.equal(listed.isError, false, textOf(listed));
    assert.deepEqual(
      listed.structuredContent.entries.map((e) => [e.name, e.type, e.target]),
      [
        ['badlink', 'symlink', 't\ufffd'],
        ['bad\ufffd', 'file', undefined],
      ],
    );
    assert.doesNotMatch(textOf(listed), /\(null\)/);
    const { sandboxes } = (await client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL)).structuredContent;
    await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: sandboxes[0].sandbox_id } }, undefined, CALL);
    const again = await client.callTool({ name: 'read_file', arguments: { path: '/etc/os-release' } }, undefined, CALL);
    assert.equal(again.isError, false, textOf(again));
    assert.match(textOf(again), /^\[the session's sandbox had ended: this ran in a new one/);
  } finally {
    await client.close();
  }
});

test('stdio: the default sandbox lives as long as a call on it runs, past --sandbox-timeout', async () => {
  const { client } = await stdioClient(['--sandbox-timeout', '2s']);
  try {
    const slow = await client.callTool({ name: 'run_code', arguments: { code: 'import time\ntime.sleep(4)\nx = "kept"\nx' } }, undefined, CALL);
    assert.equal(slow.isError, false, textOf(slow));
    assert.deepEqual(slow.structuredContent.results, ["'kept'"]);
  } finally {
    await client.close();
  }
});

/** `corral mcp` driven by hand, to close its stdin or signal it while a
 * call runs: send(msg), next(pred) the first message read that matches,
 * exited its exit {code, signal}. */
function rawStdio() {
  const child = spawn(CORRAL, ['mcp'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d.toString();
  });
  const seen = [];
  const waiters = [];
  let buf = '';
  child.stdout.on('data', (d) => {
    buf += d.toString();
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const msg = JSON.parse(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      seen.push(msg);
      for (const w of [...waiters]) {
        if (w.pred(msg)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(msg);
        }
      }
    }
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return {
    child,
    exited,
    stderr: () => stderr,
    send: (msg) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...msg })}\n`),
    next: (pred) => {
      const found = seen.find(pred);
      return found ? Promise.resolve(found) : new Promise((resolve) => waiters.push({ pred, resolve }));
    },
  };
}

async function rawInit(raw) {
  raw.send({ id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  await raw.next((m) => m.id === 0);
  raw.send({ method: 'notifications/initialized' });
}

test('stdio: stdin closing while a call runs and another waits ends corral mcp, its sandboxes too', async () => {
  const raw = rawStdio();
  await rawInit(raw);
  raw.send({
    id: 1,
    method: 'tools/call',
    params: { name: 'run_command', arguments: { command: 'echo started; sleep 600', timeout_seconds: 600 }, _meta: { progressToken: 'p' } },
  });
  raw.send({ id: 2, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'sleep 600', timeout_seconds: 600 } } });
  await raw.next((m) => m.method === 'notifications/progress');
  raw.child.stdin.end();
  assert.deepEqual(await raw.exited, { code: 0, signal: null }, raw.stderr());
});

test('stdio: ping is answered while a call runs, and a cancel drops a call still queued', { timeout: 300_000 }, async () => {
  const raw = rawStdio();
  await rawInit(raw);
  const sleeper = (id, extra = {}) => ({
    id,
    method: 'tools/call',
    params: { name: 'run_command', arguments: { command: 'echo started; sleep 600', timeout_seconds: 600 }, ...extra },
  });
  raw.send(sleeper(1, { _meta: { progressToken: 'p' } }));
  await raw.next((m) => m.method === 'notifications/progress');
  raw.send(sleeper(2));
  raw.send({ id: 3, method: 'ping' });
  assert.deepEqual((await raw.next((m) => m.id === 3)).result, {});
  raw.send({ id: 4, method: 'tools/list' });
  assert.ok((await raw.next((m) => m.id === 4)).result.tools.length > 0);
  raw.send({ method: 'notifications/cancelled', params: { requestId: 2 } });
  raw.send({ method: 'notifications/cancelled', params: { requestId: 1 } });
  raw.send({ id: 5, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'echo next' } } });
  // without the queued call dropped, this would wait behind its 600 s
  const next = await raw.next((m) => m.id === 5);
  assert.equal(next.result.structuredContent.stdout, 'next\n');
  raw.child.stdin.end();
  assert.deepEqual(await raw.exited, { code: 0, signal: null }, raw.stderr());
});

test("stdio: SIGTERM while the first sandbox is being made ends corral mcp", async () => {
  const raw = rawStdio();
  await rawInit(raw);
  raw.send({ id: 1, method: 'tools/call', params: { name: 'run_code', arguments: { code: 'import time\ntime.sleep(600)', timeout_seconds: 600 } } });
  raw.child.kill('SIGTERM');
  assert.deepEqual(await raw.exited, { code: 0, signal: null }, raw.stderr());
  for (const marker of ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:']) {
    assert.ok(!raw.stderr().includes(marker), raw.stderr());
  }
});

// ---- streamable HTTP ----

test('http: tools, state, charts, commands, files, errors, progress, cancels and languages', async () => {
  const c = await httpClient(KEY_A);
  try {
    assert.equal(c.client.getServerVersion().name, 'corral');
    assert.match(c.transport.sessionId, /^[0-9a-f]{32}$/);
    await checksTools(c.client);
    await checksState(c.client);
    await checksChart(c.client);
    await checksCommands(c.client);
    await checksFiles(c.client);
    await checksErrors(c.client);
    await checksProgress(c.client);
    await checksCancel(c.client);
    await checksLanguages(c.client);
  } finally {
    await endHttp(c);
  }
});

test('http: no key, or a wrong one, is 401', async () => {
  for (const headers of [{}, { Authorization: 'Bearer nope' }]) {
    const res = await fetch(`${ctx.server.directUrl}/mcp`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
    });
    assert.equal(res.status, 401);
    const body = await res.json();
    assert.equal(body.jsonrpc, '2.0');
    assert.equal(typeof body.error.message, 'string');
  }
  await assert.rejects(httpClient(null), /401|Unauthorized/);
});

test('http: a key sees and uses only its own sandboxes and sessions', async () => {
  const a = await httpClient(KEY_A);
  const b = await httpClient(KEY_B);
  try {
    const madeA = await a.client.callTool({ name: 'run_code', arguments: { code: 'secret = "A"' } }, undefined, CALL);
    const idA = madeA.structuredContent.sandbox_id;
    const madeB = await b.client.callTool({ name: 'create_sandbox', arguments: {} }, undefined, CALL);
    const idB = madeB.structuredContent.sandbox_id;

    for (const [name, args] of [
      ['run_code', { code: 'secret', sandbox_id: idA }],
      ['run_command', { command: 'true', sandbox_id: idA }],
      ['read_file', { path: '/etc/hostname', sandbox_id: idA }],
      ['write_file', { path: 'x.txt', content: 'x', sandbox_id: idA }],
      ['list_files', { sandbox_id: idA }],
      ['kill_sandbox', { sandbox_id: idA }],
    ]) {
      const r = await b.client.callTool({ name, arguments: args }, undefined, CALL);
      assert.equal(r.isError, true, `${name} on another key's sandbox`);
      assert.match(textOf(r), new RegExp(`no sandbox '${idA}'`), name);
    }
    const listB = await b.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
    assert.deepEqual(listB.structuredContent.sandboxes.map((s) => s.sandbox_id), [idB]);
    const listA = await a.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
    const idsA = listA.structuredContent.sandboxes.map((s) => s.sandbox_id);
    assert.ok(idsA.includes(idA));
    assert.ok(!idsA.includes(idB), "key A's list does not show key B's sandbox");
    const still = await a.client.callTool({ name: 'run_code', arguments: { code: 'secret' } }, undefined, CALL);
    assert.match(textOf(still), /A/, "key A's sandbox lives on");

    // A's session id with B's key: as if it did not exist.
    const res = await fetch(`${ctx.server.directUrl}/mcp`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        Authorization: `Bearer ${KEY_B}`,
        'Mcp-Session-Id': a.transport.sessionId,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    assert.equal(res.status, 404);
    await res.body?.cancel();
    const del = await fetch(`${ctx.server.directUrl}/mcp`, {
      method: 'DELETE',
      headers: { Authorization: `Bearer ${KEY_B}`, 'Mcp-Session-Id': a.transport.sessionId },
    });
    assert.equal(del.status, 404);
    await del.body?.cancel();
    const alive = await a.client.callTool({ name: 'run_code', arguments: { code: 'secret' } }, undefined, CALL);
    assert.match(textOf(alive), /A/, "A's session survived B's DELETE");
  } finally {
    await endHttp(a);
    await endHttp(b);
  }
});

test('http: a request without a session, or with an unknown one, is refused', async () => {
  const post = (headers) =>
    fetch(`${ctx.server.directUrl}/mcp`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${KEY_A}`, ...headers },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
  const none = await post({});
  assert.equal(none.status, 400);
  await none.body?.cancel();
  const unknown = await post({ 'Mcp-Session-Id': '0'.repeat(32) });
  assert.equal(unknown.status, 404);
  await unknown.body?.cancel();
  const get = await fetch(`${ctx.server.directUrl}/mcp`, { headers: { Accept: 'text/event-stream', Authorization: `Bearer ${KEY_A}` } });
  assert.equal(get.status, 405);
  await get.body?.cancel();
});

test("http: X-API-Key is a key too, and an admin key sees and uses every key's sandboxes", async () => {
  const a = await httpClient(KEY_A, 'x-api-key');
  const admin = await httpClient(ADMIN);
  try {
    const made = await a.client.callTool({ name: 'run_code', arguments: { code: 'mine = 7' } }, undefined, CALL);
    assert.equal(made.isError, false, textOf(made));
    const id = made.structuredContent.sandbox_id;
    const listed = await admin.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
    assert.ok(listed.structuredContent.sandboxes.some((s) => s.sandbox_id === id));
    const ran = await admin.client.callTool({ name: 'run_code', arguments: { code: 'mine * 6', sandbox_id: id } }, undefined, CALL);
    assert.deepEqual(ran.structuredContent.results, ['42']);
  } finally {
    await endHttp(admin);
    await endHttp(a);
  }
});

test("http: run_code and run_command are in the audit trail, as the key's", async () => {
  const c = await httpClient(KEY_B);
  try {
    const code = await c.client.callTool({ name: 'run_code', arguments: { code: 'print("audited")\n6 * 7' } }, undefined, CALL);
    assert.equal(code.isError, false, textOf(code));
    const id = code.structuredContent.sandbox_id;
    const cmd = await c.client.callTool({ name: 'run_command', arguments: { command: 'echo cmd-out; exit 4' } }, undefined, CALL);
    assert.equal(cmd.structuredContent.exit_code, 4);
    const r = await fetch(`${ctx.server.directUrl}/audit/executions?surface=mcp&sandbox_id=${id}&limit=10`, {
      headers: { 'X-API-Key': KEY_B },
    });
    assert.equal(r.status, 200);
    const records = (await r.json()).data.reverse();
    assert.deepEqual(
      records.map((x) => [x.kind, x.outcome, x.code]),
      [
        ['code', 'ok', 'print("audited")\n6 * 7'],
        ['command', 'error', 'echo cmd-out; exit 4'],
      ],
    );
    for (const x of records) {
      assert.equal(x.surface, 'mcp');
      assert.match(x.key, /^sha256:[0-9a-f]{12}$/);
      assert.equal(x.template, 'default');
    }
    assert.equal(records[0].stdout, 'audited\n');
    assert.equal(records[0].result_bytes, 2);
    assert.equal(records[1].stdout, 'cmd-out\n');
    assert.equal(records[1].exit_code, 4);
    const other = await fetch(`${ctx.server.directUrl}/audit/executions?surface=mcp&sandbox_id=${id}`, {
      headers: { 'X-API-Key': KEY_A },
    });
    assert.deepEqual((await other.json()).data, [], "another key does not see B's records");
  } finally {
    await endHttp(c);
  }
});

test('http: a command whose sandbox is killed while it runs is an error, not an exit status', async () => {
  const c = await httpClient(KEY_A);
  const other = await httpClient(KEY_A);
  try {
    const made = await c.client.callTool({ name: 'create_sandbox', arguments: {} }, undefined, CALL);
    const id = made.structuredContent.sandbox_id;
    let started;
    const running = new Promise((resolve) => {
      started = resolve;
    });
    const call = c.client.callTool(
      { name: 'run_command', arguments: { command: 'echo started; sleep 600', timeout_seconds: 600, sandbox_id: id } },
      undefined,
      { timeout: 700_000, onprogress: () => started() },
    );
    await running;
    const killed = await other.client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: id } }, undefined, CALL);
    assert.equal(killed.isError, false, textOf(killed));
    const result = await call;
    assert.equal(result.isError, true, textOf(result));
    assert.match(textOf(result), new RegExp(`the sandbox ${id} ended while the command ran`));
  } finally {
    await endHttp(other);
    await endHttp(c);
  }
});

test("http: a key's 33rd session ends its least recently used idle one; a refused initialize opens none", async () => {
  const first = await httpClient(KEY_B);
  const ran = await first.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
  assert.equal(ran.isError, false);
  // 32 newer sessions left open, as clients that close without a DELETE
  // leave them: the key holds at most 32, so the first one has ended
  const newer = [];
  for (let i = 0; i < 32; i++) newer.push(await httpClient(KEY_B));
  await assert.rejects(first.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL), /404|Session not found/);
  const last = newer[newer.length - 1];
  const still = await last.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
  assert.equal(still.isError, false);
  for (const c of newer) await endHttp(c);
  await first.client.close();

  const refused = await fetch(`${ctx.server.directUrl}/mcp`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY_B}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { capabilities: {} } }),
  });
  assert.equal(refused.headers.get('mcp-session-id'), null);
  assert.equal((await refused.json()).error.code, -32602);
});

test('http: a call answered as JSON that the client cancels gets no body, not its progress', async () => {
  const url = `${ctx.server.directUrl}/mcp`;
  const headers = { Authorization: `Bearer ${KEY_A}`, 'Content-Type': 'application/json', Accept: 'application/json' };
  const post = (body, session) =>
    fetch(url, { method: 'POST', headers: session ? { ...headers, 'Mcp-Session-Id': session } : headers, body: JSON.stringify({ jsonrpc: '2.0', ...body }) });
  const init = await post({ id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  const session = init.headers.get('mcp-session-id');
  assert.ok(session);
  await post({ method: 'notifications/initialized' }, session);
  const call = (id, command) => ({ id, method: 'tools/call', params: { name: 'run_command', arguments: { command, timeout_seconds: 600 }, _meta: { progressToken: `p${id}` } } });
  const slow = post(call(5, 'echo started; touch started; sleep 600'), session);
  // the slow call has printed once this one sees its file
  const waited = await post(call(6, 'while [ ! -e started ]; do sleep 0.05; done'), session);
  assert.equal(waited.status, 200);
  await post({ method: 'notifications/cancelled', params: { requestId: 5 } }, session);
  const cancelled = await slow;
  assert.equal(cancelled.status, 202);
  assert.equal(await cancelled.text(), '');
  const ended = await fetch(url, { method: 'DELETE', headers: { ...headers, 'Mcp-Session-Id': session } });
  assert.equal(ended.status, 204);
});

test("http: a session's sandboxes end with it (DELETE)", async () => {
  const c = await httpClient(KEY_A);
  const sessionId = c.transport.sessionId;
  const made = await c.client.callTool({ name: 'run_code', arguments: { code: 'print("up")' } }, undefined, CALL);
  const id = made.structuredContent.sandbox_id;
  const extra = await c.client.callTool({ name: 'create_sandbox', arguments: {} }, undefined, CALL);
  const extraId = extra.structuredContent.sandbox_id;
  await endHttp(c);

  // The session is gone...
  const res = await fetch(`${ctx.server.directUrl}/mcp`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', Authorization: `Bearer ${KEY_A}`, 'Mcp-Session-Id': sessionId },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  assert.equal(res.status, 404);
  await res.body?.cancel();
  // ...and so are its sandboxes: a new session of the same key sees neither.
  const next = await httpClient(KEY_A);
  try {
    const list = await next.client.callTool({ name: 'list_sandboxes', arguments: {} }, undefined, CALL);
    const ids = list.structuredContent.sandboxes.map((s) => s.sandbox_id);
    assert.ok(!ids.includes(id) && !ids.includes(extraId), JSON.stringify(ids));
    const gone = await next.client.callTool({ name: 'run_command', arguments: { command: 'true', sandbox_id: id } }, undefined, CALL);
    assert.equal(gone.isError, true);
  } finally {
    await endHttp(next);
  }
});
