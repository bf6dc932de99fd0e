// The check of deploy/container/Containerfile's build stage that takes a
// few seconds, in a file of its own so that `node --test` runs it beside the
// others: what the build stage COPYs from the repository, laid out as the
// stage's WORKDIR would hold it, is enough for CMake to configure corral's
// project (every source, example, benchmark and test CMakeLists.txt names).
//
//   node --test tests/deploy/container-build.test.mjs

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { REPO, contextCopies, copyParts, dockerignore, ignored, readContainerfile } from './lib.mjs';

const build = readContainerfile().stages.find((s) => s.name === 'build');
const run = (cmd, args) => spawnSync(cmd, args, { encoding: 'utf8' });

test('the build stage\'s copies are enough for CMake to configure the project', (t) => {
  assert.ok(build, 'the Containerfile has no stage named build');
  if (run('cmake', ['--version']).status !== 0) return t.skip('cmake is not here');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-image-'));
  const rules = dockerignore();
  try {
    let workdir = tmp;
    for (const ins of build.instructions) {
      if (ins.cmd === 'WORKDIR') workdir = path.join(tmp, ins.text.trim());
      if (!contextCopies(build).includes(ins)) continue;
      const { sources, dest } = copyParts(ins);
      const to = dest.startsWith('/') ? path.join(tmp, dest) : path.join(workdir, dest);
      for (const s of sources) {
        const from = path.join(REPO, s);
        // A folder's contents go into the destination; a file into it when it
        // ends with '/' (or there are several sources), else to it.
        const into = fs.statSync(from).isDirectory() || !(dest.endsWith('/') || sources.length > 1)
          ? to : path.join(to, path.basename(s));
        fs.cpSync(from, into, { recursive: true, filter: (src) => !ignored(rules, path.relative(REPO, src)) });
      }
    }
    const r = run('cmake', ['-S', workdir, '-B', path.join(workdir, 'build'), '-DCMAKE_BUILD_TYPE=RelWithDebInfo']);
    assert.equal(r.status, 0, `cmake cannot configure what the build stage copies:\n${r.stderr}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
