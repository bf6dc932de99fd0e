// The E2B JS SDK against `corral serve`, for bench/run.py: prints
//   sdk_create MS   Sandbox.create() + runCode('1+1') (to its result), per sandbox
//   sdk_trip MS     runCode('1+1') in a warm sandbox
// Usage: node bench/e2b_sdk.mjs CORRAL N_CREATE N_TRIP
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'integration', 'package.json'));
const { Sandbox } = require('@e2b/code-interpreter');

const [corral, nCreate = '20', nTrip = '200'] = process.argv.slice(2);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

const port = await freePort();
const server = spawn(corral, ['serve', '--listen', `127.0.0.1:${port}`],
  { stdio: ['ignore', 'ignore', 'pipe'] });
await new Promise((resolve, reject) => {
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
    if (err.includes('listening on')) resolve();
  });
  server.on('exit', (code) => reject(new Error(`corral serve exited ${code}: ${err}`)));
});
const url = `http://127.0.0.1:${port}`;
const opts = { apiUrl: url, sandboxUrl: url, apiKey: 'e2b_' + '0'.repeat(40) };

try {
  // The first sandbox waits for the template's zygote: not measured.
  const warm = await Sandbox.create(opts);
  await warm.runCode('1+1');
  for (let i = 0; i < Number(nCreate); i++) {
    const t0 = performance.now();
    const sbx = await Sandbox.create(opts);
    const ex = await sbx.runCode('1+1');
    const t = performance.now() - t0;
    if (ex.text !== '2') throw new Error(`runCode gave ${ex.text}`);
    console.log(`sdk_create ${t.toFixed(3)}`);
    await sbx.kill();
  }
  for (let i = -10; i < Number(nTrip); i++) {
    const t0 = performance.now();
    await warm.runCode('1+1');
    if (i >= 0) console.log(`sdk_trip ${(performance.now() - t0).toFixed(3)}`);
  }
  await warm.kill();
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.on('exit', resolve));
}
