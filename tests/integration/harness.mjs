// Integration harness: runs `corral serve` for a test file and points the
// official E2B SDKs (`e2b`, `@e2b/code-interpreter`) at it.
//
//   import { useServer, withSandbox } from './harness.mjs'
//   const ctx = useServer()   // before(): start, set E2B_*; after(): stop + checks
//   test('...', () => withSandbox(Sandbox, async (sbx) => { ... }))
//   // ctx.server: the CorralServer (pid, url, sdkOpts(), openFds(), stderr)
//   // ctx.server.gatewayUrl: the OpenAI-compatible gateway, http://127.0.0.1:PORT/v1
//   useServer(async () => ({ config: ... }))  // options computed in before()
//
// What the harness asserts, in the file's after() hook:
//   - `corral serve` exits with status 0 within 10 s of SIGTERM;
//   - its stderr holds no sanitizer report (ASan, LSan, UBSan "runtime error:");
//   - nothing is left on the host once it is gone: no process of a sandbox uid
//     (>= 1879048192), no cgroup under /sys/fs/cgroup/{memory,pids,cpu}/corral/
//     (or /sys/fs/cgroup/corral/ on cgroup v2), no slot file in
//     /run/corral/slots/, no mount under /run/corral. What was already there
//     before the server started, and what another live corral user (a unit
//     test, another server) demonstrably owns, is reported but not blamed on
//     this run (see "Host state" below).
//
// Environment:
//   CORRAL            the corral binary (default: build-asan/corral in the repo)
//   CORRAL_SERVE_LOG  append the server's stderr to this file
//   CORRAL_TRACE      write every HTTP exchange between the SDK and the server
//                     to this file (the SDK then talks to a logging proxy)
//
// Test files share host-wide state (cgroups, slots, sandbox uids), so a lock
// serialises the servers of concurrently running test files
// (`node --test` runs files in parallel unless --test-concurrency=1).

import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CORRAL = process.env.CORRAL || path.join(REPO_ROOT, 'build-asan', 'corral');
export const UID_BASE = 1879048192;
export const STATE_DIR = '/run/corral';
export const DISK_DIR = '/var/lib/corral/disks';
const CGROUP_ROOT = '/sys/fs/cgroup';
const CONTROLLERS = ['memory', 'pids', 'cpu'];

const START_TIMEOUT_MS = 30_000;
const GATEWAY_LINE_GRACE_MS = 5_000; // see startOnce()
const STOP_TIMEOUT_MS = 10_000;
const LEFTOVER_GRACE_MS = 2_000; // the last processes of a sandbox are reaped asynchronously
const SANITIZER_MARKERS = ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:'];
const LOCK_DIR = path.join(os.tmpdir(), 'corral-integration.lock');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A key of the form the SDKs expect: e2b_ + 40 hex digits. */
export function randomApiKey() {
  return `e2b_${crypto.randomBytes(20).toString('hex')}`;
}

/** A TCP port that was free a moment ago (bound to port 0, then released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function tail(text, max = 8000) {
  return text.length <= max ? text : `[... ${text.length - max} bytes cut ...]\n${text.slice(-max)}`;
}

function describeExit(code, signal) {
  return signal ? `killed by ${signal}` : `exited with status ${code}`;
}

/** A running `corral serve`; see startServer(). */
export class CorralServer {
  constructor({ child, port, apiKey, apiKeys, proxy }) {
    this.child = child;
    this.pid = child.pid;
    this.port = port;
    /** The key clients should send (the server's first --api-key, or any valid key). */
    this.apiKey = apiKey;
    this.apiKeys = apiKeys;
    this.proxy = proxy;
    /** Base URL for both E2B_API_URL and E2B_SANDBOX_URL (the trace proxy if CORRAL_TRACE). */
    this.url = proxy ? proxy.url : `http://127.0.0.1:${port}`;
    this.directUrl = `http://127.0.0.1:${port}`;
    this.stderrText = '';
    this.stdoutText = '';
    this.exitStatus = null; // {code, signal} once exited
    this.stopping = false;
    this.exited = new Promise((resolve) => {
      liveServers.add(this);
      // Remember what the server runs, so that its zygotes and sandboxes are
      // still known as ours if it dies and they are orphaned.
      const sampler = setInterval(() => {
        for (const key of processTree(this.pid)) ourProcesses.add(key);
      }, 1_000);
      sampler.unref();
      child.on('exit', (code, signal) => {
        clearInterval(sampler);
        liveServers.delete(this);
        this.exitStatus = { code, signal };
        if (!this.stopping) {
          process.stderr.write(
            `harness: corral serve (pid ${this.pid}) ${describeExit(code, signal)} while tests were running; ` +
              `stderr:\n${tail(this.stderrText)}\n`,
          );
        }
        resolve(this.exitStatus);
      });
    });
  }

