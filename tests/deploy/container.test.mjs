// The checks of deploy/container/Containerfile (`make deploy-check`, part of
// `make test`), which cannot be built here (no container engine): read
// statically and against this Debian 12 host, its stages are Debian 12; every
// package it installs exists (in scripts/install-deps or Debian's index); the
// build stage has every package CMakeLists.txt's pkg_check_modules and the
// build's tools come from, and its COPYs are enough for CMake to configure;
// the runtime stage has every shared library the three programs load (their
// release build's ldd), the Python sandboxes run and mke2fs; and the files
// it copies exist and are not left out by .dockerignore. (That CMake
// configures what the build stage copies: container-build.test.mjs.)
//
//   CORRAL=build/corral node --test tests/deploy/

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import {
  CONTAINERFILE, CORRAL, REPO, aptPackages, cmakeExecutables, contextCopies, copyParts, dockerignore,
  execForm, ignored, installDepsGroups, readContainerfile, rel,
} from './lib.mjs';

const DEBIAN_12 = new Set(['debian:12', 'debian:bookworm', 'debian:12-slim', 'debian:bookworm-slim']);
// The programs corral is made of; corral finds the other two beside itself.
const PROGRAMS = ['corral', 'corral-serve', 'corral-zygote'];
// The groups of scripts/install-deps that the runtime stage must hold whole
// (found by the start of their comment): what sandboxes run.
const RUNTIME_GROUPS = ['the sandboxed Python', "sandboxes' disks"];
// The tools the build stage runs (besides what pkg_check_modules finds).
const BUILD_TOOLS = ['cmake', 'pkg-config', 'cc', 'make', 'strip'];

const cf = readContainerfile();
const build = cf.stages.find((s) => s.name === 'build');
const runtime = cf.stages[cf.stages.length - 1];

function run(cmd, args) {
  return spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
}

const have = (cmd) => run('sh', ['-c', `command -v ${cmd}`]).status === 0;

// What each package depends on (Depends and Pre-Depends, every alternative,
// every provider of a virtual package), for the packages of both stages and
// everything they reach, from the local index: one apt-cache run (each run
// reads the whole index).
let graph;
function dependencies() {
  if (graph) return graph;
  const packages = [...new Set(cf.stages.flatMap(aptPackages))];
  const r = run('apt-cache', ['depends', '--recurse', '--no-recommends', '--no-suggests', '--no-conflicts',
    '--no-breaks', '--no-replaces', '--no-enhances', ...packages]);
  assert.equal(r.status, 0, `apt-cache depends: ${r.stderr}`);
  graph = new Map();
  let deps = null;
  for (const line of r.stdout.split('\n')) {
    const top = /^(\S+)$/.exec(line);
    const dep = /^\s+\|?(?:Pre)?Depends:\s*(\S+)/.exec(line);
    const provider = /^ {4}(\S+)$/.exec(line);
    if (top) graph.set(top[1], (deps = new Set()));
    else if (dep && deps) deps.add(dep[1]);
    else if (provider && deps) deps.add(provider[1]);
  }
  return graph;
}

// The packages a stage installs: those it names and everything they need.
function closure(stage) {
  const g = dependencies();
  const out = new Set();
  const todo = [...aptPackages(stage)];
  while (todo.length) {
    const p = todo.pop();
    if (out.has(p)) continue;
    out.add(p);
    out.add(p.replace(/:any$/, ''));
    todo.push(...(g.get(p) ?? []));
  }
  return out;
}

// The Debian package that owns each file (by its path, its real path, or
// the same path across the /usr merge): a Map file -> package.
function owners(files) {
  const candidates = new Map();
  for (const f of files) {
    const real = fs.realpathSync(f);
    const forms = [f, real];
    for (const p of [f, real]) forms.push(p.startsWith('/usr/') ? p.slice(4) : `/usr${p}`);
    candidates.set(f, [...new Set(forms)]);
  }
  const r = run('dpkg-query', ['-S', ...new Set([...candidates.values()].flat())]);
  const byPath = new Map();
  for (const line of r.stdout.split('\n')) {
    const m = /^([^:,\s]+)(?::[^:\s]+)?(?:, [^:]+)*: (.+)$/.exec(line);
    if (m) byPath.set(m[2], m[1]);
  }
  const out = new Map();
  for (const [f, forms] of candidates) out.set(f, forms.map((p) => byPath.get(p)).find(Boolean));
  return out;
}

