import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { openTestStore, type BackendName, type TestStore } from './helpers.ts';

const WRITER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'writer.ts');
const SUBJECT = 'https://idp.example#contested-person';
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function runWriter(args: string[]): Promise<{ won: boolean; users: string[]; subjectUsers: Array<{ id: string; created: boolean }> }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', WRITER, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`writer exited ${code}: ${stderr}`));
      resolve(JSON.parse(stdout.trim().split('\n').pop()!));
    });
  });
}

for (const backend of ['sqlite', 'postgres'] as BackendName[]) {
  describe(`several processes writing one ${backend} store`, () => {
    let t: TestStore;
    before(async () => { t = await openTestStore(backend); });
    after(async () => { await t?.cleanup(); });

    test('no index entry is lost, exactly one process wins a sandbox name and one makes the user of a single sign-on subject', async () => {
      const writers = 4;
      const count = 15;
      const startAt = Date.now() + 2500; // every writer has its store open by then
      const children = Array.from({ length: writers }, (_, w) => runWriter([t.url, t.table, `w${w}`, String(count), 'svc-contested', String(startAt), SUBJECT]));
      // this process writes at the same time, as the service would
      const local = (async () => {
        await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now())));
        const mine: string[] = [];
        await Promise.all(Array.from({ length: count }, async (_, i) => {
          const id = randomUUID();
          await t.store.users.put({ id, name: `local-${i}`, password_hash: 'scrypt$x$y', admin: false, created_at: new Date().toISOString(), ssh_keys: [] });
          await t.store.tokens.put({ id: randomUUID(), user_id: id, hash: randomBytes(32).toString('hex'), created_at: new Date().toISOString() });
          mine.push(`local-${i}`);
        }));
        return mine;
      })();
      const results = await Promise.all(children);
      const localUsers = await local;

      assert.equal(results.filter((r) => r.won).length, 1, 'exactly one writer process inserted svc-contested');
      const expected = [...results.flatMap((r) => r.users), ...localUsers].sort();
      assert.equal(expected.length, (writers + 1) * count);
      const listed = (await t.store.users.list()).filter((u) => u.oidc_subject !== SUBJECT).map((u) => u.name).sort();
      assert.deepEqual(listed, expected);
      for (const name of expected) {
        const u = await t.store.users.getByName(name);
        assert.ok(u, `getByName(${name})`);
        const tokens = await t.store.tokens.listByUser(u.id);
        assert.equal(tokens.length, name.startsWith('local-') ? 1 : 2, `tokens of ${name}`);
        for (const tok of tokens) assert.equal((await t.store.tokens.getByHash(tok.hash))?.id, tok.id);
      }
      const contested = await t.store.sandboxes.get('svc-contested');
      assert.ok(contested);
      assert.deepEqual((await t.store.sandboxes.listByOwner(contested.owner_id)).map((s) => s.name), ['svc-contested']);
      assert.equal((await t.store.sandboxes.listAll()).length, 1);

      const linked = results.flatMap((r) => r.subjectUsers);
      assert.equal(linked.filter((u) => u.created).length, 1, 'one first sign-in of all processes made the user');
      const holder = await t.store.users.getBySubject(SUBJECT);
      assert.ok(holder && linked.every((u) => u.id === holder.id), 'every sign-in found that user');
      assert.equal((await t.store.users.list()).filter((u) => u.oidc_subject === SUBJECT).length, 1);
    });
  });
}