  get stderr() {
    return this.stderrText;
  }

  /** Connection options for Sandbox.create()/connect()/list()... of either SDK. */
  sdkOpts(extra = {}) {
    return { apiUrl: this.url, sandboxUrl: this.url, apiKey: this.apiKey, ...extra };
  }

  /** Points the SDKs at this server through the environment (E2B_API_URL etc.). */
  setEnv() {
    for (const name of ['E2B_DEBUG', 'E2B_DOMAIN', 'E2B_USER_AGENT_SOURCE', 'E2B_ACCESS_TOKEN']) {
      delete process.env[name];
    }
    process.env.E2B_API_URL = this.url;
    process.env.E2B_SANDBOX_URL = this.url;
    process.env.E2B_API_KEY = this.apiKey;
  }

  /** Sanitizer reports found in the server's stderr so far. */
  sanitizerReports() {
    return this.stderrText
      .split('\n')
      .filter((line) => SANITIZER_MARKERS.some((m) => line.includes(m)));
  }

  /**
   * The server's open descriptors: `total`, the TCP connections of clients to
   * its listening port (`clients`, which keep-alive makes come and go), and
   * everything else (`own` = total - clients).
   */
  openFds() {
    const dir = `/proc/${this.pid}/fd`;
    const inodes = new Set();
    let total = 0;
    for (const fd of fs.readdirSync(dir)) {
      let target;
      try {
        target = fs.readlinkSync(`${dir}/${fd}`);
      } catch {
        continue; // closed meanwhile
      }
      total++;
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m) inodes.add(m[1]);
    }
    let clients = 0;
    for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
      let lines;
      try {
        lines = fs.readFileSync(table, 'utf8').split('\n').slice(1);
      } catch {
        continue;
      }
      for (const line of lines) {
        const f = line.trim().split(/\s+/);
        if (f.length < 10) continue;
        const localPort = parseInt(f[1].split(':').pop(), 16);
        const state = f[3];
        if (localPort === this.port && state !== '0A' && inodes.has(f[9])) clients++;
      }
    }
    return { total, clients, own: total - clients };
  }

  /** SIGKILL, as a crash would: whatever it leaves is for the next start to clean. */
  async kill() {
    this.stopping = true;
    for (const key of processTree(this.pid)) ourProcesses.add(key);
    this.child.kill('SIGKILL');
    await this.exited;
    if (this.proxy) await this.proxy.close();
  }

  /**
   * SIGTERM, then asserts a clean exit (status 0 within 10 s) and no sanitizer
   * report. Throws an Error listing every problem, with the server's stderr.
   */
  async stop() {
    const problems = [];
    if (this.exitStatus) {
      problems.push(`corral serve had already ${describeExit(this.exitStatus.code, this.exitStatus.signal)} before it was stopped`);
    } else {
      this.stopping = true;
      // Whatever this server runs (zygotes, sandboxes) is ours even once orphaned.
      for (const key of processTree(this.pid)) ourProcesses.add(key);
      this.child.kill('SIGTERM');
      let timer;
      const timedOut = await Promise.race([
        this.exited.then(() => false),
        new Promise((resolve) => {
          timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        problems.push(`corral serve did not exit within ${STOP_TIMEOUT_MS / 1000} s of SIGTERM (killed with SIGKILL)`);
        this.child.kill('SIGKILL');
        await this.exited;
      } else if (this.exitStatus.code !== 0) {
        problems.push(`corral serve ${describeExit(this.exitStatus.code, this.exitStatus.signal)} after SIGTERM (expected status 0)`);
      }
    }
    if (this.proxy) await this.proxy.close();
    const reports = this.sanitizerReports();
    if (reports.length) problems.push(`sanitizer reports in the server's stderr:\n  ${reports.join('\n  ')}`);
    if (problems.length) {
      throw new Error(`${problems.join('\n')}\n--- corral serve stderr ---\n${tail(this.stderrText)}`);
    }
  }
}

let gatewayFlagKnown = null;

/** Whether this corral's `serve` has --gateway-listen (the OpenAI-compatible gateway). */
export function gatewaySupported() {
  if (gatewayFlagKnown === null) {
    const help = spawnSync(CORRAL, ['serve', '--help'], { encoding: 'utf8', timeout: 10_000 });
    gatewayFlagKnown = `${help.stdout ?? ''}${help.stderr ?? ''}`.includes('--gateway-listen');
  }
  return gatewayFlagKnown;
}

/**
 * Starts `corral serve --listen 127.0.0.1:PORT --opensandbox-listen
 * 127.0.0.1:PORT2 [--gateway-listen 127.0.0.1:PORT3] [--api-key K ...]
 * [--config F]` on free ports and waits for its "listening" line.
 *
 * `gateway`: true passes --gateway-listen and waits for the gateway's
 * "listening" line too (server.gatewayUrl = 'http://127.0.0.1:PORT3/v1');
 * undefined (the default) does the same when this corral has the option,
 * but then starts without the gateway (gatewayUrl null) if its line does
 * not come within a few seconds of the E2B one; false passes
 * `--gateway-listen off` (when this corral has the option). Either way the
 * gateway's default port (4000) is never used. `env`: variables added to
 * its environment.
 */
export async function startServer({ apiKeys = [], config, args = [], gateway, env = {} } = {}) {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    throw new Error('corral serve did not start: the integration tests must run as root (sandboxes need namespaces, cgroups and mounts)');
  }
  try {
    fs.accessSync(CORRAL, fs.constants.X_OK);
  } catch {
    throw new Error(`corral serve did not start: no executable corral at ${CORRAL} (build it with \`make test-build\`, or set CORRAL)`);
  }
  let lastError;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce({ apiKeys, config, args, gateway, extraEnv: env });
    } catch (err) {
      lastError = err;
      if (!err.addressInUse) throw err; // only a lost race for the port is worth a retry
    }
  }
  throw lastError;
}

