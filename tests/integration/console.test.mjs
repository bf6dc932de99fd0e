// The web console (/ui on the gateway's listener) in a real headless
// Chromium (Debian's chromium, driven by playwright-core): a wrong key is
// refused and an admin key logs in; a sandbox made through the E2B SDK
// appears, with its owner, and goes when it is killed; the chart one of its
// executions displayed is shown with the execution's code; a file the code
// wrote in a gateway container is downloaded from the page; a virtual key's
// use shows in its chart by day. The page must log no error and load
// nothing from elsewhere. A screenshot of each view is kept in
// $CORRAL_ARTIFACTS (default build-asan/artifacts/console).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import { ALL_TRAFFIC } from 'e2b';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';

import { CI_TOOL, MASTER_KEY, useGateway } from './gateway-helpers.mjs';
import { REPO_ROOT, randomApiKey } from './harness.mjs';

const CHROMIUM = process.env.CORRAL_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.CORRAL_ARTIFACTS || path.join(REPO_ROOT, 'build-asan', 'artifacts', 'console');
const ADMIN_KEY = `admin-${randomApiKey()}`;
const API_KEY = randomApiKey();
const T = { timeout: 120_000 };
const WAIT = { timeout: 60_000 }; // the page polls every 2 s; a busy machine may be slow

const gw = useGateway({
  apiKeys: [API_KEY],
  args: ['--admin-key', ADMIN_KEY],
  topLines: ['network:', '  modes: [off, internet, policy]'],
});
let browser = null;
let page = null;
const problems = []; // errors the page logged, requests it sent elsewhere
let plotted = null; // {sandboxId, code} of an execution that displayed a chart

const consoleUrl = () => gw.server.gatewayUrl.replace(/\/v1$/, '') + '/ui';

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  page = await browser.newPage({ acceptDownloads: true, viewport: { width: 1280, height: 800 } });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (!['data:', 'blob:'].includes(url.protocol) && url.origin !== new URL(consoleUrl()).origin) {
      problems.push(`a request elsewhere: ${r.url()}`);
    }
  });
});

after(async () => {
  await browser?.close();
});

async function shot(name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function tab(name) {
  await page.click(`#tabs a[data-tab="${name}"]`);
  await page.waitForSelector(`#tabs a.active[data-tab="${name}"]`);
}

test('the page: no key shows the login, a wrong key is refused, an admin key logs in', T, async () => {
  const res = await fetch(consoleUrl());
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-security-policy'), /default-src 'none'; script-src 'self'/);
  assert.equal(res.headers.get('x-frame-options'), 'DENY');
  const api = await fetch(consoleUrl() + '/api/sandboxes');
  assert.equal(api.status, 401);
  assert.equal((await api.json()).error.code, 'invalid_api_key');
  const asTenant = await fetch(consoleUrl() + '/api/sandboxes', { headers: { Authorization: `Bearer ${API_KEY}` } });
  assert.equal(asTenant.status, 401, 'a tenant\'s key does not open the console');

  await page.goto(consoleUrl());
  await page.waitForSelector('#login:not([hidden])');
  await page.fill('#key', 'not-a-key');
  await page.click('#login button[type=submit]');
  await page.waitForFunction(() => /refused/.test(document.getElementById('login-error').textContent), null, WAIT);
  await shot('login');
  await page.fill('#key', ADMIN_KEY);
  await page.click('#login button[type=submit]');
  await page.waitForFunction(() => /admin key/.test(document.getElementById('who').textContent), null, WAIT);
});

test('sandboxes and egress: one made through the E2B SDK appears with its owner, usage and network; ' +
  'a connection it may not make shows as a denial; it goes when killed', T, async () => {
  await tab('sandboxes');
  const sandbox = await Sandbox.create({
    ...gw.server.sdkOpts({ apiKey: API_KEY }),
    network: { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] },
  });
  try {
    const id = sandbox.sandboxId.split('-')[0];
    const row = page.locator(`#content tr[data-id="${id}"]`);
    await row.waitFor(WAIT);
    const cells = await row.locator('td').allTextContents();
    assert.equal(cells[1], 'default');
    assert.equal(cells[2], 'api key 1');
    assert.match(cells[4], /MiB of/);
    assert.equal(cells[6], 'policy');
    assert.equal(cells[7], 'running');
    await shot('sandboxes');

    const probe = await sandbox.runCode(
      'import socket\ntry:\n    socket.create_connection(("192.0.2.1", 80), timeout=5)\nexcept OSError as e:\n    print("refused", e.errno)');
    assert.match(probe.logs.stdout.join(''), /refused/);
    await tab('egress');
    const denial = page.locator('#content tr', { hasText: id });
    await denial.waitFor(WAIT);
    const what = await denial.locator('td').allTextContents();
    assert.equal(what[2], 'tcp 192.0.2.1:80');
    assert.ok(what[3].length > 0, 'the denial says why');
    await shot('egress');

    const code = 'import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])\nplt.title("console")\nplt.show()';
    const chart = await sandbox.runCode(code);
    assert.ok(chart.results.some((r) => r.png), 'the code displayed a PNG');
    plotted = { sandboxId: id, code };

    await tab('sandboxes');
    await row.waitFor(WAIT);
    await sandbox.kill();
    await row.waitFor({ state: 'detached', ...WAIT });
  } finally {
    await sandbox.kill().catch(() => {});
  }
});

