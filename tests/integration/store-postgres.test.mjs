// The gateway's store in PostgreSQL (`gateway.store: postgresql://...`),
// through the official `openai` SDK against `corral serve`: stored responses
// and previous_response_id kept by a PostgreSQL server that this test starts
// (tests/postgres: its own cluster in a temporary folder, on a Unix socket);
// then that server stopped mid-way: what needs the store is answered 503 in
// OpenAI's shape, saying the store is unreachable, at once; and started
// again: the same gateway carries on by itself, nothing it acknowledged lost,
// also when the server restarted while the gateway was idle.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { APIError } from 'openai';

import { useGateway } from './gateway-helpers.mjs';
import { usePostgres } from './postgres.mjs';
import { contentText } from './upstream.mjs';

const pg = usePostgres();

before(() => {
  pg.init();
});

const gw = useGateway({ gatewayLines: [`store: "${pg.url}"`] });

after(pg.remove); // after the gateway's own after(): it stops first

const T = { timeout: 60_000 };
const MODEL = 'mock-chat'; // a chat upstream behind the Responses API: the gateway answers, and stores

/** An answer that says whether the conversation the upstream saw holds `text`. */
const recalls = (text) => (body) => ({
  text: body.messages.some((m) => contentText(m.content).includes(text)) ? `I recall ${text}.` : 'I recall nothing.',
});

/** The APIError a call fails with (and how long it took to fail), or a failed assertion. */
async function failure(call) {
  const started = Date.now();
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof APIError, `expected an APIError, got ${err?.constructor?.name}: ${err?.message}`);
    return { err, ms: Date.now() - started };
  }
  assert.fail('the call succeeded while the store was down');
}

/** A 503 in OpenAI's shape that says the store is unreachable, without waiting for a timeout. */
function assertUnreachable({ err, ms }, what) {
  assert.equal(err.status, 503, `${what}: ${err.message}`);
  assert.equal(err.type, 'server_error', what);
  assert.equal(err.code, 'service_unavailable', what);
  assert.match(err.message, /the store is unreachable/, what);
  assert.match(err.message, /postgresql:\/\/corral@/, `${what}: the message names the store`);
  assert.ok(ms < 5000, `${what}: took ${ms} ms, as if it waited for a timeout`);
}

test('stored responses and previous_response_id live in PostgreSQL', T, async () => {
  const a = gw.marker('pg-a');
  gw.upstream.script(a, [{ text: 'Noted: the code word is heron-77.' }]);
  const r1 = await gw.client.responses.create({ model: MODEL, input: `${a} The code word is heron-77.` });
  assert.equal(r1.status, 'completed');
  assert.equal(pg.number(`SELECT count(*) FROM responses WHERE id = '${r1.id}'`), 1);

  const back = await gw.client.responses.retrieve(r1.id);
  assert.equal(back.id, r1.id);
  assert.equal(back.output_text, 'Noted: the code word is heron-77.');

  const b = gw.marker('pg-b');
  gw.upstream.script(b, [recalls('heron-77')]);
  const r2 = await gw.client.responses.create({ model: MODEL, input: `${b} What was the code word?`, previous_response_id: r1.id });
  assert.equal(r2.previous_response_id, r1.id);
  assert.equal(r2.output_text, 'I recall heron-77.');
  assert.equal(pg.number("SELECT MAX(version) FROM schema_version"), 11);
});

test('PostgreSQL stopped: 503 saying the store is unreachable; started again: the gateway recovers, nothing lost', T, async () => {
  const a = gw.marker('pg-before');
  gw.upstream.script(a, [{ text: 'Noted: the code word is osprey-12.' }]);
  const kept = await gw.client.responses.create({ model: MODEL, input: `${a} The code word is osprey-12.` });
  assert.equal(kept.status, 'completed');

  pg.stop();
  assertUnreachable(await failure(() => gw.client.responses.retrieve(kept.id)), 'GET /v1/responses/{id}');
  assertUnreachable(await failure(() => gw.client.responses.retrieve('resp_never_made')), 'GET of an unknown id');
  const b = gw.marker('pg-during-prev');
  gw.upstream.script(b, [recalls('osprey-12')]);
  assertUnreachable(
    await failure(() => gw.client.responses.create({ model: MODEL, input: `${b} The code word?`, previous_response_id: kept.id })),
    'previous_response_id',
  );
  // An answer that cannot be stored is not given as if it had been.
  const c = gw.marker('pg-during-new');
  gw.upstream.script(c, [{ text: 'This answer cannot be kept.' }]);
  assertUnreachable(await failure(() => gw.client.responses.create({ model: MODEL, input: `${c} Hello.` })), 'a new stored response');
  // What does not need the store still works.
  const models = await gw.client.models.list();
  assert.ok(models.data.some((m) => m.id === MODEL));

  pg.start();
  const back = await gw.client.responses.retrieve(kept.id);
  assert.equal(back.output_text, 'Noted: the code word is osprey-12.');
  const d = gw.marker('pg-after');
  gw.upstream.script(d, [recalls('osprey-12')]);
  const later = await gw.client.responses.create({ model: MODEL, input: `${d} What was the code word?`, previous_response_id: kept.id });
  assert.equal(later.output_text, 'I recall osprey-12.');
  assert.equal((await gw.client.responses.retrieve(later.id)).id, later.id);

  // A restart while the gateway is idle: its connections, closed by the
  // server meanwhile, are made again before their next use.
  pg.stop();
  pg.start();
  assert.equal((await gw.client.responses.retrieve(later.id)).output_text, 'I recall osprey-12.');
  assert.equal((await gw.client.responses.retrieve(kept.id)).output_text, 'Noted: the code word is osprey-12.');
});
