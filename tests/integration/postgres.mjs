// A PostgreSQL server of a test file's own: tests/postgres makes a cluster
// in a temporary folder (initdb as the postgres user) listening on a Unix
// socket there; the file starts, stops and queries it, and it is removed
// when the file ends, also when a hook failed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { REPO_ROOT } from './harness.mjs';

const PG = path.join(REPO_ROOT, 'tests', 'postgres');

/** The server's folder and URL, and what a test does with it. */
export function usePostgres() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-pg-')); // tests/postgres hands it to the postgres user
  const url = `postgresql://corral@/corral?host=${dir}`;
  const run = (...args) => execFileSync(PG, [...args, dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  let removed = false;
  const remove = () => {
    if (!removed && fs.existsSync(dir)) run('remove');
    removed = true;
  };
  process.on('exit', remove);
  return {
    dir,
    url,
    /** Makes the cluster and starts it. */
    init: () => assert.equal(run('init').trim(), url),
    stop: () => run('stop'),
    start: () => run('start'),
    remove,
    /** One number the database answers to sql, read with psql. */
    number: (sql) => Number(execFileSync('psql', ['-X', '-At', '-h', dir, '-U', 'corral', '-d', 'corral', '-c', sql],
      { encoding: 'utf8' }).trim()),
  };
}
