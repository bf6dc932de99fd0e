// The gateway's seed example, end to end: the official `openai` SDK asks
// `corral serve` for the product of the first 6 primes with OpenAI's
// code_interpreter tool, through the Responses and the Chat Completions
// APIs. The model is the scripted upstream of the tests
// (tests/integration/upstream.mjs): it writes the code, reads what the
// sandbox printed and answers with it. `make gateway-demo` runs this.
//
//   node examples/gateway-demo.mjs [path/to/corral]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { startUpstream } from '../tests/integration/upstream.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'integration', 'package.json'));
const { default: OpenAI } = await import(require.resolve('openai'));
const corral = process.argv[2] || path.join(here, '..', 'build', 'corral');

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const QUESTION = 'What is the product of the first 6 primes? Use Python.';
const upstream = await startUpstream();
for (const marker of ['first 6 primes']) {
  upstream.script(marker, [
    { code: 'import math\nprint(math.prod([2, 3, 5, 7, 11, 13]))' },
    (req, ctx) => ({ text: `The product of the first 6 primes is ${ctx.lastCodeOutput.match(/\d+/)[0]}.` }),
  ]);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-demo-'));
const config = path.join(dir, 'gateway.yaml');
fs.writeFileSync(config, `model_list:
  - model_name: demo
    litellm_params:
      model: openai/scripted-model
      api_base: ${upstream.url}
      upstream_api: chat_completions
general_settings:
  master_key: sk-local
`);
const port = await freePort();
const server = spawn(corral, ['serve', '--listen', 'off', '--opensandbox-listen', 'off',
  '--gateway-listen', `127.0.0.1:${port}`, '--config', config,
  '--gateway-data-dir', path.join(dir, 'data')], { stdio: ['ignore', 'inherit', 'pipe'] });
await new Promise((resolve, reject) => {
  let text = '';
  server.stderr.on('data', (chunk) => {
    text += chunk;
    process.stderr.write(chunk);
    if (text.includes('(OpenAI-compatible gateway)')) resolve();
  });
  server.on('exit', (code) => reject(new Error(`corral serve exited with status ${code}`)));
});

let failed = false;
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'sk-local' });

  const r = await client.responses.create({
    model: 'demo',
    input: QUESTION,
    tools: [{ type: 'code_interpreter', container: { type: 'auto' } }],
    include: ['code_interpreter_call.outputs'],
  });
  const call = r.output.find((item) => item.type === 'code_interpreter_call');
  console.log('responses.create:');
  console.log('  output_text:', JSON.stringify(r.output_text));
  console.log('  code_interpreter_call:', call.id.slice(0, 12) + '...', call.container_id.slice(0, 14) + '...');
  console.log('  code:', JSON.stringify(call.code));
  console.log('  outputs:', JSON.stringify(call.outputs));
  console.log('  usage:', JSON.stringify(r.usage));

  const c = await client.chat.completions.create({
    model: 'demo',
    messages: [{ role: 'user', content: QUESTION }],
    tools: [{ type: 'code_interpreter' }],
  });
  console.log('chat.completions.create:');
  console.log('  content:', JSON.stringify(c.choices[0].message.content));
  failed = !r.output_text.includes('30030') || !c.choices[0].message.content.includes('30030');
} catch (err) {
  console.error(err);
  failed = true;
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.on('exit', resolve));
  await upstream.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
