// envd (E2b-Sandbox-Port: 49983) through the official `e2b` SDK: the
// Connect-RPC process.Process service (commands) and /files plus the
// filesystem.Filesystem service (files).
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import { test } from 'node:test';

import { CommandExitError, FileNotFoundError, Sandbox, TimeoutError } from 'e2b';

import { useServer, withSandbox } from './harness.mjs';

const ctx = useServer();

const T = { timeout: 120_000 };
const ALL_BYTES = Uint8Array.from({ length: 256 }, (_, i) => i);

test('commands.run reports a non-zero exit as CommandExitError with stdout, stderr and exitCode', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const err = await sbx.commands.run('echo hi; echo err >&2; exit 3').then(
      (result) => assert.fail(`no CommandExitError, got ${JSON.stringify(result)}`),
      (e) => e,
    );
    assert.ok(err instanceof CommandExitError, `expected CommandExitError, got ${err?.name}: ${err?.message}`);
    assert.equal(err.exitCode, 3);
    assert.equal(err.stdout, 'hi\n');
    assert.equal(err.stderr, 'err\n');
  }),
);

test('commands.run returns stdout, stderr and exit code 0', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const result = await sbx.commands.run('echo hi; echo warn >&2');
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, 'hi\n');
    assert.equal(result.stderr, 'warn\n');
  }),
);

test('commands.run with envs, cwd and output callbacks', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const out = [];
    const err = [];
    const result = await sbx.commands.run('echo "$GREETING"; pwd; echo oops >&2', {
      envs: { GREETING: 'hello' },
      cwd: '/tmp',
      onStdout: (data) => out.push(data),
      onStderr: (data) => err.push(data),
    });
    assert.equal(result.stdout, 'hello\n/tmp\n');
    assert.equal(out.join(''), 'hello\n/tmp\n');
    assert.equal(err.join(''), 'oops\n');
  }),
);

test('a background command streams its output and is waited for', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const out = [];
    const handle = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', {
      background: true,
      onStdout: (data) => out.push(data),
    });
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0, `pid ${handle.pid}`);
    const result = await handle.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, '1\n2\n3\n');
    assert.equal(out.join(''), '1\n2\n3\n');
  }),
);

test('a background command is listed, then killed', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const handle = await sbx.commands.run('sleep 60', { background: true });
    const listed = (await sbx.commands.list()).find((p) => p.pid === handle.pid);
    assert.ok(listed, `pid ${handle.pid} not in commands.list()`);
    assert.equal(listed.cmd, '/bin/bash');
    assert.deepEqual(listed.args, ['-l', '-c', 'sleep 60']);

    const t0 = Date.now();
    assert.equal(await handle.kill(), true);
    const err = await handle.wait().then(
      (result) => assert.fail(`a killed command ended with ${JSON.stringify(result)}`),
      (e) => e,
    );
    assert.ok(err instanceof CommandExitError, `expected CommandExitError, got ${err?.name}: ${err?.message}`);
    assert.notEqual(err.exitCode, 0);
    assert.ok(Date.now() - t0 < 5_000, 'the kill took more than 5 s');
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid), 'still listed after the kill');
    assert.equal(await sbx.commands.kill(handle.pid), false, 'killing it again should find nothing');
  }),
);

test('a command past its timeoutMs is stopped with TimeoutError', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1_000 }), TimeoutError);
    assert.ok(Date.now() - t0 < 10_000, 'the timeout took more than 10 s');
    // The server's deadline starts when the request arrives, a moment after
    // the client's timer: it may stop the command a few milliseconds later.
    let still;
    for (let i = 0; i < 30; i++) {
      still = await sbx.commands.run('pgrep -x sleep || true');
      if (still.stdout === '') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(still.stdout, '', 'the timed-out command is still running after 3 s');
  }),
);

test('sendStdin feeds a background command', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const handle = await sbx.commands.run('head -n 1', { background: true, stdin: true });
    await handle.sendStdin('typed line\n');
    const result = await handle.wait();
    assert.equal(result.stdout, 'typed line\n');
  }),
);

test('files.write/read round-trip all 256 byte values', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const info = await sbx.files.write('/home/user/all-bytes.bin', ALL_BYTES);
    assert.equal(info.path, '/home/user/all-bytes.bin');
    assert.equal(info.name, 'all-bytes.bin');
    assert.equal(info.type, 'file');
    const back = await sbx.files.read('/home/user/all-bytes.bin', { format: 'bytes' });
    assert.ok(back instanceof Uint8Array);
    assert.deepEqual(Buffer.from(back), Buffer.from(ALL_BYTES));
    // The same bytes, seen from a command in the same sandbox.
    const sum = await sbx.commands.run('wc -c < /home/user/all-bytes.bin; od -An -tx1 -N4 -j252 /home/user/all-bytes.bin');
    assert.equal(sum.stdout.replace(/\s+/g, ' ').trim(), '256 fc fd fe ff');
  }),
);

