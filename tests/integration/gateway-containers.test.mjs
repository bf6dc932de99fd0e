// Containers, their files and citations (OpenAI's Containers and Files
// APIs), through the official `openai` SDK against `corral serve`, with the
// scripted upstream of upstream.mjs: a container made, a CSV uploaded and
// analysed in it through /v1/responses, its state kept for a second request,
// a chart saved by the code coming back as a cited container file, expiry,
// and everything found again after the server is killed and started again.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import fs from 'node:fs';

import OpenAI, { toFile } from 'openai';

import { MASTER_KEY, PNG_SIGNATURE, PROVIDER, codeOutputsSeen, sandboxIds, sandboxProcesses, useGateway } from './gateway-helpers.mjs';
import { eventually } from './harness.mjs';

const gw = useGateway({ gatewayLines: ['container_expiry: 3', 'chat_container_expiry: 0'] });
const T = { timeout: 120_000 };
const MODEL = 'mock-chat';

const stdoutOf = (out) => /stdout:\n(.*)\n?/.exec(out ?? '')?.[1] ?? '(no stdout)';

async function readAll(list) {
  const out = [];
  for await (const x of list) out.push(x);
  return out;
}

let kept = null; // the container that outlives the restart

test('a container: create, upload a CSV, analyse it, reuse its state, cite its chart', T, async () => {
  const c = gw.client;
  const box = await c.containers.create({ name: 'analysis', expires_after: { anchor: 'last_active_at', minutes: 20 } });
  assert.match(box.id, /^cntr_[0-9a-f]{48}$/);
  assert.equal(box.object, 'container');
  assert.equal(box.name, 'analysis');
  assert.equal(box.status, 'running');
  assert.deepEqual(box.expires_after, { anchor: 'last_active_at', minutes: 20 });
  assert.equal((await c.containers.retrieve(box.id)).id, box.id);
  assert.ok((await readAll(await c.containers.list())).some((x) => x.id === box.id));

  const csv = 'city,people\nOslo,709000\nBergen,291000\nTrondheim,212000\n';
  const up = await c.containers.files.create(box.id, { file: await toFile(Buffer.from(csv), 'cities.csv') });
  assert.match(up.id, /^cfile_/);
  assert.equal(up.path, '/mnt/data/cities.csv');
  assert.equal(up.source, 'user');
  assert.equal(up.bytes, csv.length);

  const tool = { type: 'code_interpreter', container: box.id };
  const a = gw.marker('cntr-a');
  gw.upstream.script(a, [
    { code: "import pandas as pd\ndf = pd.read_csv('/mnt/data/cities.csv')\ntotal = int(df.people.sum())\nprint(total)" },
    (req, ctx) => ({ text: `total: ${stdoutOf(ctx.lastCodeOutput)}` }),
  ]);
  const r1 = await c.responses.create({ model: MODEL, input: `${a} Sum the people.`, tools: [tool] });
  assert.equal(r1.output_text, 'total: 1212000');
  assert.equal(r1.output.find((i) => i.type === 'code_interpreter_call').container_id, box.id);

  // a second request in the same container sees the first one's variables
  const b = gw.marker('cntr-b');
  gw.upstream.script(b, [
    { code: "import matplotlib.pyplot as plt\nprint(total // 2)\nplt.bar(df.city, df.people)\nplt.savefig('/mnt/data/people.png')\nplt.close()" },
    { text: 'Half is there, and the chart: [people.png](sandbox:/mnt/data/people.png)' },
  ]);
  const r2 = await c.responses.create({ model: MODEL, input: `${b} Chart it.`, tools: [tool], include: ['code_interpreter_call.outputs'] });
  const call = r2.output.find((i) => i.type === 'code_interpreter_call');
  assert.equal(call.outputs.find((o) => o.type === 'logs')?.logs, '606000\n');
  const msg = r2.output.find((i) => i.type === 'message');
  const text = msg.content[0].text;
  const [note] = msg.content[0].annotations;
  assert.equal(note.type, 'container_file_citation');
  assert.equal(note.container_id, box.id);
  assert.equal(note.filename, 'people.png');
  assert.equal(text.slice(note.start_index, note.end_index), 'sandbox:/mnt/data/people.png');

  const files = await readAll(await c.containers.files.list(box.id));
  const chart = files.find((f) => f.path === '/mnt/data/people.png');
  assert.ok(chart, `no chart among ${JSON.stringify(files)}`);
  assert.equal(chart.id, note.file_id);
  assert.equal(chart.source, 'assistant');
  const content = Buffer.from(await (await c.containers.files.content.retrieve(chart.id, { container_id: box.id })).arrayBuffer());
  assert.ok(content.subarray(0, 8).equals(PNG_SIGNATURE), 'the chart is a PNG');
  assert.equal(content.length, chart.bytes);

  // the stream carries the same citation
  const s = gw.marker('cntr-s');
  gw.upstream.script(s, [{ text: 'Again: [chart](sandbox:/mnt/data/people.png)' }]);
  const events = [];
  const st = c.responses.stream({ model: MODEL, input: `${s} Link it again.`, tools: [tool] });
  st.on('event', (e) => events.push(e));
  const final = await st.finalResponse();
  const added = events.filter((e) => e.type === 'response.output_text.annotation.added');
  assert.equal(added.length, 1);
  assert.equal(added[0].annotation.file_id, chart.id);
  assert.deepEqual(final.output.find((i) => i.type === 'message').content[0].annotations, [added[0].annotation]);
  kept = { id: box.id, chart: chart.id, bytes: chart.bytes };
});

