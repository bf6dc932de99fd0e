// Each file of deploy/ and of these checks opens with a comment saying what
// it is for, as scripts/check-style asks of the C sources: YAML, the
// Containerfile, .dockerignore and shell with '#', JavaScript with '//' or
// '/*'. JSON has no comments (package.json says what it is in its
// "description").
//
//   node --test tests/deploy/files.test.mjs

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO, filesBelow, rel } from './lib.mjs';

const HASH = /^#(?!!)\s*\S/;
const SLASH = /^(\/\/|\/\*)\s*\S/;

function opening(file) {
  const name = path.basename(file);
  if (/\.(ya?ml)$/.test(name) || name === 'Containerfile' || name === '.dockerignore') return HASH;
  if (/\.sh$/.test(name)) return HASH;
  if (/\.(m?js)$/.test(name)) return SLASH;
  if (/\.json$/.test(name)) return null;
  return undefined;
}

test('every file of deploy/ and tests/deploy opens with a comment saying what it is for', () => {
  const files = [...filesBelow(path.join(REPO, 'deploy')), ...filesBelow(path.join(REPO, 'tests/deploy')),
    path.join(REPO, '.dockerignore')];
  const problems = [];
  for (const f of files) {
    const want = opening(f);
    if (want === null) continue;
    if (want === undefined) {
      problems.push(`${rel(f)}: a kind of file these checks do not know (teach tests/deploy/files.test.mjs its comments)`);
      continue;
    }
    // A script's first line may be its #! line; the comment follows it.
    const lines = fs.readFileSync(f, 'utf8').split('\n');
    const first = lines[0].startsWith('#!') ? lines[1] : lines[0];
    if (!want.test(first ?? '')) problems.push(`${rel(f)}: does not open with a comment`);
  }
  assert.deepEqual(problems, []);
});