async function startOnce({ apiKeys, config, args, gateway, extraEnv }) {
  const port = await freePort();
  const osbPort = await freePort();
  const withGateway = gateway === true || (gateway === undefined && gatewaySupported());
  const gwPort = withGateway ? await freePort() : null;
  const argv = ['serve', '--listen', `127.0.0.1:${port}`, '--opensandbox-listen', `127.0.0.1:${osbPort}`];
  if (withGateway) argv.push('--gateway-listen', `127.0.0.1:${gwPort}`);
  else if (gateway === false && gatewaySupported()) argv.push('--gateway-listen', 'off');
  for (const key of apiKeys) argv.push('--api-key', key);
  if (config) argv.push('--config', config);
  argv.push(...args);

  const env = { ...process.env, ...extraEnv };
  delete env.CORRAL_API_KEYS; // the keys are what `apiKeys` says
  // setEnv() points this process's SDKs at a server: a server started later
  // must not read them (the gateway's e2b and opensandbox providers would)
  for (const name of Object.keys(env)) if (/^(E2B_|OPEN_SANDBOX_)/.test(name)) delete env[name];
  const child = spawn(CORRAL, argv, { stdio: ['ignore', 'pipe', 'pipe'], env });
  const log = process.env.CORRAL_SERVE_LOG ? fs.createWriteStream(process.env.CORRAL_SERVE_LOG, { flags: 'a' }) : null;
  log?.write(`\n=== ${new Date().toISOString()} ${CORRAL} ${argv.join(' ')}\n`);

  const server = new CorralServer({ child, port, apiKey: apiKeys[0] ?? randomApiKey(), apiKeys, proxy: null });
  server.osbPort = osbPort;
  /** Base URL of the OpenSandbox API (without /v1). */
  server.osbUrl = `http://127.0.0.1:${osbPort}`;
  /** The gateway's port and base URL (with /v1, as the openai SDK's baseURL), or null. */
  server.gatewayPort = null;
  server.gatewayUrl = null;
  const command = `${CORRAL} ${argv.join(' ')}`;
  const expected = `corral: listening on http://127.0.0.1:${port}`;
  // The line may go on after the URL ("... (E2B sandbox API)"); with
  // --log-format json it is the message of a JSON line.
  const escape = (text) => text.replace(/[.*+?^$()|[\]\\{}]/g, '\\$&');
  const lineFor = (text) =>
    new RegExp(`^${escape(text)}(\\s|$)|"msg":"${escape(text.replace(/^corral: /, ''))}[ "]`, 'm');
  const listening = lineFor(expected);
  const gatewayExpected = withGateway ? `corral: listening on http://127.0.0.1:${gwPort}` : null;
  const gatewayListening = withGateway ? lineFor(gatewayExpected) : null;

  const ready = new Promise((resolve, reject) => {
    const fail = (why) => {
      const err = new Error(`corral serve did not start: ${why}\ncommand: ${command}\n--- stderr ---\n${tail(server.stderrText) || '(empty)'}`);
      err.addressInUse = /address already in use|EADDRINUSE/i.test(server.stderrText);
      reject(err);
    };
    let graceTimer = null;
    const timer = setTimeout(() => {
      clearTimeout(graceTimer);
      child.kill('SIGKILL');
      const missing = listening.test(server.stderrText) ? gatewayExpected : expected;
      fail(`no "${missing}" line on stderr within ${START_TIMEOUT_MS / 1000} s (killed it)`);
    }, START_TIMEOUT_MS);
    let settled = false;
    const done = (gatewayUp) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      if (gatewayUp) {
        server.gatewayPort = gwPort;
        server.gatewayUrl = `http://127.0.0.1:${gwPort}/v1`;
      }
      resolve();
    };
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      server.stdoutText += chunk;
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      server.stderrText += chunk;
      log?.write(chunk);
      if (!listening.test(server.stderrText)) return;
      if (!withGateway) return done(false);
      if (gatewayListening.test(server.stderrText)) return done(true);
      // The gateway's line may come before or after the E2B one; give it a
      // moment, and go on without it unless it was asked for explicitly.
      if (gateway !== true && graceTimer === null) graceTimer = setTimeout(() => done(false), GATEWAY_LINE_GRACE_MS);
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      clearTimeout(graceTimer);
      fail(`cannot run it: ${err.message}`);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      clearTimeout(graceTimer);
      // Let the last stderr bytes arrive before reporting.
      setImmediate(() => fail(`it ${describeExit(code, signal)} before listening`));
    });
  });
  server.stopping = true; // an exit during start-up is reported by `ready`, not as a crash
  try {
    await ready;
  } catch (err) {
    if (!server.exitStatus) {
      child.kill('SIGKILL');
      await server.exited;
    }
    throw err;
  }
  server.stopping = false;
  if (process.env.CORRAL_TRACE) {
    server.proxy = await startTraceProxy(port, process.env.CORRAL_TRACE);
    server.url = server.proxy.url;
  }
  return server;
}

