// Prometheus metrics (GET /metrics on every listener), scraped by a real
// Prometheus (Debian's `prometheus` package, scripts/install-deps) started
// in a temporary folder for this file: a scripted workload goes through the
// official SDKs (E2B: creates, code that runs, raises, is OOM-killed,
// commands, an egress denial; openai: a gateway request with a virtual
// key, through the scripted upstream), then Prometheus' HTTP API is asked
// until the series hold what the workload did. Also: a refused scrape is a
// 401 in each listener's shape, and `promtool check metrics` finds nothing
// to say of an exposition.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import { ALL_TRAFFIC, CommandExitError } from 'e2b';
import OpenAI from 'openai';

import { freePort, killAfter, startServer, useServer } from './harness.mjs';
import { startUpstream } from './upstream.mjs';

const T = { timeout: 180_000 };
const USER_KEY = 'metrics-user-key';
const ADMIN_KEY = 'metrics-admin-key';
const MASTER_KEY = 'metrics-master-key';
const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const ALIAS = 'metrics-team';

let dir = null;
let upstream = null;
const ctx = useServer(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-metrics-'));
  upstream = await startUpstream();
  const config = path.join(dir, 'corral.yaml');
  fs.writeFileSync(
    config,
    [
      'network:',
      '  modes: [off, internet, policy]',
      'templates:',
      '  default:',
      '    pool_size: 0',
      '    limits: {memory: 256MiB}',
      'model_list:',
      '  - model_name: mock-chat',
      '    litellm_params:',
      '      model: openai/mock-model',
      `      api_base: ${upstream.url}`,
      '      api_key: sk-upstream',
      '      upstream_api: chat_completions',
      'general_settings:',
      `  master_key: ${MASTER_KEY}`,
      'gateway:',
      `  data_dir: ${path.join(dir, 'gateway')}`,
      '',
    ].join('\n'),
  );
  return { config, gateway: true, apiKeys: [USER_KEY], args: ['--admin-key', ADMIN_KEY] };
});

/** The three listeners: name, base URL, the listener's own key header. */
function listeners() {
  const s = ctx.server;
  return [
    { job: 'e2b', url: s.directUrl, header: 'X-API-Key' },
    { job: 'opensandbox', url: s.osbUrl, header: 'OPEN-SANDBOX-API-KEY' },
    { job: 'gateway', url: s.gatewayUrl.replace(/\/v1$/, ''), header: 'api-key' },
  ];
}

/* ------------------------------------------------------------------------ */
/* Prometheus, in a folder of its own                                        */

let prom = null;

async function startPrometheus() {
  const port = await freePort();
  const home = path.join(dir, 'prometheus');
  fs.mkdirSync(home);
  const target = (job, url, key) => [
    `  - job_name: ${job}`,
    '    authorization:',
    `      credentials: ${key}`,
    '    static_configs:',
    `      - targets: ['${new URL(url).host}']`,
  ];
  const [e2b, osb, gw] = listeners();
  const config = path.join(home, 'prometheus.yml');
  fs.writeFileSync(
    config,
    [
      'global:',
      '  scrape_interval: 1s',
      '  scrape_timeout: 1s',
      'scrape_configs:',
      ...target(e2b.job, e2b.url, ADMIN_KEY),
      ...target(osb.job, osb.url, ADMIN_KEY),
      ...target(gw.job, gw.url, MASTER_KEY),
      '',
    ].join('\n'),
  );
  const child = spawn(
    PROMETHEUS,
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${path.join(home, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr = (stderr + d).slice(-8192);
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  prom = { child, exited, url: `http://127.0.0.1:${port}`, stderr: () => stderr };
  // Ready once its HTTP API answers (or it exited: its stderr says why).
  const deadline = Date.now() + 60_000;
  for (;;) {
    const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 100))]);
    if (gone) throw new Error(`prometheus exited (${JSON.stringify(gone)}): ${stderr}`);
    const ok = await fetch(`${prom.url}/-/ready`).then((r) => r.ok, () => false);
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`prometheus is not ready after 60 s: ${stderr}`);
  }
}