test('files.write/read round-trip 4 MiB of random bytes', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const data = crypto.randomBytes(4 << 20);
    await sbx.files.write('/home/user/big.bin', data);
    const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' });
    assert.equal(back.length, data.length);
    assert.ok(Buffer.from(back).equals(data), 'the bytes read back differ');
    const sum = await sbx.commands.run('sha256sum /home/user/big.bin');
    assert.equal(sum.stdout.split(' ')[0], crypto.createHash('sha256').update(data).digest('hex'));
  }),
);

test('files.write/read text, with a relative path and a missing parent directory', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const text = 'héllo, wörld\nsecond line\n';
    const info = await sbx.files.write('notes/deep/hello.txt', text);
    assert.equal(info.path, '/home/user/notes/deep/hello.txt');
    assert.equal(await sbx.files.read('notes/deep/hello.txt'), text);
    assert.equal(await sbx.files.read('/home/user/notes/deep/hello.txt'), text);
  }),
);

test('files.list shows files and directories', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.files.write('/home/user/listing/a.txt', 'abc');
    await sbx.files.write('/home/user/listing/b.bin', ALL_BYTES);
    assert.equal(await sbx.files.makeDir('/home/user/listing/sub'), true);
    assert.equal(await sbx.files.makeDir('/home/user/listing/sub'), false, 'makeDir of an existing dir');
    const entries = await sbx.files.list('/home/user/listing');
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]));
    assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'b.bin', 'sub']);
    assert.equal(byName['a.txt'].type, 'file');
    assert.equal(byName['a.txt'].size, 3);
    assert.equal(byName['a.txt'].path, '/home/user/listing/a.txt');
    assert.equal(byName['b.bin'].size, 256);
    assert.equal(byName.sub.type, 'dir');
  }),
);

test('files.exists, getInfo, rename and remove', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const file = '/home/user/gone.txt';
    assert.equal(await sbx.files.exists(file), false);
    await sbx.files.write(file, 'soon gone');
    assert.equal(await sbx.files.exists(file), true);
    const info = await sbx.files.getInfo(file);
    assert.equal(info.type, 'file');
    assert.equal(info.size, 9);

    const moved = await sbx.files.rename(file, '/home/user/moved.txt');
    assert.equal(moved.path, '/home/user/moved.txt');
    assert.equal(await sbx.files.exists(file), false);
    assert.equal(await sbx.files.read('/home/user/moved.txt'), 'soon gone');

    await sbx.files.remove('/home/user/moved.txt');
    assert.equal(await sbx.files.exists('/home/user/moved.txt'), false);
    await assert.rejects(sbx.files.read('/home/user/moved.txt'), FileNotFoundError);
  }),
);

// Waits until check() holds, polling every 50 ms for up to 10 s.
async function until(check, what) {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('files.watchDir reports creations, writes and removals, recursively', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.files.makeDir('/home/user/watched/sub');
    const seen = [];
    const handle = await sbx.files.watchDir('/home/user/watched', (ev) => seen.push(`${ev.type} ${ev.name}`), {
      recursive: true,
    });
    await sbx.files.write('/home/user/watched/a.txt', 'one');
    await sbx.files.write('/home/user/watched/sub/b.txt', 'two');
    await sbx.commands.run('mkdir -p /home/user/watched/new && echo 3 > /home/user/watched/new/c.txt');
    await sbx.files.remove('/home/user/watched/a.txt');
    const want = ['create a.txt', 'write a.txt', 'create sub/b.txt', 'create new', 'create new/c.txt', 'remove a.txt'];
    await until(() => want.every((w) => seen.includes(w)), `${want} in ${seen}`);
    await handle.stop();
    const before = seen.length;
    await sbx.files.write('/home/user/watched/late.txt', 'x');
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(seen.length, before, 'no event after stop()');
  }),
);

test('files.write keeps metadata that getInfo, list and watch events report (envd 0.6.x)', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const written = await sbx.files.write('/home/user/meta/a.txt', 'one', {
      metadata: { Owner: 'ann', 'build.id': 'x=1; y=2' },
    });
    assert.deepEqual(written.metadata, { owner: 'ann', 'build.id': 'x=1; y=2' });
    assert.deepEqual((await sbx.files.getInfo('/home/user/meta/a.txt')).metadata, {
      owner: 'ann',
      'build.id': 'x=1; y=2',
    });
    const multi = await sbx.files.write(
      [
        { path: '/home/user/meta/b.txt', data: 'two' },
        { path: '/home/user/meta/c.txt', data: 'three' },
      ],
      { metadata: { batch: '7' } },
    );
    assert.deepEqual(multi.map((f) => f.metadata), [{ batch: '7' }, { batch: '7' }]);
    const listed = Object.fromEntries((await sbx.files.list('/home/user/meta')).map((e) => [e.name, e.metadata]));
    assert.deepEqual(listed, {
      'a.txt': { owner: 'ann', 'build.id': 'x=1; y=2' },
      'b.txt': { batch: '7' },
      'c.txt': { batch: '7' },
    });
    // Each upload replaces the metadata; one without any clears it.
    await sbx.files.write('/home/user/meta/a.txt', 'one again', { metadata: { stage: 'two' } });
    assert.deepEqual((await sbx.files.getInfo('/home/user/meta/a.txt')).metadata, { stage: 'two' });
    await sbx.files.write('/home/user/meta/a.txt', 'plain');
    assert.equal((await sbx.files.getInfo('/home/user/meta/a.txt')).metadata, undefined);
    assert.equal(await sbx.files.read('/home/user/meta/a.txt'), 'plain');
    // A watch with includeEntry gets the entry of what changed, metadata included.
    const events = [];
    const handle = await sbx.files.watchDir('/home/user/meta', (ev) => events.push(ev), {
      includeEntry: true,
      allowNetworkMounts: true,
    });
    await sbx.files.write('/home/user/meta/d.txt', 'four', { metadata: { seen: 'yes' } });
    await until(
      () => events.some((ev) => ev.name === 'd.txt' && ev.entry?.metadata?.seen === 'yes'),
      `an event of d.txt with its entry in ${JSON.stringify(events)}`,
    );
    const ev = events.find((e) => e.name === 'd.txt' && e.entry);
    assert.equal(ev.entry.path, '/home/user/meta/d.txt');
    assert.equal(ev.entry.type, 'file');
    await handle.stop();
  }),
);

