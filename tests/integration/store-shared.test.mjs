// Two gateways sharing one PostgreSQL store (`gateway.store:
// postgresql://...`), each with a data directory of its own, as two fronts
// of a fleet: through the official `openai` SDK, what one of them made (an
// upload, a container and its files, the files its code wrote, a stored
// response, an Upload's parts) is served by the other once the first has stopped: listed,
// downloaded byte for byte, read by code in a sandbox of the second, and
// continued with previous_response_id; and a file one rewrites is not
// served stale by the other. The bytes of files live in the store (in
// chunks), so the second needs nothing of the first; with the store down,
// what needs them is answered 503 and nothing half-written appears.
// PostgreSQL is a server of this test's own (tests/postgres).
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import OpenAI, { APIError, toFile } from 'openai';

import { CI_TOOL, INCLUDE_OUTPUTS, MASTER_KEY, useGateway } from './gateway-helpers.mjs';
import { eventually } from './harness.mjs';
import { usePostgres } from './postgres.mjs';
import { contentText } from './upstream.mjs';

const pg = usePostgres();

before(() => {
  pg.init();
});

// "B": the gateway of useGateway; "A", a peer started by each test.
const gw = useGateway({ gatewayLines: [`store: "${pg.url}"`] });

after(pg.remove); // after the gateway's own after(): it stops first

const T = { timeout: 180_000 };
const MODEL = 'mock-chat';
const CHUNK = 1 << 20; // the store's chunk of bytes (STORE_BLOB_CHUNK)

const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? '(no stdout)';
const clientOf = (server, key = MASTER_KEY) => new OpenAI({ baseURL: server.gatewayUrl, apiKey: key, maxRetries: 0, timeout: 120_000 });
const sha256 = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');

async function readAll(list) {
  const out = [];
  for await (const x of list) out.push(x);
  return out;
}

/** The bytes of a download (a Response of the SDK's content()). */
async function bytesOf(download) {
  return Buffer.from(await download.arrayBuffer());
}

/** The APIError a call fails with, or a failed assertion. */
async function failure(call, what) {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof APIError, `${what}: expected an APIError, got ${err?.constructor?.name}: ${err?.message}`);
    return err;
  }
  assert.fail(`${what}: succeeded while the store was down`);
}

function assertUnreachable(err, what) {
  assert.equal(err.status, 503, `${what}: ${err.message}`);
  assert.equal(err.code, 'service_unavailable', what);
  assert.match(err.message, /store is unreachable/i, what);
}