async function stopPrometheus() {
  if (!prom) return;
  const { child, exited } = prom;
  prom = null;
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  await exited;
  clearTimeout(timer);
}

before(async () => {
  assert.ok(fs.existsSync(PROMETHEUS) && fs.existsSync(PROMTOOL), 'prometheus is not installed: run scripts/install-deps');
});

after(async () => {
  await stopPrometheus();
  await upstream?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The value of an instant query's single series, or null while there is none. */
async function queryValue(expr) {
  const res = await fetch(`${prom.url}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = await res.json();
  assert.equal(body.status, 'success', `query ${expr}: ${JSON.stringify(body)}`);
  const series = body.data.result;
  assert.ok(series.length <= 1, `query ${expr} has ${series.length} series: ${JSON.stringify(series)}`);
  return series.length ? Number(series[0].value[1]) : null;
}

/**
 * Waits until every query of `expected` ({expr: check(value)}) holds, asking
 * Prometheus again as it scrapes; fails with the ones that do not after
 * a generous deadline.
 */
async function untilSeries(expected, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  let last = {};
  for (;;) {
    const failing = [];
    for (const [expr, check] of Object.entries(expected)) {
      const value = await queryValue(expr);
      last[expr] = value;
      if (value === null || !check(value)) failing.push(expr);
    }
    if (!failing.length) return last;
    if (Date.now() > deadline) {
      const scrape = await fetch(`${ctx.server.directUrl}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } }).then(
        (r) => r.text(),
        (e) => `(no scrape: ${e.message})`,
      );
      assert.fail(
        `Prometheus does not have what was expected:\n${failing.map((e) => `  ${e} = ${last[e]}`).join('\n')}\n` +
          `prometheus: ${prom.stderr()}\nthe server's metrics now:\n${scrape.split('\n').filter((l) => l.startsWith('corral_')).join('\n')}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/* ------------------------------------------------------------------------ */

test('/metrics needs an admin key or the master key, refused in each listener\'s shape', T, async () => {
  for (const l of listeners()) {
    for (const headers of [{}, { Authorization: `Bearer ${USER_KEY}` }, { [l.header]: USER_KEY }]) {
      const res = await fetch(`${l.url}/metrics`, { headers });
      const body = await res.json();
      assert.equal(res.status, 401, `${l.job} with ${JSON.stringify(headers)}: ${JSON.stringify(body)}`);
      if (l.job === 'e2b') assert.deepEqual(Object.keys(body).sort(), ['code', 'message']);
      if (l.job === 'e2b') assert.equal(body.code, 401);
      if (l.job === 'opensandbox') assert.equal(body.code, 'UNAUTHORIZED');
      if (l.job === 'gateway') assert.equal(body.error?.code, 'invalid_api_key', JSON.stringify(body));
    }
    for (const headers of [
      { Authorization: `Bearer ${ADMIN_KEY}` },
      { Authorization: `Bearer ${MASTER_KEY}` },
      { [l.header]: ADMIN_KEY },
    ]) {
      const res = await fetch(`${l.url}/metrics`, { headers });
      const text = await res.text();
      assert.equal(res.status, 200, `${l.job} with ${JSON.stringify(headers)}: ${text.slice(0, 300)}`);
      assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
      assert.match(text, /^# TYPE process_resident_memory_bytes gauge$/m);
    }
  }
});

/** Code that fills the sandbox's 256 MiB until the kernel is OOM-killed. */
const OOM = 'blocks = []\nfor i in range(1000):\n    blocks.append(bytearray(32 << 20))\nprint("survived")';
/** A connection to TEST-NET-1: refused by corral's egress, never sent. */
const PROBE = 'import socket\ntry:\n    socket.create_connection(("192.0.2.1", 80), timeout=5).close()\nexcept OSError as e:\n    print("refused", e.errno)';

test('a real Prometheus scrapes every listener and sees the workload', T, async () => {
  await startPrometheus();
  // Its first scrapes come a few seconds after it is ready (target discovery).
  await untilSeries({ 'up{job="e2b"}': (v) => v === 1, 'up{job="opensandbox"}': (v) => v === 1, 'up{job="gateway"}': (v) => v === 1 });

  // E2B: a sandbox with an egress policy; code that runs, raises, reaches
  // out and is denied, and fills its memory; commands.
  const sbx = await Sandbox.create({ network: { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] }, timeoutMs: 120_000 });
  await killAfter(sbx, async () => {
    // a gauge read at the scrape: seen while the sandbox lives
    await untilSeries({ 'corral_sandboxes{job="e2b",state="running",template="default"}': (v) => v === 1 });
    assert.equal((await sbx.runCode('6 * 7')).text, '42');
    const raised = await sbx.runCode('raise ValueError("no")');
    assert.equal(raised.error?.name, 'ValueError');
    const probe = await sbx.runCode(PROBE);
    assert.match(probe.logs.stdout.join(''), /refused/);
    const oom = await sbx.runCode(OOM);
    assert.equal(oom.error?.name, 'KernelDied', JSON.stringify(oom.error));
    assert.equal((await sbx.commands.run('true')).exitCode, 0);
    const failed = await sbx.commands.run('exit 3').then(() => null, (e) => e);
    assert.ok(failed instanceof CommandExitError, `exit 3: ${failed}`);
  });

  // The gateway: a virtual key with an alias, one request through the
  // scripted upstream (its usage: 100 tokens in, 20 out).
  const gwBase = listeners()[2].url;
  const made = await fetch(`${gwBase}/key/generate`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${MASTER_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ key_alias: ALIAS }),
  });
  const { key } = await made.json();
  assert.equal(made.status, 200);
  upstream.script('METRICS-1', [{ text: 'counted' }]);
  const client = new OpenAI({ baseURL: ctx.server.gatewayUrl, apiKey: key, maxRetries: 0 });
  const resp = await client.responses.create({ model: 'mock-chat', input: 'METRICS-1: say it' });
  assert.equal(resp.output_text, 'counted');

  const job = '{job="e2b"}';
  const got = await untilSeries({
    'sum(corral_sandbox_creates_total{job="e2b",template="default",result="ok"})': (v) => v >= 1,
    'sum(corral_sandbox_pool_takes_total{job="e2b",template="default",result="miss"})': (v) => v >= 1,
    'sum(corral_sandbox_kills_total{job="e2b",template="default"})': (v) => v >= 1,
    'sum(corral_sandbox_create_seconds_count{job="e2b",template="default"})': (v) => v >= 1,
    'corral_executions_total{job="e2b",outcome="ok"}': (v) => v >= 2,
    'corral_executions_total{job="e2b",outcome="error",error="ValueError"}': (v) => v === 1,
    'corral_executions_total{job="e2b",outcome="oom_killed"}': (v) => v === 1,
    'corral_execution_duration_seconds_count{job="e2b",outcome="oom_killed"}': (v) => v === 1,
    'corral_commands_total{job="e2b",outcome="ok"}': (v) => v >= 1,
    'corral_commands_total{job="e2b",outcome="error"}': (v) => v === 1,
    'sum(corral_egress_decisions_total{job="e2b",kind="tcp",decision="denied",reason="forbidden_address"})': (v) => v >= 1,
    'sum(corral_http_requests_total{job="e2b",surface="e2b",route="/v2/sandboxes",method="POST",status="201"})': (v) => v >= 1,
    'sum(corral_http_requests_total{job="e2b",surface="code_interpreter",route="/execute",status="200"})': (v) => v >= 4,
    'sum(corral_http_requests_total{job="e2b",surface="envd",route="/process.Process/{method}"})': (v) => v >= 2,
    'sum(corral_http_requests_total{job="e2b",surface="gateway",route="/responses",status="200"})': (v) => v === 1,
    'sum(corral_http_request_duration_seconds_count{job="e2b",surface="gateway",route="/responses"})': (v) => v === 1,
    'sum(corral_http_requests_total{job="e2b",surface="probes",route="/metrics",status="401"})': (v) => v >= 9,
    [`corral_gateway_tokens_total{job="e2b",model="mock-chat",key="${ALIAS}",direction="in"}`]: (v) => v === 100,
    [`corral_gateway_tokens_total{job="e2b",model="mock-chat",key="${ALIAS}",direction="out"}`]: (v) => v === 20,
    'corral_gateway_upstream_requests_total{job="e2b",model="mock-chat",status="200"}': (v) => v === 1,
    'corral_gateway_upstream_duration_seconds_count{job="e2b",model="mock-chat"}': (v) => v === 1,
    'corral_gateway_turns_total{job="e2b",model="mock-chat"}': (v) => v === 1,
    'corral_gateway_containers{job="gateway",state="running"}': (v) => v === 0,
    [`process_resident_memory_bytes${job}`]: (v) => v > 1 << 20,
    [`process_open_fds${job}`]: (v) => v > 3,
    [`process_threads${job}`]: (v) => v >= 2,
    'corral_sandboxes{job="opensandbox",state="running",template="default"}': (v) => v === 0,
  });
  assert.equal(got['corral_executions_total{job="e2b",outcome="oom_killed"}'], 1);

  // What each listener exposes is the same process's, and promtool has
  // nothing to say of it.
  const res = await fetch(`${listeners()[1].url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
  const text = await res.text();
  const lint = spawnSync(PROMTOOL, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(lint.status, 0, `promtool check metrics: ${lint.stdout}${lint.stderr}`);
  assert.equal(`${lint.stdout}${lint.stderr}`.trim(), '', 'promtool reported problems');
  // Labels carry no ids, keys or code.
  assert.ok(!text.includes(sbx.sandboxId), 'a sandbox id in a label');
  assert.ok(!text.includes(key) && !text.includes(ADMIN_KEY) && !text.includes(MASTER_KEY), 'a key in a label');
  assert.ok(!text.includes('bytearray'), 'code in a label');

  await stopPrometheus();
});

test('a node and a front serve /metrics on their listeners, to an admin key', T, async () => {
  const fleetKey = 'metrics-fleet-key';
  const state = fs.mkdtempSync(path.join(dir, 'node-'));
  const nodeConfig = path.join(dir, 'node.yaml');
  fs.writeFileSync(nodeConfig, `fleet:\n  key: ${fleetKey}\ntemplates:\n  default:\n    pool_size: 0\n    preload: []\n`);
  const servers = [];
  try {
    const node = await startServer({
      apiKeys: [USER_KEY],
      config: nodeConfig,
      gateway: false,
      args: ['--role', 'node', '--state-dir', state, '--disk-dir', 'memory', '--admin-key', ADMIN_KEY],
    });
    servers.push(node);
    const frontConfig = path.join(dir, 'front.yaml');
    fs.writeFileSync(frontConfig, `fleet:\n  role: front\n  key: ${fleetKey}\n  nodes: [127.0.0.1:${node.port}]\n`);
    const front = await startServer({ config: frontConfig, gateway: false, args: ['--admin-key', ADMIN_KEY] });
    servers.push(front);
    for (const [role, server] of [['node', node], ['front', front]]) {
      for (const url of [server.directUrl, server.osbUrl]) {
        const refused = await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${USER_KEY}` } });
        assert.equal(refused.status, 401, `${role} ${url}: ${await refused.text()}`);
        const res = await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
        const text = await res.text();
        assert.equal(res.status, 200, `${role} ${url}: ${text.slice(0, 300)}`);
        assert.match(text, /^process_threads \d+$/m, `${role} ${url}`);
        assert.match(text, /^corral_http_requests_total\{surface="probes",route="\/metrics",method="GET",status="401"\} \d+$/m);
      }
    }
  } finally {
    for (const server of servers.reverse()) await server.stop();
  }
});
