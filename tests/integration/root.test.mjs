// The sandbox's root through the official SDKs: E2B's `user: 'root'` in
// commands.run, pty.create and files.*, and OpenSandbox's uid/gid 0 in
// commands.run, on each sandbox's own writable root filesystem (an overlay
// of the host's system whose changes go to the sandbox's disk and vanish
// with it). `pip install` as root fetches a wheel this test builds from a
// package index of its own: a web server in a network namespace of the
// test's, on 10.234.N.2, the only private address the server opens.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import zlib from 'node:zlib';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { Sandbox as OsbSandbox } from '@alibaba-group/opensandbox';
import { Sandbox } from '@e2b/code-interpreter';
import { CommandExitError } from 'e2b';

import { killAfter, useServer, withSandbox } from './harness.mjs';

const T = { timeout: 180_000 };
const PKG = `corral_root_${crypto.randomBytes(4).toString('hex')}`;
const DEB = `corral-root-${crypto.randomBytes(4).toString('hex')}`;
const SECRET = crypto.randomBytes(8).toString('hex');

/** A network namespace with a package index on ADDR:80 (a python3 http.server). */
class PackageIndex {
  constructor() {
    const suffix = crypto.randomBytes(3).toString('hex');
    this.ns = `corral-pip-${suffix}`;
    this.vethHost = `crlp${suffix}h`;
    this.vethNs = `crlp${suffix}n`;
    const used = new Set(
      execFileSync('ip', ['-4', '-o', 'addr'], { encoding: 'utf8' })
        .split(/\s+/)
        .filter((w) => w.startsWith('10.234.'))
        .map((w) => Number(w.split('.')[2])),
    );
    const free = [...Array(254).keys()].map((i) => i + 1).filter((n) => !used.has(n));
    const n = free[crypto.randomInt(free.length)];
    this.net = `10.234.${n}.0/24`;
    this.hostAddr = `10.234.${n}.1`;
    this.addr = `10.234.${n}.2`;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-pip-index-'));
    this.server = null;
  }

