// Anthropic's Files API on the gateway, through the official
// `@anthropic-ai/sdk` client (client.beta.files) against `corral serve`:
// upload, metadata, list and its pages, download, delete; each file the
// key's own; the same files through the `openai` SDK (ids shared both
// ways); errors in Anthropic's shape (400, 404, 413).
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { test } from 'node:test';

import Anthropic, { APIError, BadRequestError, NotFoundError, toFile } from '@anthropic-ai/sdk';
import OpenAI, { toFile as openaiToFile } from 'openai';

import { MASTER_KEY, useGateway } from './gateway-helpers.mjs';

const FILE_MAX = 1024 * 1024;
const gw = useGateway({ gatewayLines: ['file_max: 1m'] });
const T = { timeout: 60_000 };
const BETA = ['files-api-2025-04-14'];

const rootUrl = () => gw.server.gatewayUrl.replace(/\/v1$/, '');
const anthropicOf = (key) => new Anthropic({ baseURL: rootUrl(), apiKey: key, maxRetries: 0, timeout: 30_000 });
const openaiOf = (key) => new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: key, maxRetries: 0, timeout: 30_000 });

/** A new virtual key. */
async function newKey() {
  const r = await fetch(`${rootUrl()}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER_KEY}`, 'content-type': 'application/json' },
    body: '{}',
  });
  assert.equal(r.status, 200);
  return (await r.json()).key;
}

/** An error of Anthropic's SDK: its class, status and Anthropic's error type. */
const isError = (cls, status, type, pattern) => (e) => {
  assert.ok(e instanceof cls, `${e.constructor.name}: ${e.message}`);
  assert.equal(e.status, status);
  assert.equal(e.error?.type, 'error', JSON.stringify(e.error));
  assert.equal(e.error?.error?.type, type);
  assert.equal(e.type, type);
  if (pattern) assert.match(e.error.error.message, pattern);
  return true;
};

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;

async function bytesOf(c, id) {
  const r = await c.beta.files.download(id, { betas: BETA });
  return { type: r.headers.get('content-type'), data: Buffer.from(await r.arrayBuffer()) };
}

test('a file uploaded with toFile: its metadata, in the list, downloaded identical, deleted', T, async () => {
  const c = anthropicOf(await newKey());
  const data = Buffer.from('city,population\nLyon,522250\nNantes,320732\n');
  const before = Math.floor(Date.now() / 1000);
  const f = await c.beta.files.upload({ file: await toFile(data, 'cities.csv'), betas: BETA });
  assert.match(f.id, /^file-/);
  assert.equal(f.type, 'file');
  assert.equal(f.filename, 'cities.csv');
  assert.equal(f.mime_type, 'text/csv');
  assert.equal(f.size_bytes, data.length);
  assert.equal(f.downloadable, true);
  assert.equal(f.expires_at, null);
  assert.match(f.created_at, RFC3339);
  const created = Date.parse(f.created_at) / 1000;
  assert.ok(created >= before && created <= Math.floor(Date.now() / 1000) + 1, f.created_at);

  assert.deepEqual(await c.beta.files.retrieveMetadata(f.id, { betas: BETA }), f);
  const page = await c.beta.files.list({ betas: BETA });
  assert.deepEqual(page.data, [f]);
  assert.equal(page.next_page, null);
  assert.equal(page.hasNextPage(), false);

  const got = await bytesOf(c, f.id);
  assert.equal(got.type, 'text/csv');
  assert.deepEqual(got.data, data);

  assert.deepEqual(await c.beta.files.delete(f.id, { betas: BETA }), { id: f.id, type: 'file_deleted' });
  await assert.rejects(c.beta.files.retrieveMetadata(f.id), isError(NotFoundError, 404, 'not_found_error', new RegExp(f.id)));
  await assert.rejects(c.beta.files.download(f.id), isError(NotFoundError, 404, 'not_found_error'));
  await assert.rejects(c.beta.files.delete(f.id), isError(NotFoundError, 404, 'not_found_error'));
  assert.deepEqual((await c.beta.files.list()).data, []);
});

