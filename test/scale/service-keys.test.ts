import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { loadOrCreateServiceCa } from '../../edge/certs/service-ca.ts';
import { openTestStore, tempDir, type TestStore } from '../store/helpers.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const READER = path.join(import.meta.dirname, 'keys-reader.ts');

interface Seen { caPem: string; token: string; accepts: boolean | null }

async function reader(t: TestStore, dataDir: string, token?: string): Promise<Seen> {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', READER, t.url, t.table, dataDir, ...(token ? [token] : [])], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'warn' } });
  return JSON.parse(stdout.trim().split('\n').pop()!) as Seen;
}

/**
 * The service CA and the registry token key live sealed in the store (issue 19): processes with
 * their own data folders on one PostgreSQL store present one CA and accept each other's registry
 * tokens; a CA a data folder already had is taken into the store once, and its key leaves the folder.
 */
describe('service keys shared by every process on one store', () => {
  let t: TestStore;
  const folders = Array.from({ length: 3 }, () => tempDir('svc-scale-keys-'));
  before(async () => { t = await openTestStore('postgres'); });
  after(async () => {
    await t?.cleanup();
    for (const f of folders) f.remove();
  });

  it('takes a data folder\'s CA into the store once; processes on other folders present it and accept each other\'s registry tokens', async () => {
    const [first, second, third] = folders.map((f) => f.dir) as [string, string, string];
    const before = await loadOrCreateServiceCa(first, 'localhost'); // a service from before: its CA in its folder
    // the upgraded service starts first; then two new processes at once
    const seen = [await reader(t, first), ...(await Promise.all([reader(t, second), reader(t, third)]))];
    for (const s of seen) assert.equal(s.caPem, before.certPem, 'every process presents the CA its clients already trust');
    assert.equal(fs.existsSync(path.join(first, 'ca', 'ca-key.pem')), false, 'the CA key left the data folder');
    for (const dir of [first, second, third]) assert.equal(fs.readFileSync(path.join(dir, 'ca', 'ca.pem'), 'utf8'), before.certPem);
    const again = await reader(t, third, seen[0]!.token);
    assert.equal(again.accepts, true, 'a token issued by the first process is accepted by the third');
    assert.equal((await reader(t, first, again.token)).accepts, true, 'and the other way round');
    assert.equal((await reader(t, second, `${again.token.slice(0, -2)}xx`)).accepts, false, 'a forged token is refused');
  });
});