test('files and a container made through one gateway are served by another once the first has stopped', T, async () => {
  const A = await gw.startPeer();
  const a = clientOf(A);
  const b = gw.client;

  // through A: an upload of several chunks, a container holding it and a
  // CSV, and code that writes a file of its own
  const blob = crypto.randomBytes(3 * CHUNK + 123);
  const upload = await a.files.create({ file: await toFile(blob, 'data.bin'), purpose: 'user_data' });
  assert.equal(upload.bytes, blob.length);
  assert.equal(pg.number(`SELECT count(*) FROM blobs WHERE container_id = '' AND id = '${upload.id}'`), 4);
  const box = await a.containers.create({ name: 'shared', file_ids: [upload.id] });
  const csv = 'city,people\nOslo,709000\nBergen,291000\nTrondheim,212000\n';
  const cities = await a.containers.files.create(box.id, { file: await toFile(Buffer.from(csv), 'cities.csv') });
  const m1 = gw.marker('shared-write');
  gw.upstream.script(m1, [
    { code: "open('/mnt/data/note.txt', 'w').write('written through A')\nprint(len(open('/mnt/data/data.bin', 'rb').read()))" },
    (body, ctx) => ({ text: `read ${stdoutOf(ctx.lastCodeOutput)} bytes` }),
  ]);
  const r1 = await a.responses.create({ model: MODEL, input: `${m1} Write a note.`, tools: [{ type: 'code_interpreter', container: box.id }] });
  assert.equal(r1.output_text, `read ${blob.length} bytes`);

  // A goes: B needs nothing of it
  await A.stop();

  const files = await readAll(await b.containers.files.list(box.id, { order: 'asc' }));
  assert.deepEqual(
    files.map((f) => [f.path, f.bytes]),
    [
      ['/mnt/data/data.bin', blob.length],
      ['/mnt/data/cities.csv', csv.length],
      ['/mnt/data/note.txt', 'written through A'.length],
    ],
  );
  const byPath = Object.fromEntries(files.map((f) => [f.path, f]));
  assert.equal(byPath['/mnt/data/cities.csv'].id, cities.id);
  assert.ok(sha256(await bytesOf(await b.containers.files.content.retrieve(byPath['/mnt/data/data.bin'].id, { container_id: box.id }))) === sha256(blob), 'the container copy of the upload, byte for byte');
  assert.equal((await bytesOf(await b.containers.files.content.retrieve(cities.id, { container_id: box.id }))).toString(), csv);
  assert.equal((await bytesOf(await b.containers.files.content.retrieve(byPath['/mnt/data/note.txt'].id, { container_id: box.id }))).toString(), 'written through A');
  const back = await bytesOf(await b.files.content(upload.id));
  assert.equal(back.length, blob.length);
  assert.ok(back.equals(blob), 'the upload, byte for byte');

  // code run through B, in a sandbox of B's, reads what A's wrote
  const m2 = gw.marker('shared-read');
  gw.upstream.script(m2, [
    {
      code:
        "import hashlib, pandas as pd\n" +
        "b = open('/mnt/data/data.bin', 'rb').read()\n" +
        "print(len(b), hashlib.sha256(b).hexdigest(), int(pd.read_csv('/mnt/data/cities.csv').people.sum()), open('/mnt/data/note.txt').read())",
    },
    (body, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) }),
  ]);
  const r2 = await b.responses.create({ model: MODEL, input: `${m2} Check the files.`, tools: [{ type: 'code_interpreter', container: box.id }] });
  assert.equal(r2.output_text, `${blob.length} ${sha256(blob)} 1212000 written through A`);
  assert.equal(r2.output.find((i) => i.type === 'code_interpreter_call').container_id, box.id);

  // deleting through B deletes the bytes in the store too
  await b.files.delete(upload.id);
  await b.containers.delete(box.id);
  assert.equal(pg.number(`SELECT count(*) FROM blobs WHERE id = '${upload.id}' OR container_id = '${box.id}'`), 0);
});

test('an Upload gets parts through either gateway and is completed through the other', T, async () => {
  const A = await gw.startPeer();
  const a = clientOf(A);
  const b = gw.client;
  const parts = [crypto.randomBytes(2 * CHUNK + 5), crypto.randomBytes(300)];
  const total = parts[0].length + parts[1].length;
  const u = await a.uploads.create({ bytes: total, filename: 'two.bin', mime_type: 'application/octet-stream', purpose: 'assistants' });
  const p0 = await a.uploads.parts.create(u.id, { data: await toFile(parts[0], 'p0') });
  const p1 = await b.uploads.parts.create(u.id, { data: await toFile(parts[1], 'p1') });
  // the parts' bytes are in the store, under the Upload
  assert.equal(pg.number(`SELECT count(*) FROM blobs WHERE container_id = '${u.id}'`), 4);
  await A.stop();
  const done = await b.uploads.complete(u.id, { part_ids: [p1.id, p0.id] });
  assert.equal(done.status, 'completed');
  const back = await bytesOf(await b.files.content(done.file.id));
  assert.ok(back.equals(Buffer.concat([parts[1], parts[0]])), 'the file, its parts in the order given');
  assert.equal(pg.number(`SELECT count(*) FROM blobs WHERE container_id = '${u.id}'`), 0);
  assert.equal(pg.number(`SELECT count(*) FROM upload_parts WHERE upload_id = '${u.id}'`), 0);
  await b.files.delete(done.file.id);
});

