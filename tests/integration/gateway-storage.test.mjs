// A container's storage on the host, through the official `openai` SDK
// against `corral serve`, with the scripted upstream of upstream.mjs: files
// the code deletes from /mnt/data leave the container (uploaded ones too),
// and the quotas of container files (gateway.container_files_max per
// container, gateway.key_files_max per key) hold for uploads, file_ids and
// the files the code writes, with the room coming back as files are
// overwritten, deleted and containers deleted; the data directory never
// holds more than the quotas allow.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import fs from 'node:fs';
import path from 'node:path';

import OpenAI, { toFile } from 'openai';

import { INCLUDE_OUTPUTS, MASTER_KEY, codeOutputsSeen, logsOf, useGateway } from './gateway-helpers.mjs';

const KIB = 1024;
const MIB = 1024 * KIB;
// 2 MiB per container, 3 MiB per key: small enough to reach in a test.
const gw = useGateway({ gatewayLines: ['container_files_max: 2m', 'key_files_max: 3m'] });
const T = { timeout: 120_000 };
const MODEL = 'mock-chat';

async function readAll(list) {
  const out = [];
  for await (const x of list) out.push(x);
  return out;
}

/** The bytes the gateway keeps on disk for a container's files. */
function diskBytes(containerId) {
  const dir = path.join(gw.dir, 'data', 'containers', containerId);
  if (!fs.existsSync(dir)) return 0;
  return fs.readdirSync(dir).reduce((sum, name) => sum + fs.statSync(path.join(dir, name)).size, 0);
}

function diskNames(containerId) {
  const dir = path.join(gw.dir, 'data', 'containers', containerId);
  return fs.existsSync(dir) ? fs.readdirSync(dir).sort() : [];
}

/** Runs `code` in the container; the response and what the model read. */
async function run(box, code, c = gw.client) {
  const m = gw.marker('storage');
  gw.upstream.script(m, [{ code }, { text: 'done' }]);
  const r = await c.responses.create({
    model: MODEL,
    input: `${m} run it`,
    tools: [{ type: 'code_interpreter', container: box.id }],
    include: INCLUDE_OUTPUTS,
  });
  const call = r.output.find((i) => i.type === 'code_interpreter_call');
  assert.equal(call.status, 'completed', JSON.stringify(call));
  const [seen] = codeOutputsSeen(gw.upstream.requestsFor(m));
  return { logs: logsOf(call), seen };
}

const isQuotaError = (param, pattern) => (e) => {
  assert.equal(e.status, 400);
  assert.equal(e.type, 'invalid_request_error');
  assert.equal(e.code, 'storage_limit_reached');
  assert.equal(e.param, param);
  assert.match(e.error?.message, pattern);
  return true;
};

const clientOf = (key) => new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: key, maxRetries: 0 });

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

test('a file the code deletes leaves the container, an uploaded one too', T, async () => {
  const c = gw.client;
  const box = await c.containers.create({ name: 'deletes' });
  const up = await c.containers.files.create(box.id, { file: await toFile(Buffer.from('a,b\n1,2\n'), 'input.csv') });
  await run(box, "open('/mnt/data/made.txt', 'w').write('made')\nopen('/mnt/data/keep.txt', 'w').write('keep')");
  const made = (await readAll(await c.containers.files.list(box.id))).find((f) => f.path === '/mnt/data/made.txt');
  assert.ok(made, 'the code made a container file');

  const { seen } = await run(box, "import os\nos.remove('/mnt/data/input.csv')\nos.remove('/mnt/data/made.txt')\nprint(sorted(os.listdir('/mnt/data')))");
  assert.match(seen, /\/mnt\/data\/input\.csv \(deleted\)/, seen);
  assert.match(seen, /\/mnt\/data\/made\.txt \(deleted\)/, seen);
  const files = await readAll(await c.containers.files.list(box.id));
  assert.deepEqual(files.map((f) => f.path), ['/mnt/data/keep.txt']);
  await assert.rejects(c.containers.files.retrieve(up.id, { container_id: box.id }), (e) => e.status === 404);
  await assert.rejects(c.containers.files.content.retrieve(made.id, { container_id: box.id }), (e) => e.status === 404);
  // and the bytes are gone from the host
  assert.deepEqual(diskNames(box.id), [files[0].id]);

  // a sandbox started again gets only what is left
  await gw.restart();
  const again = await run(box, "import os\nprint(sorted(os.listdir('/mnt/data')))");
  assert.equal(again.logs, "['keep.txt']\n");
  await gw.client.containers.delete(box.id);
  assert.equal(diskBytes(box.id), 0);
});