test('pty.create runs an interactive shell that takes input and resizes', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const decoder = new TextDecoder();
    let out = '';
    const term = await sbx.pty.create({ cols: 90, rows: 20, onData: (data) => (out += decoder.decode(data)) });
    const type = (text) => sbx.pty.sendInput(term.pid, new TextEncoder().encode(text));
    await type('stty size; echo "term=$TERM"\n');
    await until(() => out.includes('20 90') && out.includes('term=xterm-256color'), `the size in ${out}`);
    await sbx.pty.resize(term.pid, { cols: 132, rows: 50 });
    await type('stty size\n');
    await until(() => out.includes('50 132'), `the new size in ${out}`);
    const listed = await sbx.commands.list();
    assert.ok(listed.some((p) => p.pid === term.pid), 'the terminal is listed');
    assert.equal(await sbx.pty.kill(term.pid), true);
    const result = await term.wait().catch((e) => e);
    assert.equal(result.exitCode, -1);
    assert.equal(await sbx.pty.kill(term.pid), false);
  }),
);

test('files.write with gzip and with a stream uses octet-stream uploads', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const data = crypto.randomBytes(300_000);
    const info = await sbx.files.write('/home/user/up/gz.bin', data, { gzip: true });
    assert.equal(info.path, '/home/user/up/gz.bin');
    assert.deepEqual(Buffer.from(await sbx.files.read('/home/user/up/gz.bin', { format: 'bytes' })), data);
    const stream = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('streamed '));
        controller.enqueue(new TextEncoder().encode('text'));
        controller.close();
      },
    });
    await sbx.files.write('/home/user/up/stream.txt', stream);
    assert.equal(await sbx.files.read('/home/user/up/stream.txt'), 'streamed text');
  }),
);

test('closeStdin ends the input of a background command', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const handle = await sbx.commands.run('wc -c', { background: true, stdin: true });
    await sbx.commands.sendStdin(handle.pid, 'twelve bytes');
    await sbx.commands.closeStdin(handle.pid);
    const result = await handle.wait();
    assert.equal(result.stdout.trim(), '12');
  }),
);

// A request to the server with a Host header as E2B names sandbox hosts.
function viaHost(url, host, { method = 'GET', body } = {}) {
  const { pathname, search } = new URL(url);
  const { port } = new URL(ctx.server.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: pathname + search, method, headers: { Host: host } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('a secure sandbox: the SDK token is checked, and signed URLs reach files', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const res = await fetch(new URL('/execute', ctx.server.url), {
      method: 'POST',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
      body: JSON.stringify({ code: '1' }),
    });
    assert.equal(res.status, 401, 'no X-Access-Token, no execution');
    await sbx.files.write('/home/user/shared.txt', 'for the link');
    const host = `49983-${sbx.sandboxId}.sandbox.test`;
    const down = await sbx.downloadUrl('/home/user/shared.txt', { useSignatureExpiration: 60 });
    assert.match(down, /signature=v1_/);
    assert.deepEqual(await viaHost(down, host), { status: 200, body: 'for the link' });
    const up = await sbx.uploadUrl('/home/user/uploaded.txt');
    const boundary = 'corral-test';
    const form = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\nvia link\r\n--${boundary}--\r\n`;
    const posted = await new Promise((resolve, reject) => {
      const { pathname, search } = new URL(up);
      const req = http.request(
        { host: '127.0.0.1', port: new URL(ctx.server.url).port, path: pathname + search, method: 'POST',
          headers: { Host: host, 'Content-Type': `multipart/form-data; boundary=${boundary}` } },
        (r) => { r.resume(); r.on('end', () => resolve(r.statusCode)); },
      );
      req.on('error', reject);
      req.end(form);
    });
    assert.equal(posted, 200);
    assert.equal(await sbx.files.read('/home/user/uploaded.txt'), 'via link');
    const tampered = down.replace('shared.txt', 'other.txt');
    assert.equal((await viaHost(tampered, host)).status, 401);
  }),
);