/* ------------------------------------------------------------------------ */
/* Host state                                                               */
/*                                                                          */
/* The host may be shared with other corral users (a unit test, another     */
/* server) while the suite runs. A leftover is blamed on this run unless it */
/* was there before the server started (the baseline) or it demonstrably    */
/* belongs to another live owner: its sandbox's processes descend from a    */
/* live process outside the tree of our servers, or its slot is locked by   */
/* such a process. Everything else counts, orphans included.                */

function readDirNames(dir, onlyDirs = false) {
  try {
    return fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((e) => !onlyDirs || e.isDirectory())
      .map((e) => path.join(dir, e.name));
  } catch (err) {
    if (err.code === 'ENOENT') return [];
    throw err;
  }
}

function readOr(file, fallback = null) {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return fallback; // gone meanwhile
  }
}

/** Every process: pid -> {pid, ppid, start, uid (highest of real/effective/saved/fs), name, sandbox id}. */
function processTable() {
  const table = new Map();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readOr(`/proc/${entry}/stat`);
    const status = readOr(`/proc/${entry}/status`);
    if (!stat || !status) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is the state (field 3)
    const uids = /^Uid:\s+(.*)$/m.exec(status)?.[1].split(/\s+/).map(Number) ?? [0];
    const proc = {
      pid: Number(entry),
      ppid: Number(fields[1]),
      start: fields[19],
      uid: Math.max(...uids),
      name: /^Name:\s+(.*)$/m.exec(status)?.[1] ?? '?',
      id: null,
    };
    if (proc.uid >= UID_BASE) proc.id = /\/corral\/([^/\n]+)/.exec(readOr(`/proc/${entry}/cgroup`, ''))?.[1] ?? null;
    table.set(proc.pid, proc);
  }
  return table;
}