test('files uploaded through /v1/files go into a container by file_id', T, async () => {
  const c = gw.client;
  const f = await c.files.create({ file: await toFile(Buffer.from('x\n1\n'), 'one.csv'), purpose: 'user_data' });
  assert.match(f.id, /^file-/);
  assert.equal(f.filename, 'one.csv');
  assert.equal((await c.files.retrieve(f.id)).bytes, 4);
  const box = await c.containers.create({ name: 'with files', file_ids: [f.id] });
  const files = await readAll(await c.containers.files.list(box.id));
  assert.deepEqual(files.map((x) => [x.path, x.source]), [['/mnt/data/one.csv', 'user']]);
  const a = gw.marker('files-a');
  gw.upstream.script(a, [{ code: "print(open('/mnt/data/one.csv').read().split()[1])" }, (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) })]);
  const r = await c.responses.create({ model: MODEL, input: `${a} Read it.`, tools: [{ type: 'code_interpreter', container: box.id }] });
  assert.equal(r.output_text, '1');
  await c.containers.delete(box.id);
  await assert.rejects(c.containers.retrieve(box.id), (e) => e.status === 404);

  // an auto container with file_ids gets them too
  const b = gw.marker('files-auto');
  gw.upstream.script(b, [{ code: "print(open('/mnt/data/one.csv').read().split()[0])" }, (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) })]);
  const auto = await c.responses.create({
    model: MODEL,
    input: `${b} Read it.`,
    tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: [f.id], memory_limit: '4g' } }],
  });
  assert.equal(auto.output_text, 'x');
  const autoBox = await c.containers.retrieve(auto.output.find((i) => i.type === 'code_interpreter_call').container_id);
  assert.equal(autoBox.memory_limit, '4g');
  await c.containers.delete(autoBox.id);
  await assert.rejects(
    c.responses.create({ model: MODEL, input: `${b} again`, tools: [{ type: 'code_interpreter', container: { type: 'auto', file_ids: ['file-nope'] } }] }),
    (e) => e.status === 404,
  );

  // lists page as OpenAI's: limit, order, after, has_more
  const made = [];
  for (let i = 0; i < 3; i++) made.push((await c.containers.create({ name: `page-${i}` })).id);
  const first = await c.containers.list({ limit: 2, order: 'asc' });
  assert.equal(first.data.length, 2);
  assert.equal(first.has_more, true);
  const all = [];
  for await (const x of await c.containers.list({ limit: 2, order: 'asc' })) all.push(x.id);
  assert.deepEqual(all.filter((id) => made.includes(id)), made);
  const desc = [];
  for await (const x of await c.containers.list({ order: 'desc' })) desc.push(x.id);
  assert.deepEqual(desc.filter((id) => made.includes(id)), [...made].reverse());
  for (const id of made) await c.containers.delete(id);
  await c.files.delete(f.id);
  await assert.rejects(c.files.retrieve(f.id), (e) => e.status === 404);
});