function needsDebianTools(t) {
  for (const cmd of ['apt-cache', 'dpkg-query']) {
    if (!have(cmd)) {
      t.skip(`${cmd} is not here (the tested host is Debian 12)`);
      return true;
    }
  }
  return false;
}

test('the Containerfile has a build stage and a runtime stage, both Debian 12', () => {
  const problems = [];
  if (!build) problems.push('no stage named build');
  if (cf.stages.length !== 2) problems.push(`${cf.stages.length} stages, not two (build, runtime)`);
  const names = new Set();
  for (const s of cf.stages) {
    if (!DEBIAN_12.has(s.from) && !names.has(s.from)) problems.push(`line ${s.line}: FROM ${s.from}, not Debian 12 (${[...DEBIAN_12].join(', ')})`);
    if (s.name) names.add(s.name);
  }
  assert.deepEqual(problems, []);
});

test('every package it installs is in scripts/install-deps or in Debian\'s index', (t) => {
  const known = new Set(installDepsGroups().flatMap((g) => g.packages));
  const problems = [];
  const packages = cf.stages.flatMap(aptPackages);
  assert.ok(packages.length, 'no apt-get install');
  const rest = packages.filter((p) => !known.has(p));
  if (rest.length && needsDebianTools(t)) return;
  const shown = run('apt-cache', ['show', '--no-all-versions', ...rest]).stdout;
  const found = new Set([...shown.matchAll(/^Package: (\S+)$/gm)].map((m) => m[1]));
  for (const p of rest) if (!found.has(p)) problems.push(`${p}: no such package in Debian's index (apt-cache show)`);
  assert.deepEqual(problems, []);
});