const procKey = (p) => `${p.pid}@${p.start}`;

/** Keys of `root` and all its descendants. */
function processTree(root, table = processTable()) {
  const children = new Map();
  for (const p of table.values()) {
    if (!children.has(p.ppid)) children.set(p.ppid, []);
    children.get(p.ppid).push(p);
  }
  const keys = new Set();
  const stack = table.has(root) ? [table.get(root)] : [];
  while (stack.length) {
    const p = stack.pop();
    keys.add(procKey(p));
    stack.push(...(children.get(p.pid) ?? []));
  }
  return keys;
}

/** Processes of our servers (keys), recorded just before each is stopped. */
const ourProcesses = new Set();
/** Servers started by this process that have not exited yet. */
const liveServers = new Set();

/** The keys of our servers' processes: those recorded at stop, and the trees of the live ones. */
function ourProcessKeys(table) {
  const keys = new Set(ourProcesses);
  for (const server of liveServers) for (const k of processTree(server.pid, table)) keys.add(k);
  return keys;
}

/** The live process outside our servers' trees (`ours`) that `proc` descends from, if any. */
function foreignAncestor(proc, table, ours) {
  let pid = proc.ppid;
  for (let hops = 0; pid > 1 && hops < 64; hops++) {
    const q = table.get(pid);
    if (!q || ours.has(procKey(q))) return null;
    if (q.uid < UID_BASE) return q;
    pid = q.ppid;
  }
  return null;
}

/** flock holders: inode -> pid. */
function flockHolders() {
  const holders = new Map();
  for (const line of (readOr('/proc/locks', '') ?? '').split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f[1] === 'FLOCK' && f[5]) holders.set(f[5].split(':')[2], Number(f[4]));
  }
  return holders;
}

function sandboxCgroups() {
  if (fs.existsSync(path.join(CGROUP_ROOT, 'cgroup.controllers'))) {
    return readDirNames(path.join(CGROUP_ROOT, 'corral'), true); // cgroup v2
  }
  return CONTROLLERS.flatMap((c) => readDirNames(path.join(CGROUP_ROOT, c, 'corral'), true));
}

/**
 * What sandboxes leave on the host while they exist, as strings, split into
 * `left` (unowned, or owned by our servers) and `foreign` (owned by another
 * live process).
 */