test('executions: the chart an execution displayed is shown with its code', T, async () => {
  assert.ok(plotted, 'the sandboxes test ran the chart');
  await tab('executions');
  const row = page.locator('#content tr', { hasText: 'import matplotlib.pyplot as plt' });
  await row.waitFor(WAIT);
  const cells = await row.locator('td').allTextContents();
  // the key by its fingerprint, never itself
  assert.equal(cells[1], `sha256:${createHash('sha256').update(API_KEY).digest('hex').slice(0, 12)}`);
  assert.ok(!(await page.content()).includes(API_KEY));
  assert.equal(cells[2], 'e2b');
  assert.equal(cells[3], plotted.sandboxId);
  assert.equal(cells[6], 'ok');
  await row.click();
  const img = page.locator('#execution img');
  await img.waitFor(WAIT);
  assert.equal(await page.locator('#execution pre.code').textContent(), plotted.code);
  await page.waitForFunction(() => document.querySelector('#execution img')?.naturalWidth > 0, null, WAIT);
  assert.match(await img.getAttribute('src'), /^data:image\/png;base64,iVBORw0KGgo/);
  await shot('execution');
});

test('containers: a file the code wrote is listed and downloaded from the page', T, async () => {
  const marker = gw.marker('console-file');
  const csv = 'city,people\nOslo,709000\nBergen,291000\n';
  gw.upstream.script(marker, [
    { code: `open('/mnt/data/cities.csv', 'w').write(${JSON.stringify(csv)})\nprint('saved')` },
    { text: 'saved it' },
  ]);
  const r = await gw.client.responses.create({ model: 'mock-chat', input: `${marker} save`, tools: [CI_TOOL] });
  const containerId = r.output.find((i) => i.type === 'code_interpreter_call').container_id;
  await tab('containers');
  const card = page.locator(`#content .card[data-id="${containerId}"]`);
  await card.waitFor(WAIT);
  const fileRow = card.locator('tr', { hasText: '/mnt/data/cities.csv' });
  await fileRow.waitFor(WAIT);
  assert.match(await card.textContent(), /master/);
  await shot('containers');
  const [download] = await Promise.all([page.waitForEvent('download', WAIT), fileRow.locator('button').click()]);
  assert.equal(download.suggestedFilename(), 'cities.csv');
  const saved = path.join(ARTIFACTS, 'downloaded-cities.csv');
  await download.saveAs(saved);
  assert.equal(fs.readFileSync(saved, 'utf8'), csv);
});

test('keys: a virtual key\'s requests show in its chart by day', T, async () => {
  const made = await fetch(gw.server.gatewayUrl.replace(/\/v1$/, '') + '/key/generate', {
    method: 'POST',
    headers: { Authorization: `Bearer ${MASTER_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ key_alias: 'team-console' }),
  }).then((res) => res.json());
  const client = new OpenAI({ baseURL: gw.server.gatewayUrl, apiKey: made.key, maxRetries: 0 });
  for (let i = 0; i < 3; i++) {
    const marker = gw.marker('console-key');
    gw.upstream.script(marker, [{ text: 'hello' }]);
    await client.responses.create({ model: 'mock-chat', input: `${marker} hi` });
  }
  await tab('keys');
  const card = page.locator('#content .card[data-alias="team-console"]');
  await card.waitFor(WAIT);
  await page.waitForFunction(
    () => /Requests per day \(most 3\)/.test(document.querySelector('.card[data-alias="team-console"]')?.textContent ?? ''),
    null, WAIT);
  assert.equal(await card.locator('svg.chart rect').count(), 1);
  assert.ok(!(await page.content()).includes(made.key), 'the page shows no key');
  await shot('keys');
});

test('the page logged no error and loaded nothing from elsewhere', () => {
  assert.deepEqual(problems, []);
});