test('mime types follow the file name; a name-less upload is "unnamed"', T, async () => {
  const c = anthropicOf(await newKey());
  const cases = [
    ['notes.txt', 'text/plain'],
    ['data.json', 'application/json'],
    ['chart.PNG', 'image/png'],
    ['photo.jpeg', 'image/jpeg'],
    ['paper.pdf', 'application/pdf'],
    ['blob', 'application/octet-stream'],
    ['dir/inner.py', 'text/x-python'],
  ];
  for (const [name, mime] of cases) {
    const f = await c.beta.files.upload({ file: await toFile(Buffer.from('x'), name) });
    assert.equal(f.mime_type, mime, name);
    assert.equal(f.filename, name.split('/').pop());
    assert.equal((await bytesOf(c, f.id)).type, mime, name);
  }
  const form = new FormData();
  form.append('file', new Blob([Buffer.from('no name')]), '');
  const r = await fetch(`${rootUrl()}/v1/files`, {
    method: 'POST',
    headers: { 'x-api-key': c.apiKey, 'anthropic-version': '2023-06-01', 'anthropic-beta': BETA[0] },
    body: form,
  });
  const f = await r.json();
  assert.equal(r.status, 200, JSON.stringify(f));
  assert.equal(f.filename, 'unnamed');
  assert.equal(f.mime_type, 'application/octet-stream');
});

test('the list pages newest first: limit, page (next_page), after_id and before_id', T, async () => {
  const c = anthropicOf(await newKey());
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await c.beta.files.upload({ file: await toFile(Buffer.from(`f${i}`), `f${i}.txt`) })).id);
  const newest = [...ids].reverse();

  const first = await c.beta.files.list({ limit: 2 });
  assert.deepEqual(first.data.map((f) => f.id), newest.slice(0, 2));
  assert.equal(first.next_page, newest[1]);
  // the fields of Anthropic's older page (first_id, last_id, has_more) too
  assert.equal(first.body.has_more, true);
  assert.equal(first.body.first_id, newest[0]);
  assert.equal(first.body.last_id, newest[1]);
  const second = await first.getNextPage();
  assert.deepEqual(second.data.map((f) => f.id), newest.slice(2, 4));
  const third = await second.getNextPage();
  assert.deepEqual(third.data.map((f) => f.id), newest.slice(4));
  assert.equal(third.next_page, null);
  assert.equal(third.hasNextPage(), false);

  // the SDK's auto-paging sees every file once
  const seen = [];
  for await (const f of c.beta.files.list({ limit: 2 })) seen.push(f.id);
  assert.deepEqual(seen, newest);

  // after_id and before_id (the cursors of Anthropic's older clients)
  const after = await c.beta.files.list({ limit: 2, after_id: newest[1] });
  assert.deepEqual(after.data.map((f) => f.id), newest.slice(2, 4));
  assert.equal(after.body.has_more, true);
  const before = await c.beta.files.list({ limit: 2, before_id: newest[3] });
  assert.deepEqual(before.data.map((f) => f.id), newest.slice(1, 3));
  assert.equal(before.body.has_more, true);
  assert.equal(before.body.first_id, newest[1]);
  const top = await c.beta.files.list({ limit: 2, before_id: newest[1] });
  assert.deepEqual(top.data.map((f) => f.id), newest.slice(0, 1));
  assert.equal(top.body.has_more, false);

  await assert.rejects(c.beta.files.list({ limit: 0 }), isError(BadRequestError, 400, 'invalid_request_error', /limit/));
  await assert.rejects(c.beta.files.list({ limit: 1001 }), isError(BadRequestError, 400, 'invalid_request_error', /limit/));
  await assert.rejects(c.beta.files.list({ page: 'file-nope' }), isError(BadRequestError, 400, 'invalid_request_error', /file-nope/));
  for (const id of ids) await c.beta.files.delete(id);
});

test('a file is its key\'s own: another key can neither see, download nor delete it', T, async () => {
  const owner = anthropicOf(await newKey());
  const other = anthropicOf(await newKey());
  const f = await owner.beta.files.upload({ file: await toFile(Buffer.from('secret'), 'secret.txt') });
  await assert.rejects(other.beta.files.retrieveMetadata(f.id), isError(NotFoundError, 404, 'not_found_error'));
  await assert.rejects(other.beta.files.download(f.id), isError(NotFoundError, 404, 'not_found_error'));
  await assert.rejects(other.beta.files.delete(f.id), isError(NotFoundError, 404, 'not_found_error'));
  assert.deepEqual((await other.beta.files.list()).data, []);
  // nor through OpenAI's SDK
  await assert.rejects(openaiOf(other.apiKey).files.retrieve(f.id), (e) => e.status === 404);
  // still the owner's, whole
  assert.deepEqual((await bytesOf(owner, f.id)).data, Buffer.from('secret'));
  await owner.beta.files.delete(f.id);
});

