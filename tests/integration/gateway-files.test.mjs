// Large files through the official `openai` SDK against `corral serve`:
// a 100 MB upload (/v1/files) goes to disk as it arrives and comes back
// identical, with the gateway's memory far below the file's size; a file of
// several MB reaches the code of a code_interpreter call; the Uploads API
// (/v1/uploads: parts, complete in the order given, cancel, its errors);
// expires_after on files; bodies over their limit answered 413 in OpenAI's
// shape.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import OpenAI, { toFile } from 'openai';

import { INCLUDE_OUTPUTS, MASTER_KEY, logsOf, useGateway } from './gateway-helpers.mjs';

const MB = 1000 * 1000;
const MIB = 1024 * 1024;
const FILE_MAX = 110 * MIB;
const gw = useGateway({ gatewayLines: ['file_max: 110m'] });
const T = { timeout: 180_000 };
const MODEL = 'mock-chat';

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

/** A VmHWM or VmRSS of the gateway's process, in bytes. */
function memoryOf(pid, field) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'));
  assert.ok(m, `no ${field} in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}

/** Sets the process's peak RSS (VmHWM) back to its current RSS. */
function resetPeak(pid) {
  fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

const clientOf = (key) => new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: key, maxRetries: 0, timeout: 120_000 });

async function newKey() {
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  const r = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: '{}',
  });
  assert.equal(r.status, 200);
  return clientOf((await r.json()).key);
}

const isError = (status, param, pattern) => (e) => {
  assert.equal(e.status, status, e.message);
  assert.equal(e.error?.type, 'invalid_request_error');
  assert.equal(e.error?.param ?? null, param);
  if (pattern) assert.match(e.error?.message, pattern);
  return true;
};

async function contentOf(c, id) {
  const r = await c.files.content(id);
  return Buffer.from(await r.arrayBuffer());
}

test('a 100 MB file goes to disk as it comes and back identical, the gateway holding far less', T, async (t) => {
  const c = gw.client;
  const pid = gw.server.pid;
  const data = crypto.randomBytes(100 * MB);
  const want = sha256(data);
  const before = memoryOf(pid, 'VmRSS');
  resetPeak(pid);
  const f = await c.files.create({ file: await toFile(data, 'big.bin'), purpose: 'user_data' });
  assert.equal(f.bytes, 100 * MB);
  assert.equal(f.expires_at, null);
  const got = await contentOf(c, f.id);
  assert.equal(got.length, data.length);
  assert.equal(sha256(got), want);
  const peak = memoryOf(pid, 'VmHWM');
  t.diagnostic(`peak RSS growth: ${((peak - before) / MIB).toFixed(1)} MiB`);
  assert.ok(peak - before < 30 * MIB, `the gateway's peak RSS grew by ${((peak - before) / MIB).toFixed(1)} MiB for a 100 MB file`);
  // on disk once, under the data directory
  assert.equal(fs.statSync(path.join(gw.dir, 'data', 'files', f.id)).size, 100 * MB);
  await c.files.delete(f.id);
});

test('a file of several MB reaches the code of a code_interpreter call', T, async () => {
  const c = gw.client;
  const data = crypto.randomBytes(6 * MB);
  const f = await c.files.create({ file: await toFile(data, 'blob.bin'), purpose: 'user_data' });
  const box = await c.containers.create({ name: 'files', file_ids: [f.id] });
  const m = gw.marker('big-file');
  gw.upstream.script(m, [
    { code: "import hashlib\nb = open('/mnt/data/blob.bin', 'rb').read()\nprint(len(b), hashlib.sha256(b).hexdigest())" },
    { text: 'done' },
  ]);
  const r = await c.responses.create({
    model: MODEL,
    input: `${m} read it`,
    tools: [{ type: 'code_interpreter', container: box.id }],
    include: INCLUDE_OUTPUTS,
  });
  const call = r.output.find((i) => i.type === 'code_interpreter_call');
  assert.equal(call.status, 'completed', JSON.stringify(call));
  assert.equal(logsOf(call).trim(), `${6 * MB} ${sha256(data)}`);
  await c.containers.delete(box.id);
});