test('files the input names are put in the container, as OpenAI does', T, async () => {
  const c = gw.client;
  const f = await c.files.create({ file: await toFile(Buffer.from('lake,depth\nMjøsa,453\n'), 'lakes.csv'), purpose: 'user_data' });
  for (const [model, part] of [
    ['mock-responses', { type: 'input_file', file_id: f.id }], // passed on to a Responses upstream
    ['mock-chat', null], // a chat client's own file part, below
  ]) {
    const a = gw.marker(`input-file-${model}`);
    gw.upstream.script(a, [
      { code: "print(open('/mnt/data/lakes.csv').read().splitlines()[1])" },
      (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) }),
    ]);
    let text;
    if (part) {
      const r = await c.responses.create({
        model,
        input: [{ role: 'user', content: [{ type: 'input_text', text: `${a} How deep?` }, part] }],
        tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
      });
      text = r.output_text;
    } else {
      const r = await c.chat.completions.create({
        model: 'mock-responses', // a Responses upstream reads chat's file part as input_file
        messages: [{ role: 'user', content: [{ type: 'text', text: `${a} How deep?` }, { type: 'file', file: { file_id: f.id } }] }],
        tools: [{ type: 'code_interpreter' }],
      });
      text = r.choices[0].message.content;
    }
    assert.equal(text, 'Mjøsa,453', model);
  }
});

test('an unused container expires: its files go, using it is an error', T, async () => {
  const c = gw.client;
  const box = await c.containers.create({ name: 'short' }); // container_expiry: 3 s in the config
  await c.containers.files.create(box.id, { file: await toFile(Buffer.from('1'), 'a.txt') });
  await new Promise((r) => setTimeout(r, 5500));
  const after = await c.containers.retrieve(box.id);
  assert.equal(after.status, 'expired');
  const a = gw.marker('expired');
  gw.upstream.script(a, [{ text: 'unreachable' }]);
  await assert.rejects(
    c.responses.create({ model: MODEL, input: `${a} hi`, tools: [{ type: 'code_interpreter', container: box.id }] }),
    (e) => e.status === 400 && e.error?.message === 'Container is expired.',
  );
});

test('chat_container_expiry 0: the container of a Chat Completions request goes when the request ends', T, async () => {
  const c = gw.client;
  const marker = gw.marker('chat-gone');
  gw.upstream.script(marker, [{ code: "open('/mnt/data/n.txt', 'w').write('1')" }, { text: 'done' }]);
  const before = sandboxIds();
  const answer = await c.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `${marker} go` }], tools: [{ type: 'code_interpreter' }] });
  const ext = answer.choices[0].message.code_interpreter;
  assert.match(ext.container_id, /^cntr_/);
  assert.equal(ext.output.find((o) => o.type === 'code_interpreter_call').status, 'completed');
  await assert.rejects(c.containers.retrieve(ext.container_id), (e) => e.status === 404);
  if (PROVIDER === 'local') assert.deepEqual([...sandboxIds()].filter((id) => !before.has(id)), [], 'its sandbox is gone');
});

test('after a kill -9 of the server and a restart, the container and its files are there', T, async () => {
  assert.ok(kept, 'the first test made the container');
  // the first test's container expires 20 minutes after its last use: it lives across the restart
  await gw.restart({ kill: true });
  const c = gw.client;
  const box = await c.containers.retrieve(kept.id);
  assert.equal(box.status, 'running');
  const chart = await c.containers.files.retrieve(kept.chart, { container_id: kept.id });
  assert.equal(chart.bytes, kept.bytes);
  // a new sandbox, with the container's files in /mnt/data (kernel state does not survive)
  const a = gw.marker('restart');
  gw.upstream.script(a, [
    { code: "import os\nprint(os.path.getsize('/mnt/data/people.png'), 'total' in globals())" },
    (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) }),
  ]);
  const r = await c.responses.create({ model: MODEL, input: `${a} Still there?`, tools: [{ type: 'code_interpreter', container: kept.id }] });
  assert.equal(r.output_text, `${kept.bytes} False`);
  await c.containers.delete(kept.id);
});