  sh(...args) {
    execFileSync(args[0], args.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
  }

  /** The wheel (built with the host's python3 zipfile) and its PEP 503 page. */
  writeIndex() {
    const wheel = `${PKG}-1.0-py3-none-any.whl`;
    const pkgDir = path.join(this.dir, 'simple', PKG.replaceAll('_', '-'));
    fs.mkdirSync(pkgDir, { recursive: true });
    execFileSync('/usr/bin/python3', ['-c', `
import sys, zipfile, hashlib, base64
name, secret, out = sys.argv[1:]
files = {
    f"{name}/__init__.py": f"SECRET = {secret!r}\\n",
    f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n",
    f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: corral-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{name}-1.0.dist-info/RECORD,,")
files[f"{name}-1.0.dist-info/RECORD"] = "\\n".join(record) + "\\n"
with zipfile.ZipFile(out, "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
`, PKG, SECRET, path.join(pkgDir, wheel)]);
    fs.writeFileSync(path.join(pkgDir, 'index.html'), `<html><body><a href="${wheel}">${wheel}</a></body></html>\n`);
    this.writeDebian();
  }

  /** A flat Debian repository under debian/: DEB, built with dpkg-deb, and its Packages. */
  writeDebian() {
    const repo = path.join(this.dir, 'debian');
    const root = path.join(this.dir, 'deb-root');
    fs.mkdirSync(path.join(root, 'DEBIAN'), { recursive: true });
    fs.mkdirSync(path.join(root, 'usr', 'share', DEB), { recursive: true });
    fs.mkdirSync(repo, { recursive: true });
    fs.writeFileSync(path.join(root, 'usr', 'share', DEB, 'secret'), `${SECRET}\n`);
    fs.writeFileSync(path.join(root, 'DEBIAN', 'control'),
      `Package: ${DEB}\nVersion: 1.0\nArchitecture: all\nMaintainer: corral tests <tests@corral.invalid>\nDescription: a package of corral's tests\n`);
    const file = `${DEB}_1.0_all.deb`;
    execFileSync('dpkg-deb', ['--root-owner-group', '--build', root, path.join(repo, file)], { stdio: 'ignore' });
    const deb = fs.readFileSync(path.join(repo, file));
    const control = fs.readFileSync(path.join(root, 'DEBIAN', 'control'), 'utf8');
    const packages = `${control}Filename: ./${file}\nSize: ${deb.length}\nSHA256: ${crypto.createHash('sha256').update(deb).digest('hex')}\n\n`;
    fs.writeFileSync(path.join(repo, 'Packages'), packages);
    fs.writeFileSync(path.join(repo, 'Packages.gz'), zlib.gzipSync(packages));
  }

  async start() {
    this.writeIndex();
    this.sh('ip', 'netns', 'add', this.ns);
    this.sh('ip', 'link', 'add', this.vethHost, 'type', 'veth', 'peer', 'name', this.vethNs);
    this.sh('ip', 'link', 'set', this.vethNs, 'netns', this.ns);
    this.sh('ip', 'addr', 'add', `${this.hostAddr}/24`, 'dev', this.vethHost);
    this.sh('ip', 'link', 'set', this.vethHost, 'up');
    this.sh('ip', '-n', this.ns, 'addr', 'add', `${this.addr}/24`, 'dev', this.vethNs);
    this.sh('ip', '-n', this.ns, 'link', 'set', this.vethNs, 'up');
    this.sh('ip', '-n', this.ns, 'link', 'set', 'lo', 'up');
    this.server = spawn('ip', ['netns', 'exec', this.ns, '/usr/bin/python3', '-m', 'http.server', '80',
      '--bind', this.addr, '--directory', this.dir], { stdio: 'ignore' });
    // Up once the host reaches it (the veth pair takes a moment).
    for (const deadline = Date.now() + 15_000; ;) {
      const ok = await new Promise((resolve) => {
        const s = net.connect({ host: this.addr, port: 80 }, () => { s.destroy(); resolve(true); });
        s.on('error', () => resolve(false));
      });
      if (ok) break;
      if (Date.now() > deadline) throw new Error(`the package index on ${this.addr}:80 did not come up`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async stop() {
    if (this.server && this.server.exitCode === null) {
      const gone = new Promise((r) => this.server.once('exit', r));
      this.server.kill('SIGKILL');
      await gone;
    }
    for (const args of [['link', 'del', this.vethHost], ['netns', 'del', this.ns]]) {
      try {
        execFileSync('ip', args, { stdio: 'ignore' });
      } catch {
        // not made (start failed early)
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

let index = null;
let configDir = null;
const ctx = useServer(
  async () => {
    index = new PackageIndex();
    await index.start();
    configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-root-test-'));
    const config = path.join(configDir, 'corral.yaml');
    fs.writeFileSync(config, `network:\n  modes: [off, internet]\n  allow_private: [${index.net}]\n`);
    return { config, gateway: false };
  },
  {
    afterStop: async () => {
      try {
        await index?.stop();
      } finally {
        if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
      }
    },
  },
);

const HOST_SITE = '/usr/local/lib/python3.11/dist-packages';

test("commands.run and pty.create as root: uid 0 of the sandbox's own user namespace, home /root", T, () =>
  withSandbox(Sandbox, async (sbx) => {
    const root = await sbx.commands.run('id -u; id -g; echo $HOME $USER; pwd; cat /proc/self/uid_map', { user: 'root' });
    const [uid, gid, env, cwd, ...map] = root.stdout.trim().split('\n');
    assert.deepEqual([uid, gid, env, cwd], ['0', '0', '/root root', '/root']);
    // uid 0 inside is a host uid of the sandbox's, not the host's root.
    const outside = map.map((l) => l.trim().split(/\s+/)).find(([inside]) => inside === '0');
    assert.ok(outside && Number(outside[1]) > 65535, `root maps to the host's ${outside?.[1]}`);
    const user = await sbx.commands.run('id -u; pwd');
    assert.equal(user.stdout, '1000\n/home/user\n');

    let out = '';
    const pty = await sbx.pty.create({ user: 'root', cols: 80, rows: 24, onData: (d) => { out += Buffer.from(d).toString(); } });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "uid=$(id -u)"; exit\n'));
    await pty.wait();
    assert.match(out, /uid=0/);

    // Root of its sandbox only: no mounts, no namespaces, no host's root files.
    const probe = await sbx.commands.run(
      'mount -t tmpfs x /mnt 2>/dev/null && echo mounted; unshare -U true 2>/dev/null && echo unshared; ' +
        'cat /proc/1/environ >/dev/null 2>&1 && echo environ; echo done',
      { user: 'root' },
    );
    assert.equal(probe.stdout, 'done\n');
  }),
);

test('files.* as root: the root filesystem is writable, files are root\'s, relative paths start at /root', T, () =>
  withSandbox(Sandbox, async (sbx) => {
    await sbx.files.write('/etc/corral-root.conf', 'x = 1\n', { user: 'root' });
    const info = await sbx.files.getInfo('/etc/corral-root.conf', { user: 'root' });
    assert.equal(info.owner, 'root');
    assert.equal(info.group, 'root');
    const rel = await sbx.files.write('notes.txt', 'root notes', { user: 'root' });
    assert.equal(rel.path, '/root/notes.txt');
    assert.equal(await sbx.files.read('/root/notes.txt', { user: 'root' }), 'root notes');
    await sbx.files.makeDir('/opt/app', { user: 'root' });
    assert.deepEqual((await sbx.files.list('/opt', { user: 'root' })).map((e) => [e.name, e.owner]), [['app', 'root']]);
    // The sandbox's user keeps its own rights.
    await assert.rejects(sbx.files.write('/etc/corral-user.conf', 'x'), /Permission denied/);
    await assert.rejects(sbx.files.read('/root/notes.txt'), /Permission denied/);
    const err = await sbx.commands.run('id', { user: 'nobody' }).then(() => null, (e) => e);
    assert.ok(err && /invalid username: 'nobody'/.test(err.message), err?.message);
  }),
);

test('pip install as root from a package index: the package is the sandbox\'s, and vanishes with it', T, async () => {
  const url = `http://${index.addr}/simple/`;
  await withSandbox(Sandbox, async (sbx) => {
    const pip = await sbx.commands.run(
      `python3 -m pip install --no-cache-dir --disable-pip-version-check --index-url ${url} --trusted-host ${index.addr} ${PKG}`,
      { user: 'root', timeoutMs: 120_000 },
    ).catch((e) => (e instanceof CommandExitError ? assert.fail(`pip failed: ${e.stdout}\n${e.stderr}`) : Promise.reject(e)));
    assert.match(pip.stdout, new RegExp(`Successfully installed ${PKG.replaceAll('_', '[-_]')}-1\\.0`));
    // Installed into the system's site-packages, which the user's kernel imports from.
    const where = await sbx.commands.run(`python3 -c "import ${PKG}; print(${PKG}.__file__)"`);
    assert.equal(where.stdout.trim(), `${HOST_SITE}/${PKG}/__init__.py`);
    const ex = await sbx.runCode(`import ${PKG}\nprint(${PKG}.SECRET)`);
    assert.equal(ex.error, undefined, `${ex.error?.name}: ${ex.error?.value}`);
    assert.equal(ex.logs.stdout.join(''), `${SECRET}\n`);
    assert.ok(!fs.existsSync(`${HOST_SITE}/${PKG}`), "the host's own /usr changed");
  }, { allowInternetAccess: true });
  // Another sandbox starts from the host's system again.
  await withSandbox(Sandbox, async (sbx) => {
    const r = await sbx.commands.run(`python3 -c "import ${PKG}"`).then(() => null, (e) => e);
    assert.ok(r instanceof CommandExitError && /ModuleNotFoundError/.test(r.stderr), r?.stderr);
  });
});

test('apt-get install as root from a Debian repository: installed in the sandbox only', T, async () => {
  await withSandbox(Sandbox, async (sbx) => {
    // apt's settings and credentials of the host are not in sight.
    const hidden = await sbx.commands.run(
      'find /etc/apt/apt.conf.d /etc/apt/auth.conf.d -mindepth 1 | wc -l; test -e /etc/apt/auth.conf || echo no-auth',
      { user: 'root' },
    );
    assert.equal(hidden.stdout, '0\nno-auth\n');
    assert.ok(fs.readdirSync('/etc/apt/apt.conf.d').length > 0, 'the host has apt settings to hide');
    const list = '/etc/apt/sources.list.d/corral-test.list';
    await sbx.files.write(list, `deb [trusted=yes] http://${index.addr}/debian ./\n`, { user: 'root' });
    const only = `-o Dir::Etc::sourcelist=${list} -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0`;
    const apt = await sbx.commands.run(
      `apt-get ${only} update -q && DEBIAN_FRONTEND=noninteractive apt-get ${only} install -y -q ${DEB}`,
      { user: 'root', timeoutMs: 120_000 },
    ).catch((e) => (e instanceof CommandExitError ? assert.fail(`apt-get failed: ${e.stdout}\n${e.stderr}`) : Promise.reject(e)));
    assert.match(apt.stdout, new RegExp(`Setting up ${DEB} \\(1\\.0\\)`));
    const got = await sbx.commands.run(`cat /usr/share/${DEB}/secret; dpkg-query -W -f='\${Status}' ${DEB}`);
    assert.equal(got.stdout, `${SECRET}\ninstall ok installed`);
    assert.ok(!fs.existsSync(`/usr/share/${DEB}`), "the host's own /usr changed");
  }, { allowInternetAccess: true });
  await withSandbox(Sandbox, async (sbx) => {
    const r = await sbx.commands.run(`test -e /usr/share/${DEB} || echo gone; dpkg-query -W ${DEB} 2>&1 || true`);
    assert.match(r.stdout, /^gone\n.*no packages found/s);
  });
});

test('OpenSandbox commands.run with uid 0 runs as root; other uids are refused by name', T, async () => {
  const connectionConfig = { domain: new URL(ctx.server.osbUrl).host, protocol: 'http', apiKey: ctx.server.apiKey, requestTimeoutSeconds: 30 };
  const sbx = await OsbSandbox.create({ connectionConfig, image: 'python:3.12', timeoutSeconds: 300 });
  await killAfter(sbx, async () => {
    const root = await sbx.commands.run('id -u; touch /usr/local/corral-osb && ls -l /usr/local/corral-osb', { uid: 0, gid: 0 });
    assert.equal(root.error, undefined, JSON.stringify(root.error));
    const out = root.logs.stdout.map((m) => m.text).join('');
    assert.match(out, /^0\n?-rw-r--r-- 1 root root 0 .* \/usr\/local\/corral-osb\n?$/);
    const user = await sbx.commands.run('id -u', { uid: 1000 });
    assert.equal(user.logs.stdout.map((m) => m.text).join('').trim(), '1000');
    await assert.rejects(sbx.commands.run('id -u', { uid: 0, gid: 1000 }), /'gid' must be 0 with uid 0/);
    await assert.rejects(sbx.commands.run('id -u', { uid: 33 }), /'uid' must be 1000/);
  }, { afterKill: () => sbx.close() });
});
