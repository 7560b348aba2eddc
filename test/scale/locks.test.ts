import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { openTestStore, type TestStore } from '../store/helpers.ts';
import { removeInstance } from '../../harness/service.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const WRITER = path.join(import.meta.dirname, 'lock-writer.ts');
const PROCESSES = 3;
const WRITES = 8;

function writer(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', WRITER, ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LOG_LEVEL: 'warn' } });
    let stderr = '';
    child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000); });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`writer exited ${code}: ${stderr}`))));
  });
}

/**
 * Store writes and registry repository changes are serialised across service processes (issue 19):
 * three real processes on one PostgreSQL table and one Redis do read-modify-writes of one record at
 * once; none may be lost. With locks that hold within one process only, most are.
 */
describe('locks across service processes', () => {
  const prefix = `scale${randomBytes(3).toString('hex')}`;
  let t: TestStore;
  let userId: string;
  before(async () => {
    t = await openTestStore('postgres');
    userId = randomUUID();
    await t.store.users.put({ id: userId, name: `locks-${prefix}`, password_hash: 'scrypt$x$y', admin: false, created_at: new Date().toISOString(), ssh_keys: [] });
    await t.store.registry.putRepo({ repo: 'scale/locks', project: 'scale', image: 'locks', public: false, reason: 'test', blobs: [], updated_at: new Date().toISOString() });
  });
  after(async () => {
    await t?.cleanup();
    await removeInstance(prefix);
  });

  const race = (mode: string) => {
    const startAt = Date.now() + 3000; // every writer has its store open by then
    return Promise.all(Array.from({ length: PROCESSES }, (_, w) =>
      writer([mode, t.url, t.table, loadConfig().redisUrl, prefix, userId, `w${w}`, String(WRITES), String(startAt)])));
  };

  it('keeps every change of one user record made from three processes at once (the store\'s lock)', async () => {
    await race('accounts');
    const keys = (await t.store.users.get(userId))!.ssh_keys.map((k) => k.id);
    assert.equal(keys.length, PROCESSES * WRITES, `changes kept: ${keys.length} of ${PROCESSES * WRITES}`);
  });

  it('keeps every change of one registry repository made from three processes at once (the catalogue\'s lock)', async () => {
    await race('catalog');
    const blobs = (await t.store.registry.getRepo('scale/locks'))!.blobs;
    assert.equal(blobs.length, PROCESSES * WRITES, `changes kept: ${blobs.length} of ${PROCESSES * WRITES}`);
  });
});