// The local provider's sandboxes are this host's processes, to kill from here.
const LOCAL_T = { ...T, skip: PROVIDER === 'local' ? false : 'kills the sandbox as host processes: the local provider only' };

test('a container whose sandbox ended tells the model that earlier state is gone', LOCAL_T, async () => {
  const c = gw.client;
  const box = await c.containers.create({ name: 'ends' });
  const before = sandboxIds();
  const a = gw.marker('ends-1');
  gw.upstream.script(a, [{ code: 'secret = 41' }, { text: 'kept' }]);
  await c.responses.create({ model: MODEL, input: `${a} keep it`, tools: [{ type: 'code_interpreter', container: box.id }] });
  const mine = [...sandboxIds()].filter((id) => !before.has(id));
  assert.equal(mine.length, 1, 'one new sandbox');
  const pids = sandboxProcesses()
    .filter((line) => line.includes(mine[0]))
    .map((line) => Number(/^pid (\d+)/.exec(line)[1]));
  for (const pid of pids) process.kill(pid, 'SIGKILL');
  // Dead once gone or a zombie: the gateway then finds the sandbox ended.
  const dead = (pid) => !fs.existsSync(`/proc/${pid}`) || / Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  await eventually(() => pids.every((pid) => { try { return dead(pid); } catch { return true; } }), { timeoutMs: 10_000 });
  const b = gw.marker('ends-2');
  gw.upstream.script(b, [{ code: 'print(secret + 1)' }, { text: 'done' }]);
  await c.responses.create({ model: MODEL, input: `${b} use it`, tools: [{ type: 'code_interpreter', container: box.id }] });
  const [seen] = codeOutputsSeen(gw.upstream.requestsFor(b));
  assert.match(seen, /^note: the sandbox had ended and was started again/, seen);
  assert.match(seen, /NameError/, seen);
  await c.containers.delete(box.id);
});

// E2B sizes a sandbox by its template: there, memory_limit is kept on the
// container but not applied (docs/gateway.md, "Where the code runs").
const MEMORY_T = { ...T, skip: PROVIDER === 'e2b' ? "E2B's API has no memory setting: memory_limit is not applied" : false };

test("memory_limit is the sandbox's memory limit, capped by the key's max_container_memory", MEMORY_T, async () => {
  const grab = "x = bytearray(1536 * 2**20)\nprint('held', len(x) >> 20)";
  async function run(box, c = gw.client) {
    const m = gw.marker('memory');
    gw.upstream.script(m, [{ code: grab }, (req, ctx) => ({ text: stdoutOf(ctx.lastCodeOutput) })]);
    const r = await c.responses.create({ model: MODEL, input: `${m} Hold 1.5 GiB.`, tools: [{ type: 'code_interpreter', container: box.id }] });
    return r.output_text;
  }
  const c = gw.client;
  const small = await c.containers.create({ name: 'small', memory_limit: '1g' });
  assert.equal(small.memory_limit, '1g');
  assert.notEqual(await run(small), 'held 1536', '1.5 GiB held under a 1 GiB limit');
  const big = await c.containers.create({ name: 'big', memory_limit: '4g' });
  assert.equal(await run(big), 'held 1536');
  await c.containers.delete(small.id);
  await c.containers.delete(big.id);

  // a key allowed 1g at most gets 1g whatever its container asks
  const base = gw.server.gatewayUrl.replace(/\/v1$/, '');
  const made = await fetch(`${base}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ max_container_memory: '1g' }),
  });
  const key = (await made.json()).key;
  const k = new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: key, maxRetries: 0 });
  const capped = await k.containers.create({ name: 'capped', memory_limit: '4g' });
  assert.notEqual(await run(capped, k), 'held 1536', '1.5 GiB held by a key capped at 1g');
  await k.containers.delete(capped.id);
});