test('a gateway\'s prune removes its local copies that another gateway made useless: parts of an Upload it completed, a file it deleted', T, async () => {
  const A = await gw.startPeer();
  const a = clientOf(A);
  const b = gw.client;
  const data = crypto.randomBytes(1000);
  const u = await a.uploads.create({ bytes: data.length, filename: 'one.bin', mime_type: 'application/octet-stream', purpose: 'assistants' });
  const p = await b.uploads.parts.create(u.id, { data: await toFile(data, 'p') });
  const parts = path.join(gw.dir, 'data', 'uploads', u.id);
  assert.ok(fs.existsSync(parts), 'the part is kept on the disk of the gateway that took it');
  const done = await a.uploads.complete(u.id, { part_ids: [p.id] });
  assert.equal(done.status, 'completed');
  // the file read through B: B keeps a copy of it
  assert.ok((await bytesOf(await b.files.content(done.file.id))).equals(data));
  const copy = path.join(gw.dir, 'data', 'files', done.file.id);
  assert.ok(fs.existsSync(copy), 'B keeps a copy of the file it read');
  await a.files.delete(done.file.id);
  // B's prune (every few seconds) finds both useless
  assert.ok(await eventually(() => !fs.existsSync(parts), { timeoutMs: 60_000 }), 'B still has the parts of the completed Upload');
  assert.ok(await eventually(() => !fs.existsSync(copy), { timeoutMs: 60_000 }), 'B still has its copy of the deleted file');
});

test('a response through one gateway is continued with previous_response_id through another', T, async () => {
  const A = await gw.startPeer();
  const a = clientOf(A);
  const m1 = gw.marker('shared-prev-1');
  gw.upstream.script(m1, [
    { code: "secret = 'heron-77'\nopen('/mnt/data/secret.txt', 'w').write(secret)\nprint('kept')" },
    { text: 'Noted: the code word is kept in secret.txt.' },
  ]);
  const r1 = await a.responses.create({ model: MODEL, input: `${m1} Keep the code word heron-77.`, tools: [CI_TOOL] });
  assert.equal(r1.status, 'completed');
  const box = r1.output.find((i) => i.type === 'code_interpreter_call').container_id;
  await A.stop();

  const m2 = gw.marker('shared-prev-2');
  gw.upstream.script(m2, [
    { code: "print(open('/mnt/data/secret.txt').read())" },
    (body, ctx) => {
      const said = body.messages.some((m) => contentText(m.content).includes('Keep the code word heron-77'));
      return { text: `${said ? 'I recall' : 'I do not recall'} ${stdoutOf(ctx.lastCodeOutput)}.` };
    },
  ]);
  const r2 = await gw.client.responses.create({
    model: MODEL,
    input: `${m2} What was the code word?`,
    previous_response_id: r1.id,
    tools: [CI_TOOL],
    include: INCLUDE_OUTPUTS,
  });
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.output_text, 'I recall heron-77.');
  const call = r2.output.find((i) => i.type === 'code_interpreter_call');
  assert.equal(call.container_id, box, 'continued in the container of the first response');
  assert.equal((await gw.client.responses.retrieve(r1.id)).id, r1.id);
});

test('a file rewritten through one gateway is never served stale by another that had read it', T, async () => {
  const A = await gw.startPeer();
  const a = clientOf(A);
  const b = gw.client;
  const box = await b.containers.create({ name: 'rewritten' });
  const note = await b.containers.files.create(box.id, { file: await toFile(Buffer.from('first\n'), 'note.txt') });
  const read = async () => (await bytesOf(await b.containers.files.content.retrieve(note.id, { container_id: box.id }))).toString();
  assert.equal(await read(), 'first\n'); // B has a copy now

  // code through A rewrites it: the same file (its id), new bytes
  const m = gw.marker('shared-rewrite');
  gw.upstream.script(m, [{ code: "open('/mnt/data/note.txt', 'w').write('second, longer\\n')" }, { text: 'rewritten' }]);
  await a.responses.create({ model: MODEL, input: `${m} Rewrite the note.`, tools: [{ type: 'code_interpreter', container: box.id }] });
  const files = await readAll(await b.containers.files.list(box.id));
  assert.deepEqual(files.map((f) => [f.id, f.bytes]), [[note.id, 'second, longer\n'.length]]);
  assert.equal(await read(), 'second, longer\n');
  await a.containers.delete(box.id);
  await assert.rejects(b.containers.files.list(box.id), (e) => e.status === 404);
});