export function hostLeftovers() {
  const table = processTable();
  const ours = ourProcessKeys(table);
  const foreignIds = new Map(); // sandbox id -> owner description
  const left = { processes: [], cgroups: [], slots: [], mounts: [], disks: [] };
  const foreign = { processes: [], cgroups: [], slots: [], mounts: [], disks: [] };

  const sandboxProcs = [...table.values()].filter((p) => p.uid >= UID_BASE);
  for (const p of sandboxProcs) {
    const owner = foreignAncestor(p, table, ours);
    if (owner && p.id) foreignIds.set(p.id, `pid ${owner.pid} (${owner.name})`);
  }
  const holders = flockHolders();
  const slots = readDirNames(path.join(STATE_DIR, 'slots')).map((file) => {
    const id = (readOr(file, '') ?? '').trim();
    let holder = null;
    try {
      holder = table.get(holders.get(String(fs.statSync(file).ino))) ?? null;
    } catch {
      // removed meanwhile
    }
    if (holder && !ours.has(procKey(holder)) && id && !foreignIds.has(id)) {
      foreignIds.set(id, `pid ${holder.pid} (${holder.name})`);
    }
    return { file, id };
  });

  const sort = (isForeign, kind, item) => (isForeign ? foreign : left)[kind].push(item);
  for (const p of sandboxProcs) {
    const owner = foreignAncestor(p, table, ours);
    sort(Boolean(owner) || (p.id && foreignIds.has(p.id)), 'processes',
      `pid ${p.pid} (${p.name}) uid ${p.uid}${p.id ? ` sandbox ${p.id}` : ''}`);
  }
  for (const dir of sandboxCgroups()) sort(foreignIds.has(path.basename(dir)), 'cgroups', dir);
  for (const { file, id } of slots) sort(foreignIds.has(id), 'slots', `${file} (${id || 'empty'})`);
  const mountinfo = readOr('/proc/self/mountinfo', '') ?? '';
  for (const line of mountinfo.split('\n').filter((l) => l.includes(STATE_DIR))) {
    sort([...foreignIds.keys()].some((id) => line.includes(id)), 'mounts', line);
  }
  // A disk's loop device names no sandbox: another live owner may hold it.
  for (const dev of readDirNames('/sys/block').map((d) => path.basename(d)).filter((d) => d.startsWith('loop'))) {
    const backing = readOr(`/sys/block/${dev}/loop/backing_file`, '') ?? '';
    if (backing.startsWith(`${DISK_DIR}/`)) sort(foreignIds.size > 0, 'disks', `/dev/${dev} (${backing.trim()})`);
  }
  return { left, foreign, owners: foreignIds };
}

function subtract(now, baseline) {
  const out = {};
  for (const [kind, items] of Object.entries(now)) {
    const before = new Set(baseline?.[kind] ?? []);
    out[kind] = items.filter((item) => !before.has(item));
  }
  return out;
}

const isEmpty = (left) => Object.values(left).every((items) => items.length === 0);

function formatLeftovers(left) {
  return Object.entries(left)
    .filter(([, items]) => items.length)
    .map(([kind, items]) => `  ${kind}:\n${items.map((i) => `    ${i}`).join('\n')}`)
    .join('\n');
}

/** Everything on the host now, for a baseline: owned or not. */
export function hostBaseline() {
  const { left, foreign } = hostLeftovers();
  const all = {};
  for (const kind of Object.keys(left)) all[kind] = [...left[kind], ...foreign[kind]];
  return all;
}

/**
 * Asserts that nothing new is on the host compared to `baseline` (from
 * hostBaseline(), taken before the server started), apart from what another
 * live owner holds; allows a short grace period for asynchronous teardown.
 */
export async function assertNothingLeft(baseline) {
  const deadline = Date.now() + LEFTOVER_GRACE_MS;
  let state = hostLeftovers();
  let left = subtract(state.left, baseline);
  while (!isEmpty(left) && Date.now() < deadline) {
    await sleep(50);
    state = hostLeftovers();
    left = subtract(state.left, baseline);
  }
  const foreign = subtract(state.foreign, baseline);
  if (!isEmpty(foreign)) {
    const owners = [...new Set(state.owners.values())].join(', ');
    process.stderr.write(`harness: ignored sandbox state of other live corral users (${owners}):\n${formatLeftovers(foreign)}\n`);
  }
  if (!isEmpty(left)) {
    throw new Error(`left on the host after corral serve stopped:\n${formatLeftovers(left)}`);
  }
}