test('the build stage has the packages of every pkg_check_modules of CMakeLists.txt and of the build\'s tools', (t) => {
  if (needsDebianTools(t)) return;
  const installed = closure(build);
  const problems = [];
  const cmake = fs.readFileSync(path.join(REPO, 'CMakeLists.txt'), 'utf8');
  const modules = [...cmake.matchAll(/pkg_check_modules\(\s*\w+\s+(?:REQUIRED\s+)?(?:IMPORTED_TARGET\s+)?([\w.+-]+)/g)].map((m) => m[1]);
  assert.ok(modules.length, 'no pkg_check_modules in CMakeLists.txt');
  const files = new Map();
  for (const m of modules) {
    const dir = run('pkg-config', ['--variable=pcfiledir', m]).stdout.trim();
    const pc = path.join(dir, `${m}.pc`);
    if (!dir || !fs.existsSync(pc)) problems.push(`pkg-config module ${m}: not on this host (scripts/install-deps)`);
    else files.set(pc, `pkg-config module ${m}`);
  }
  for (const tool of BUILD_TOOLS) {
    const where = run('sh', ['-c', `command -v ${tool}`]).stdout.trim();
    if (!where) problems.push(`${tool}: not on this host`);
    else files.set(where, tool);
  }
  for (const [file, pkg] of owners([...files.keys()])) {
    if (!pkg) problems.push(`${files.get(file)}: ${file} belongs to no Debian package`);
    else if (!installed.has(pkg)) problems.push(`${files.get(file)}: its package ${pkg} is not installed by the build stage`);
  }
  assert.deepEqual(problems, []);
});

test('the runtime stage has every shared library corral\'s programs load', (t) => {
  if (needsDebianTools(t)) return;
  const dir = path.dirname(CORRAL);
  const programs = PROGRAMS.map((p) => path.join(dir, p));
  for (const p of programs) assert.ok(fs.existsSync(p), `${p} is missing: make build (or set CORRAL)`);
  const ldd = execFileSync('ldd', programs, { encoding: 'utf8' });
  const libs = [...new Set([...ldd.matchAll(/=>\s+(\/\S+)/g)].map((m) => m[1]))];
  assert.ok(libs.length > 5, `ldd found ${libs.length} libraries`);
  const installed = closure(runtime);
  const problems = [];
  for (const [lib, pkg] of owners(libs)) {
    if (!pkg) problems.push(`${lib}: belongs to no Debian package`);
    else if (!installed.has(pkg)) problems.push(`${lib}: its package ${pkg} is not installed by the runtime stage`);
  }
  if (/libasan|libubsan/.test(ldd)) problems.push(`${dir}: a sanitizer build; check the release build (make build)`);
  assert.deepEqual(problems, []);
});

test('the runtime stage has the Python sandboxes run and mke2fs (install-deps\' groups whole)', () => {
  const groups = installDepsGroups();
  const named = new Set(aptPackages(runtime));
  const problems = [];
  for (const start of RUNTIME_GROUPS) {
    const g = groups.find((x) => x.comment.startsWith(start));
    if (!g) {
      problems.push(`scripts/install-deps has no group whose comment starts "${start}"`);
      continue;
    }
    for (const p of g.packages) if (!named.has(p)) problems.push(`${p} (install-deps: ${g.comment}): not installed by the runtime stage`);
  }
  assert.deepEqual(problems, []);
});

test('the files it copies exist in the repository and .dockerignore lets them through', () => {
  const rules = dockerignore();
  const problems = [];
  for (const ins of cf.stages.flatMap(contextCopies)) {
    const { sources } = copyParts(ins);
    if (!sources.length) problems.push(`line ${ins.line}: ${ins.cmd} without a source`);
    for (const s of sources) {
      if (/^[a-z]+:\/\//i.test(s)) {
        problems.push(`line ${ins.line}: ${s}: a URL; the image is built from the repository only`);
        continue;
      }
      const p = path.posix.normalize(s).replace(/^\.?\/+/, '').replace(/\/+$/, '');
      if (p.startsWith('..')) problems.push(`line ${ins.line}: ${s} is outside the build's context`);
      else if (!fs.existsSync(path.join(REPO, p))) problems.push(`line ${ins.line}: ${s} does not exist in the repository`);
      else if (ignored(rules, p)) problems.push(`line ${ins.line}: ${s} is left out by .dockerignore`);
    }
  }
  assert.deepEqual(problems, []);
});

test('the runtime stage gets corral\'s three programs side by side, built by the build stage, and runs corral', () => {
  const problems = [];
  const targets = cmakeExecutables();
  const built = new Set(build.instructions.filter((i) => i.cmd === 'RUN')
    .flatMap((i) => [...i.text.matchAll(/--target\s+((?:[\w-]+\s*)+)/g)].flatMap((m) => m[1].split(/\s+/)))
    .filter(Boolean));
  for (const b of built) if (!targets.has(b)) problems.push(`the build stage builds ${b}, which CMakeLists.txt does not make`);
  const copies = runtime.instructions.filter((i) => i.cmd === 'COPY' && copyParts(i).flags.from === 'build');
  const dests = new Map();
  for (const ins of copies) {
    const { sources, dest } = copyParts(ins);
    for (const s of sources) {
      const name = path.posix.basename(s);
      if (!built.has(name)) problems.push(`line ${ins.line}: copies ${s}, which the build stage does not build (--target)`);
      const into = dest.endsWith('/') || sources.length > 1;
      dests.set(name, into ? path.posix.join(dest, name) : dest);
    }
  }
  for (const p of PROGRAMS) if (!dests.has(p)) problems.push(`the runtime stage does not copy ${p}`);
  const dirs = new Set(PROGRAMS.filter((p) => dests.has(p)).map((p) => path.posix.dirname(dests.get(p))));
  if (dirs.size > 1) problems.push(`the programs land in different folders (${[...dirs].join(', ')}); corral looks for the others beside itself`);
  const entry = runtime.instructions.filter((i) => i.cmd === 'ENTRYPOINT').pop();
  const words = entry && execForm(entry);
  if (!words) problems.push('no ENTRYPOINT in exec form (["...", ...])');
  else if (words[words.length - 1] !== dests.get('corral')) problems.push(`ENTRYPOINT ${entry.text} does not end with ${dests.get('corral')}`);
  assert.deepEqual(problems, []);
});

test(`${rel(CONTAINERFILE)} and .dockerignore exist`, () => {
  assert.ok(fs.existsSync(CONTAINERFILE));
  assert.ok(fs.existsSync(path.join(REPO, '.dockerignore')));
});
