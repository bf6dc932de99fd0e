// The gateway's remote sandbox providers side by side, and how they fail:
// one gateway whose models run their code through `e2b` and `opensandbox`
// sandbox tools pointed at a second `corral serve` (the sandbox host), and
// through tools whose address refuses connections or whose key is wrong.
// A provider that fails gives the client a `failed` code_interpreter_call
// and the model the reason, never a hang or a leaked internal tool call;
// every remote sandbox is deleted once the gateway stops.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';

import OpenAI from 'openai';

import { freePort, startServer, useServer } from './harness.mjs';
import {
  CI_TOOL,
  INCLUDE_OUTPUTS,
  MASTER_KEY,
  UPSTREAM_KEY,
  UPSTREAM_MODEL,
  assertNoLeak,
  checkResponseEvents,
  ciCalls,
  logsOf,
  remoteSandboxes,
  remoteToolLines,
  SANDBOX_HOST_KEY,
} from './gateway-helpers.mjs';
import { startUpstream } from './upstream.mjs';

const T = { timeout: 120_000 };
const PROVIDERS = ['e2b', 'opensandbox'];

let host = null; // the sandbox host
let upstream = null;
let dir = null;
let seq = 0;
const marker = (name) => `{{remote-${name}#${++seq}}}`;

// model name -> sandbox tool name
const MODELS = {};
for (const p of PROVIDERS) {
  MODELS[`m-${p}`] = `${p}-ok`;
  MODELS[`m-${p}-refused`] = `${p}-refused`;
  MODELS[`m-${p}-401`] = `${p}-401`;
}

const ctx = useServer(
  async () => {
    host = await startServer({ apiKeys: [SANDBOX_HOST_KEY], gateway: false });
    upstream = await startUpstream();
    const refused = await freePort(); // nothing listens there
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-remote-'));
    const lines = ['model_list:'];
    for (const [model, tool] of Object.entries(MODELS)) {
      lines.push(
        `  - model_name: ${model}`,
        '    litellm_params:',
        `      model: openai/${UPSTREAM_MODEL}`,
        `      api_base: ${upstream.url}`,
        `      api_key: ${UPSTREAM_KEY}`,
        '      upstream_api: chat_completions',
        `      sandbox_tool: ${tool}`,
      );
    }
    lines.push('sandbox_tools:');
    for (const p of PROVIDERS) {
      lines.push(...remoteToolLines(`${p}-ok`, p, host));
      lines.push(
        ...remoteToolLines(`${p}-refused`, p, host, {
          apiBase: p === 'e2b' ? `http://127.0.0.1:${refused}` : `http://127.0.0.1:${refused}/v1`,
        }),
      );
      lines.push(...remoteToolLines(`${p}-401`, p, host, { apiKey: 'e2b_0000000000000000000000000000000000000000' }));
    }
    lines.push('general_settings:', `  master_key: ${MASTER_KEY}`, 'gateway:', `  data_dir: ${path.join(dir, 'data')}`, '');
    const config = path.join(dir, 'gateway.yaml');
    fs.writeFileSync(config, lines.join('\n'));
    return { config, gateway: true };
  },
  {
    afterStop: async () => {
      if (!host) return;
      const h = host;
      host = null;
      const left = {};
      try {
        for (const p of PROVIDERS) left[p] = await remoteSandboxes(p, h);
      } finally {
        await h.stop();
      }
      assert.deepEqual(left, { e2b: [], opensandbox: [] }, 'the gateway left sandboxes on the sandbox host');
    },
  },
);

after(async () => {
  await upstream?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

let client = null;
const openai = () => (client ??= new OpenAI({ baseURL: ctx.server.gatewayUrl, apiKey: MASTER_KEY, maxRetries: 0, timeout: 60_000 }));

for (const p of PROVIDERS) {
  test(`${p}: code runs remotely, keeps its state, and its files and charts come back`, T, async () => {
    const m = marker(`${p}-ok`);
    upstream.script(m, [
      { code: "x = 20\nopen('/mnt/data/hello.txt', 'w').write('hi from ' + 'remote')\nprint('cwd', __import__('os').getcwd())" },
      { code: "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nx += 22\nx" },
      (req, c) => ({ text: `x is ${/result:\n(\d+)/.exec(c.lastCodeOutput)?.[1]}` }),
    ]);
    const r = await openai().responses.create({ model: `m-${p}`, input: `${m} go`, tools: [CI_TOOL], include: INCLUDE_OUTPUTS });
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, 'x is 42');
    assertNoLeak(r);
    const calls = ciCalls(r, { include: true });
    assert.deepEqual(calls.map((c) => c.status), ['completed', 'completed']);
    assert.match(logsOf(calls[0]), /cwd \/mnt\/data/);
    assert.ok(calls[1].outputs.some((o) => o.type === 'image' && o.url.startsWith('data:image/png;base64,')), 'the chart came back');
    // the file the code wrote is a container file with its bytes
    const files = [];
    for await (const f of openai().containers.files.list(calls[0].container_id)) files.push(f);
    const hello = files.find((f) => f.path === '/mnt/data/hello.txt');
    assert.ok(hello, `no hello.txt among ${JSON.stringify(files.map((f) => f.path))}`);
    const content = await openai().containers.files.content.retrieve(hello.id, { container_id: calls[0].container_id });
    assert.equal(Buffer.from(await content.arrayBuffer()).toString(), 'hi from remote');
    // deleting the container deletes its remote sandbox
    const before = await remoteSandboxes(p, host);
    assert.ok(before.length >= 1, 'the remote sandbox exists while its container does');
    await openai().containers.delete(calls[0].container_id);
    assert.deepEqual(await remoteSandboxes(p, host), [], 'the remote sandbox outlived its container');
  });

  for (const kind of ['refused', '401']) {
    test(`${p}: a provider that ${kind === 'refused' ? 'refuses connections' : 'answers 401'} gives a failed call, and the model is told`, T, async () => {
      const m = marker(`${p}-${kind}`);
      upstream.script(m, [{ code: 'print(1)' }, (req, c) => ({ text: `told: ${c.lastCodeOutput}` })]);
      const r = await openai().responses.create({ model: `m-${p}-${kind}`, input: `${m} go`, tools: [CI_TOOL] });
      assert.equal(r.status, 'completed');
      assertNoLeak(r);
      const calls = ciCalls(r, { failed: true });
      assert.equal(calls.length, 1);
      assert.match(r.output_text, /^told: error: the sandbox could not be started/);
      assert.match(r.output_text, kind === 'refused' ? /cannot reach http:\/\/127\.0\.0\.1:\d+/ : /HTTP 401/);
    });
  }

  test(`${p}: a failing provider in a stream ends the stream with a failed call`, T, async () => {
    const m = marker(`${p}-stream`);
    upstream.script(m, [{ code: 'print(1)' }, { text: 'sorry' }]);
    const stream = await openai().responses.create({ model: `m-${p}-401`, input: `${m} go`, tools: [CI_TOOL], stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    const final = events.at(-1).response;
    checkResponseEvents(events, final);
    assertNoLeak(final);
    assert.equal(ciCalls(final, { failed: true }).length, 1);
    const message = final.output.find((o) => o.type === 'message');
    assert.equal(message?.content?.[0]?.text, 'sorry');
  });
}