test("a container's files stop at container_files_max, for uploads and for the code's files", T, async () => {
  const c = gw.client;
  const box = await c.containers.create({ name: 'quota' });
  const big = await c.containers.files.create(box.id, { file: await toFile(Buffer.alloc(1536 * KIB, 1), 'big.bin') });
  assert.equal(big.bytes, 1536 * KIB);
  await assert.rejects(
    c.containers.files.create(box.id, { file: await toFile(Buffer.alloc(MIB, 2), 'more.bin') }),
    isQuotaError('file', new RegExp(`^The file was not saved: container ${box.id}'s files take 1536 KiB; 1 MiB more would pass the quota of 2 MiB \\(gateway\\.container_files_max\\)`)),
  );
  // overwriting counts the new size in place of the old one
  const bigger = await c.containers.files.create(box.id, { file: await toFile(Buffer.alloc(1800 * KIB, 3), 'big.bin') });
  assert.equal(bigger.id, big.id);
  assert.equal(bigger.bytes, 1800 * KIB);
  assert.deepEqual((await readAll(await c.containers.files.list(box.id))).map((f) => f.path), ['/mnt/data/big.bin']);
  await c.containers.files.delete(big.id, { container_id: box.id });

  // the code writes 700 KiB under a new name each time: two fit, then no more
  const write = (i) => `n = open('/mnt/data/part${i}.bin', 'wb').write(bytes(700 * 1024))`;
  for (let i = 0; i < 2; i++) await run(box, write(i));
  const { logs, seen } = await run(box, `${write(2)}\nprint('written')`);
  const why = `container ${box.id}'s files take 1400 KiB; 700 KiB more would pass the quota of 2 MiB (gateway.container_files_max): delete files to make room`;
  assert.equal(logs, `written\n[/mnt/data/part2.bin was not kept as a container file: ${why}]\n`);
  assert.ok(seen.includes(`/mnt/data/part2.bin (created, 716800 bytes; not kept as a container file: ${why})`), seen);
  for (let i = 3; i < 6; i++) await run(box, write(i));
  let files = await readAll(await c.containers.files.list(box.id));
  assert.deepEqual(files.map((f) => f.path).sort(), ['/mnt/data/part0.bin', '/mnt/data/part1.bin']);
  assert.ok(diskBytes(box.id) <= 2 * MIB, `${diskBytes(box.id)} bytes on disk`);

  // deleting makes room, within the same execution
  await run(box, `import os\nos.remove('/mnt/data/part0.bin')\n${write(6)}`);
  files = await readAll(await c.containers.files.list(box.id));
  assert.deepEqual(files.map((f) => f.path).sort(), ['/mnt/data/part1.bin', '/mnt/data/part6.bin']);
  assert.equal(diskBytes(box.id), 1400 * KIB);
  await c.containers.delete(box.id);
  assert.equal(diskBytes(box.id), 0);
});

test('file_ids past the quota make no container', T, async () => {
  const c = gw.client;
  const f1 = await c.files.create({ file: await toFile(Buffer.alloc(1200 * KIB, 1), 'one.bin'), purpose: 'user_data' });
  const f2 = await c.files.create({ file: await toFile(Buffer.alloc(1200 * KIB, 2), 'two.bin'), purpose: 'user_data' });
  await assert.rejects(c.containers.create({ name: 'too-full', file_ids: [f1.id, f2.id] }), isQuotaError('file_ids', /quota of 2 MiB/));
  const named = (await readAll(await c.containers.list())).filter((x) => x.name === 'too-full');
  assert.deepEqual(named, []);
  // one file by file_id fits; the second is refused
  const box = await c.containers.create({ name: 'by-id', file_ids: [f1.id] });
  await assert.rejects(c.containers.files.create(box.id, { file_id: f2.id }), isQuotaError('file_id', /quota of 2 MiB/));
  assert.deepEqual((await readAll(await c.containers.files.list(box.id))).map((f) => f.path), ['/mnt/data/one.bin']);
  await c.containers.delete(box.id);
  await c.files.delete(f1.id);
  await c.files.delete(f2.id);
});

test("a key's containers together stop at key_files_max; other keys are not held back", T, async () => {
  const A = await newKey();
  const B = await newKey();
  const a1 = await A.containers.create({ name: 'a1' });
  const a2 = await A.containers.create({ name: 'a2' });
  await A.containers.files.create(a1.id, { file: await toFile(Buffer.alloc(1800 * KIB), 'x.bin') });
  await A.containers.files.create(a2.id, { file: await toFile(Buffer.alloc(MIB), 'y.bin') });
  await assert.rejects(
    A.containers.files.create(a2.id, { file: await toFile(Buffer.alloc(512 * KIB), 'z.bin') }),
    isQuotaError('file', /this key's containers' files take 2824 KiB; 512 KiB more would pass the quota of 3 MiB \(gateway\.key_files_max\)/),
  );
  // the code's files count too
  const { logs } = await run(a2, "n = open('/mnt/data/w.bin', 'wb').write(bytes(512 * 1024))", A);
  assert.match(logs, /^\[\/mnt\/data\/w\.bin was not kept as a container file: this key's containers' files take 2824 KiB/);
  // another key has its own quota
  const b1 = await B.containers.create({ name: 'b1' });
  await B.containers.files.create(b1.id, { file: await toFile(Buffer.alloc(1800 * KIB), 'x.bin') });
  // a deleted container gives its room back
  await A.containers.delete(a1.id);
  await A.containers.files.create(a2.id, { file: await toFile(Buffer.alloc(512 * KIB), 'z.bin') });
  assert.deepEqual((await readAll(await A.containers.files.list(a2.id))).map((f) => f.path).sort(), ['/mnt/data/y.bin', '/mnt/data/z.bin']);
  await A.containers.delete(a2.id);
  await B.containers.delete(b1.id);
});