test('one file store for both SDKs: ids of one work with the other', T, async () => {
  const key = await newKey();
  const a = anthropicOf(key);
  const o = openaiOf(key);
  const data = crypto.randomBytes(4096);

  const viaOpenAI = await o.files.create({ file: await openaiToFile(data, 'random.bin'), purpose: 'assistants' });
  const meta = await a.beta.files.retrieveMetadata(viaOpenAI.id);
  assert.equal(meta.id, viaOpenAI.id);
  assert.equal(meta.filename, 'random.bin');
  assert.equal(meta.size_bytes, 4096);
  assert.equal(meta.mime_type, 'application/octet-stream');
  assert.equal(Date.parse(meta.created_at) / 1000, viaOpenAI.created_at);
  assert.deepEqual((await bytesOf(a, viaOpenAI.id)).data, data);

  const viaAnthropic = await a.beta.files.upload({ file: await toFile(Buffer.from('{"a": 1}'), 'a.json') });
  const file = await o.files.retrieve(viaAnthropic.id);
  assert.equal(file.object, 'file');
  assert.equal(file.filename, 'a.json');
  assert.equal(file.bytes, 8);
  assert.equal(file.purpose, 'user_data');
  assert.equal(file.created_at, Date.parse(viaAnthropic.created_at) / 1000);
  assert.equal(await (await o.files.content(viaAnthropic.id)).text(), '{"a": 1}');

  const listed = [];
  for await (const f of o.files.list()) listed.push(f.id);
  assert.deepEqual(listed.sort(), [viaOpenAI.id, viaAnthropic.id].sort());
  assert.deepEqual((await a.beta.files.list()).data.map((f) => f.id), [viaAnthropic.id, viaOpenAI.id]);

  // deleted through one, gone for the other
  await o.files.delete(viaAnthropic.id);
  await assert.rejects(a.beta.files.retrieveMetadata(viaAnthropic.id), isError(NotFoundError, 404, 'not_found_error'));
  await a.beta.files.delete(viaOpenAI.id);
  await assert.rejects(o.files.retrieve(viaOpenAI.id), (e) => e.status === 404);
});

test('expires_in_seconds: the file\'s expires_at; out of range, a 400', T, async () => {
  const c = anthropicOf(await newKey());
  const f = await c.beta.files.upload({ file: await toFile(Buffer.from('x'), 'x.txt'), expires_in_seconds: 7200 });
  assert.match(f.expires_at, RFC3339);
  assert.equal(Date.parse(f.expires_at) - Date.parse(f.created_at), 7200 * 1000);
  assert.equal((await c.beta.files.retrieveMetadata(f.id)).expires_at, f.expires_at);
  for (const s of [10, 7776001]) {
    await assert.rejects(
      c.beta.files.upload({ file: await toFile(Buffer.from('x'), 'x.txt'), expires_in_seconds: s }),
      isError(BadRequestError, 400, 'invalid_request_error', /expires_in_seconds/),
    );
  }
  assert.deepEqual((await c.beta.files.list()).data.map((x) => x.id), [f.id]);
  await c.beta.files.delete(f.id);
});

test('uploads refused in Anthropic\'s shape: no file part (400), past gateway.file_max (413)', T, async () => {
  const c = anthropicOf(await newKey());
  await assert.rejects(
    c.beta.files.upload({ attachment: await toFile(Buffer.from('x'), 'x.txt') }),
    isError(BadRequestError, 400, 'invalid_request_error', /file/),
  );
  await assert.rejects(c.beta.files.upload({}), isError(BadRequestError, 400, 'invalid_request_error', /file/));
  await assert.rejects(
    c.beta.files.upload({ file: await toFile(Buffer.alloc(FILE_MAX + 1), 'big.bin') }),
    isError(APIError, 413, 'request_too_large', new RegExp(`larger than ${FILE_MAX} bytes`)),
  );
  // past the multipart envelope too: refused before the body is read
  await assert.rejects(
    c.beta.files.upload({ file: await toFile(Buffer.alloc(3 * FILE_MAX), 'huge.bin') }),
    isError(APIError, 413, 'request_too_large', new RegExp(`larger than ${FILE_MAX + 65536} bytes`)),
  );
  assert.deepEqual((await c.beta.files.list()).data, []);
  // exactly file_max is kept
  const f = await c.beta.files.upload({ file: await toFile(Buffer.alloc(FILE_MAX, 7), 'max.bin') });
  assert.equal(f.size_bytes, FILE_MAX);
  assert.deepEqual((await bytesOf(c, f.id)).data, Buffer.alloc(FILE_MAX, 7));
  await c.beta.files.delete(f.id);
});