test('the store down: uploads and downloads answer 503, and nothing half-written appears', T, async () => {
  const b = gw.client;
  const kept = await b.files.create({ file: await toFile(Buffer.from('kept\n'), 'kept.txt'), purpose: 'user_data' });
  const box = await b.containers.create({ name: 'down' });
  const cfile = await b.containers.files.create(box.id, { file: await toFile(Buffer.from('in box\n'), 'in.txt') });

  const lost = await toFile(Buffer.from('lost\n'), 'lost.txt');
  pg.stop();
  try {
    assertUnreachable(await failure(() => b.files.create({ file: lost, purpose: 'user_data' }), 'an upload'), 'an upload');
    assertUnreachable(await failure(() => b.files.content(kept.id), 'a download'), 'a download');
    assertUnreachable(
      await failure(() => b.containers.files.content.retrieve(cfile.id, { container_id: box.id }), 'a container file download'),
      'a container file download',
    );
  } finally {
    pg.start();
  }
  const uploads = await readAll(await b.files.list());
  assert.deepEqual(uploads.filter((f) => f.filename === 'lost.txt'), [], 'the failed upload is not listed');
  assert.equal(pg.number("SELECT count(*) FROM files WHERE object LIKE '%lost.txt%'"), 0);
  assert.equal((await bytesOf(await b.files.content(kept.id))).toString(), 'kept\n');
  assert.equal((await bytesOf(await b.containers.files.content.retrieve(cfile.id, { container_id: box.id }))).toString(), 'in box\n');
  await b.containers.delete(box.id);
});

test("a key's rpm_limit holds across the gateways that share the store", T, async () => {
  const A = await gw.startPeer();
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  const res = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ key_alias: 'shared-rate', rpm_limit: 3 }),
  });
  const made = await res.json();
  assert.equal(res.status, 200, JSON.stringify(made));
  const clients = [clientOf(A, made.key), clientOf(gw.server, made.key)];

  // requests alternating between the gateways: the key's bucket of 3 is
  // one, so the 4th is refused, whichever gateway it reaches
  const started = Date.now();
  let limited = null;
  for (let i = 0; i < 8 && !limited; i++) {
    try {
      await clients[i % 2].models.list();
    } catch (err) {
      assert.ok(err instanceof APIError && err.status === 429, `request ${i + 1}: ${err?.message}`);
      limited = { err, index: i };
    }
  }
  // The bucket refills one request every 20 s: on a machine so slow that
  // the first requests took that long, a later one is the first refused.
  const refills = Math.floor((Date.now() - started) / 20_000);
  assert.ok(limited, 'no request was refused');
  assert.ok(limited.index >= 3 && limited.index <= 3 + refills, `request ${limited.index + 1} was the first refused, not the 4th`);
  assert.equal(limited.err.code, 'rate_limit_exceeded');
  assert.equal(limited.err.type, 'requests');
  assert.match(limited.err.message, /3 requests per minute/);
  assert.ok(Number(limited.err.headers?.get?.('retry-after')) >= 1, 'Retry-After');
  // and the next, through the other gateway, too
  const other = clients[(limited.index + 1) % 2];
  await assert.rejects(other.models.list(), (err) => err.status === 429 && err.code === 'rate_limit_exceeded');
  assert.equal(pg.number(`SELECT count(*) FROM rate_buckets WHERE token = '${made.token}'`), 1);
});