test('an Upload of several parts completes in the order given; its file downloads as their concatenation', T, async () => {
  const c = gw.client;
  const parts = [crypto.randomBytes(3 * MIB + 7), crypto.randomBytes(5 * MIB), crypto.randomBytes(1000)];
  const total = parts.reduce((n, p) => n + p.length, 0);
  const u = await c.uploads.create({
    bytes: total,
    filename: 'joined.bin',
    mime_type: 'application/octet-stream',
    purpose: 'assistants',
    expires_after: { anchor: 'created_at', seconds: 7200 },
  });
  assert.match(u.id, /^upload_/);
  assert.equal(u.object, 'upload');
  assert.equal(u.status, 'pending');
  assert.equal(u.bytes, total);
  assert.equal(u.filename, 'joined.bin');
  assert.equal(u.purpose, 'assistants');
  assert.equal(u.expires_at, u.created_at + 3600);
  assert.equal(u.file, null);
  assert.deepEqual(Object.keys(u).sort(), ['bytes', 'created_at', 'expires_at', 'file', 'filename', 'id', 'object', 'purpose', 'status']);
  const made = [];
  for (const p of parts) {
    const part = await c.uploads.parts.create(u.id, { data: await toFile(p, 'part') });
    assert.match(part.id, /^part_/);
    assert.equal(part.object, 'upload.part');
    assert.equal(part.upload_id, u.id);
    assert.equal(typeof part.created_at, 'number');
    made.push(part.id);
  }
  // the order given, not the order made
  const order = [2, 0, 1];
  const done = await c.uploads.complete(u.id, { part_ids: order.map((i) => made[i]) });
  assert.equal(done.status, 'completed');
  assert.equal(done.file.object, 'file');
  assert.equal(done.file.bytes, total);
  assert.equal(done.file.filename, 'joined.bin');
  assert.equal(done.file.purpose, 'assistants');
  assert.equal(done.file.expires_at, done.file.created_at + 7200);
  const got = await contentOf(c, done.file.id);
  assert.equal(sha256(got), sha256(Buffer.concat(order.map((i) => parts[i]))));
  // its parts are gone from the disk; the file is listed
  assert.ok(!fs.existsSync(path.join(gw.dir, 'data', 'uploads', u.id)));
  const listed = [];
  for await (const f of c.files.list()) listed.push(f.id);
  assert.ok(listed.includes(done.file.id));
  // a completed Upload takes no more parts, and is not completed again
  await assert.rejects(c.uploads.parts.create(u.id, { data: await toFile(Buffer.from('x'), 'p') }), isError(400, null, /completed/));
  await assert.rejects(c.uploads.complete(u.id, { part_ids: made }), isError(400, null, /completed/));
  await c.files.delete(done.file.id);
});

test('an Upload with an md5: checked against its parts', T, async () => {
  const c = gw.client;
  const data = crypto.randomBytes(4096);
  const md5 = crypto.createHash('md5').update(data).digest('hex');
  const u = await c.uploads.create({ bytes: data.length, filename: 'a.bin', mime_type: 'application/octet-stream', purpose: 'batch' });
  const p = await c.uploads.parts.create(u.id, { data: await toFile(data, 'p') });
  await assert.rejects(c.uploads.complete(u.id, { part_ids: [p.id], md5: '0'.repeat(32) }), isError(400, 'md5', /md5/));
  const done = await c.uploads.complete(u.id, { part_ids: [p.id], md5 });
  assert.equal(done.status, 'completed');
  assert.equal(done.file.expires_at, null);
  assert.deepEqual(await contentOf(c, done.file.id), data);
});