/* ------------------------------------------------------------------------ */
/* Serialising test files                                                   */

function processAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Waits until no other test process holds the host; returns the release function. */
export async function acquireHostLock() {
  let warned = false;
  const started = Date.now();
  for (;;) {
    try {
      fs.mkdirSync(LOCK_DIR);
      fs.writeFileSync(path.join(LOCK_DIR, 'pid'), String(process.pid));
      return () => fs.rmSync(LOCK_DIR, { recursive: true, force: true });
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    let owner = NaN;
    try {
      owner = Number(fs.readFileSync(path.join(LOCK_DIR, 'pid'), 'utf8'));
    } catch {
      // being created or removed right now
    }
    const age = (() => {
      try {
        return Date.now() - fs.statSync(LOCK_DIR).mtimeMs;
      } catch {
        return 0;
      }
    })();
    if ((Number.isInteger(owner) && owner > 0 && !processAlive(owner)) || (Number.isNaN(owner) && age > 5_000)) {
      fs.rmSync(LOCK_DIR, { recursive: true, force: true }); // its owner died
      continue;
    }
    if (!warned && Date.now() - started > 5_000) {
      process.stderr.write(`harness: waiting for the integration test process ${owner} to release ${LOCK_DIR}\n`);
      warned = true;
    }
    await sleep(200);
  }
}

/* ------------------------------------------------------------------------ */
/* node:test wiring                                                         */

/**
 * Registers before()/after() hooks that run one `corral serve` for the whole
 * test file, point the SDKs at it through E2B_API_URL, E2B_SANDBOX_URL and
 * E2B_API_KEY, and check the clean exit and the host afterwards. Returns an
 * object whose `server` field is set once the server is up.
 *
 * `options` are startServer()'s, or a function returning them (or a promise
 * of them), called in before() once the host is ours: for options that need
 * something started first, such as a config file naming a port.
 * `afterStop`, when given, runs once the server has stopped and before the
 * host is checked (to check and stop what else the file started); what it
 * throws is reported with the other problems.
 */
export function useServer(options = {}, { afterStop = null } = {}) {
  const ctx = { server: null, baseline: null };
  let release = null;
  before(async () => {
    release = await acquireHostLock();
    ctx.baseline = hostBaseline();
    if (!isEmpty(ctx.baseline)) {
      process.stderr.write(
        `harness: the host already had sandbox state before corral serve started (ignored by the final check):\n${formatLeftovers(ctx.baseline)}\n`,
      );
    }
    ctx.server = await startServer(typeof options === 'function' ? await options() : options);
    ctx.server.setEnv();
  });
  after(async () => {
    const problems = [];
    try {
      if (ctx.server) {
        try {
          await ctx.server.stop();
        } catch (err) {
          problems.push(err.message);
        }
      }
      if (afterStop) {
        try {
          await afterStop();
        } catch (err) {
          problems.push(err.message);
        }
      }
      if (ctx.server) {
        try {
          await assertNothingLeft(ctx.baseline);
        } catch (err) {
          problems.push(err.message);
        }
      }
    } finally {
      release?.();
    }
    if (problems.length) throw new Error(problems.join('\n'));
  });
  return ctx;
}

/**
 * Runs fn(sandbox) and kills the sandbox whatever happens: a failing kill
 * (or a kill whose answer `checkKill` refuses) is reported only when fn
 * itself succeeded; `afterKill` (closing an SDK's HTTP agent) runs last.
 */
export async function killAfter(sandbox, fn, { checkKill, afterKill } = {}) {
  let failed = true;
  try {
    const result = await fn(sandbox);
    failed = false;
    return result;
  } finally {
    try {
      const killed = await sandbox.kill();
      if (checkKill) checkKill(killed);
    } catch (err) {
      if (!failed) throw err;
    } finally {
      if (afterKill) await afterKill();
    }
  }
}

/** Creates a sandbox with `SandboxClass.create(opts)`, then killAfter(it, fn). */
export async function withSandbox(SandboxClass, fn, opts) {
  const sandbox = opts === undefined ? await SandboxClass.create() : await SandboxClass.create(opts);
  return killAfter(sandbox, fn);
}

/** Polls fn() until it returns a truthy value or timeoutMs elapses; returns the last value. */
export async function eventually(fn, { timeoutMs = 10_000, intervalMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value || Date.now() >= deadline) return value;
    await sleep(intervalMs);
  }
}