test('the Uploads API refuses in OpenAI\'s shape: unknown upload or part, sizes, purpose, state, another key', T, async () => {
  const c = gw.client;
  const one = await toFile(Buffer.from('abc'), 'p');
  await assert.rejects(c.uploads.parts.create('upload_nope', { data: one }), isError(404, 'upload_id', /upload_nope/));
  await assert.rejects(c.uploads.complete('upload_nope', { part_ids: [] }), isError(404, 'upload_id'));
  await assert.rejects(c.uploads.cancel('upload_nope'), isError(404, 'upload_id'));
  const base = { filename: 'x.bin', mime_type: 'application/octet-stream', purpose: 'assistants' };
  await assert.rejects(c.uploads.create({ ...base, purpose: 'nonsense' }), isError(400, 'purpose', /nonsense/));
  for (const filename of ['..', 'dir/', 'x'.repeat(256)]) {
    await assert.rejects(c.uploads.create({ ...base, bytes: 1, filename }), isError(400, 'filename', /file name/));
  }
  await assert.rejects(c.uploads.create({ filename: 'x.bin', purpose: 'assistants', bytes: 1 }), isError(400, 'mime_type', /mime_type/));
  await assert.rejects(c.uploads.create({ ...base, bytes: FILE_MAX + 1 }), isError(400, 'bytes', /bytes/));
  await assert.rejects(c.uploads.create({ ...base, bytes: 3, expires_after: { anchor: 'created_at', seconds: 60 } }), isError(400, 'expires_after.seconds'));
  const u = await c.uploads.create({ ...base, bytes: 4 });
  const p = await c.uploads.parts.create(u.id, { data: one });
  await assert.rejects(c.uploads.parts.create(u.id, {}), isError(400, 'data'));
  await assert.rejects(c.uploads.complete(u.id, { part_ids: ['part_nope'] }), isError(400, 'part_ids', /part_nope/));
  await assert.rejects(c.uploads.complete(u.id, { part_ids: [p.id] }), isError(400, 'part_ids', /3 bytes, not the 4/));
  // another key sees none of it
  const other = await newKey();
  await assert.rejects(other.uploads.parts.create(u.id, { data: one }), isError(404, 'upload_id'));
  await assert.rejects(other.uploads.cancel(u.id), isError(404, 'upload_id'));
  // cancelled: its parts go, nothing more is taken
  const cancelled = await c.uploads.cancel(u.id);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal(cancelled.file, null);
  assert.ok(!fs.existsSync(path.join(gw.dir, 'data', 'uploads', u.id)));
  await assert.rejects(c.uploads.parts.create(u.id, { data: one }), isError(400, null, /cancelled/));
  await assert.rejects(c.uploads.cancel(u.id), isError(400, null, /cancelled/));
  await assert.rejects(c.uploads.complete(u.id, { part_ids: [p.id] }), isError(400, null, /cancelled/));
});

/** Sets the stored status of an Upload, as a complete in progress would. */
function setUploadStatus(id, status) {
  const db = path.join(gw.dir, 'data', 'gateway.db');
  execFileSync('python3', [
    '-c',
    'import sqlite3, sys\n' +
      'c = sqlite3.connect(sys.argv[1], timeout=30)\n' +
      'n = c.execute("UPDATE uploads SET status = ? WHERE id = ?", (sys.argv[3], sys.argv[2])).rowcount\n' +
      'c.commit()\n' +
      'assert n == 1, n',
    db,
    id,
    status,
  ]);
}

test('an Upload being completed takes no part, no second complete and no cancel; a complete that fails leaves it pending', T, async () => {
  const c = gw.client;
  const data = Buffer.from('abcd');
  const u = await c.uploads.create({ bytes: 4, filename: 'a.bin', mime_type: 'application/octet-stream', purpose: 'assistants' });
  const p = await c.uploads.parts.create(u.id, { data: await toFile(data, 'p') });
  setUploadStatus(u.id, 'completing'); // another request is joining its parts
  const busy = isError(400, null, /being completed/);
  await assert.rejects(c.uploads.parts.create(u.id, { data: await toFile(data, 'p') }), busy);
  await assert.rejects(c.uploads.complete(u.id, { part_ids: [p.id] }), busy);
  await assert.rejects(c.uploads.cancel(u.id), busy);
  setUploadStatus(u.id, 'pending');
  // a complete refused after it moved the Upload moves it back: it still completes
  await assert.rejects(c.uploads.complete(u.id, { part_ids: [p.id], md5: '0'.repeat(32) }), isError(400, 'md5'));
  const done = await c.uploads.complete(u.id, { part_ids: [p.id] });
  assert.equal(done.status, 'completed');
  assert.equal(Buffer.from(await (await c.files.content(done.file.id)).arrayBuffer()).toString(), 'abcd');
});

/** Moves a stored file's expiry into the past, as an hour's passing would. */
function expireFile(id) {
  const db = path.join(gw.dir, 'data', 'gateway.db');
  execFileSync('python3', [
    '-c',
    'import sqlite3, sys, time\n' +
      'c = sqlite3.connect(sys.argv[1], timeout=30)\n' +
      'n = c.execute("UPDATE files SET expires_at = ? WHERE id = ?", (int(time.time()) - 1, sys.argv[2])).rowcount\n' +
      'c.commit()\n' +
      'assert n == 1, n',
    db,
    id,
  ]);
}

test('expires_after on a file: its expires_at, checked; past it the file is gone and its bytes removed', T, async () => {
  const c = gw.client;
  const data = Buffer.from('short-lived');
  await assert.rejects(
    c.files.create({ file: await toFile(data, 'a.txt'), purpose: 'user_data', expires_after: { anchor: 'created_at', seconds: 10 } }),
    isError(400, 'expires_after.seconds', /3600/),
  );
  await assert.rejects(
    c.files.create({ file: await toFile(data, 'a.txt'), purpose: 'user_data', expires_after: { anchor: 'last_active_at', seconds: 3600 } }),
    isError(400, 'expires_after.anchor'),
  );
  const f = await c.files.create({ file: await toFile(data, 'a.txt'), purpose: 'user_data', expires_after: { anchor: 'created_at', seconds: 3600 } });
  assert.equal(f.expires_at, f.created_at + 3600);
  assert.equal((await c.files.retrieve(f.id)).expires_at, f.expires_at);
  const kept = path.join(gw.dir, 'data', 'files', f.id);
  assert.ok(fs.existsSync(kept));
  expireFile(f.id);
  await assert.rejects(c.files.retrieve(f.id), isError(404, 'id'));
  await assert.rejects(c.files.content(f.id), isError(404, 'id'));
  for await (const x of c.files.list()) assert.notEqual(x.id, f.id);
  // the prune that runs every few seconds removes its bytes
  for (let i = 0; i < 600 && fs.existsSync(kept); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(!fs.existsSync(kept), 'the expired file\'s bytes are still on disk');
});

test('bodies over their limit are answered 413 in OpenAI\'s shape, naming the limit that applied', T, async () => {
  const c = gw.client;
  // a file route: gateway.file_max and the multipart envelope
  await assert.rejects(
    c.files.create({ file: await toFile(Buffer.alloc(FILE_MAX + 128 * 1024), 'huge.bin'), purpose: 'user_data' }),
    isError(413, null, new RegExp(`larger than ${FILE_MAX + 65536} bytes`)),
  );
  // a JSON route: --max-body (10 MiB)
  await assert.rejects(
    c.responses.create({ model: MODEL, input: 'x'.repeat(11 * MIB) }),
    (e) => {
      assert.equal(e.status, 413);
      assert.equal(e.error?.code, 'request_too_large');
      assert.match(e.error?.message, /larger than 10485760 bytes/);
      return true;
    },
  );
  // a part: 64 MiB
  const u = await c.uploads.create({ bytes: 65 * MIB, filename: 'p.bin', mime_type: 'application/octet-stream', purpose: 'assistants' });
  await assert.rejects(
    c.uploads.parts.create(u.id, { data: await toFile(Buffer.alloc(65 * MIB), 'p') }),
    isError(413, null, new RegExp(`larger than ${64 * MIB + 65536} bytes`)),
  );
  await c.uploads.cancel(u.id);
});