/* ------------------------------------------------------------------------ */
/* CORRAL_TRACE: a logging HTTP proxy between the SDK and the server         */

const TRACE_BODY_LIMIT = 4096;

function printable(chunks, total) {
  const buf = Buffer.concat(chunks).subarray(0, TRACE_BODY_LIMIT);
  const text = buf
    .toString('latin1')
    .replace(/[^\x20-\x7e\n]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return total > TRACE_BODY_LIMIT ? `${text}[... ${total - TRACE_BODY_LIMIT} more bytes]` : text;
}

function capture(stream) {
  const state = { chunks: [], total: 0 };
  stream.on('data', (chunk) => {
    if (state.total < TRACE_BODY_LIMIT) state.chunks.push(chunk);
    state.total += chunk.length;
  });
  return state;
}

async function startTraceProxy(targetPort, file) {
  const out = fs.createWriteStream(file, { flags: 'a' });
  const agent = new http.Agent({ keepAlive: true });
  let seq = 0;
  const srv = http.createServer((req, res) => {
    const id = ++seq;
    const t0 = Date.now();
    const reqBody = capture(req);
    const head = Object.entries(req.headers)
      .filter(([k]) => /^(e2b-|x-api-key|x-access-token|content-type|connect-|authorization)/i.test(k))
      .map(([k, v]) => `${k}: ${v}`)
      .join(' | ');
    let logged = false;
    const write = (status, resBody, note = '') => {
      if (logged) return;
      logged = true;
      out.write(
        `#${id} ${req.method} ${req.url}  [${head}]\n` +
          `> ${printable(reqBody.chunks, reqBody.total)}\n` +
          `< ${status} after ${Date.now() - t0} ms${note}\n` +
          (resBody ? `< ${printable(resBody.chunks, resBody.total)}\n` : '') +
          '\n',
      );
    };
    const upstream = http.request(
      { host: '127.0.0.1', port: targetPort, method: req.method, path: req.url, headers: req.headers, agent },
      (ures) => {
        const resBody = capture(ures);
        res.writeHead(ures.statusCode, ures.statusMessage, ures.rawHeaders);
        ures.pipe(res);
        ures.on('end', () => write(ures.statusCode, resBody));
        ures.on('error', () => {
          write(ures.statusCode, resBody, ' (server connection broke mid-body)');
          res.destroy();
        });
        ures.on('aborted', () => {
          write(ures.statusCode, resBody, ' (server aborted mid-body)');
          res.destroy();
        });
        res.on('close', () => {
          if (!ures.complete) {
            write(ures.statusCode, resBody, ' (client went away mid-body)');
            ures.destroy();
          }
        });
      },
    );
    upstream.on('error', (err) => {
      write('no response', null, ` (${err.code || err.message})`);
      res.destroy();
    });
    req.pipe(upstream);
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${srv.address().port}`;
  out.write(`=== ${new Date().toISOString()} trace proxy ${url} -> http://127.0.0.1:${targetPort}\n`);
  return {
    url,
    close: () =>
      new Promise((resolve) => {
        agent.destroy();
        srv.closeAllConnections?.();
        srv.close(() => out.end(resolve));
      }),
  };
}
