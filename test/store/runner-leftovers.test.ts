import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { writeRunnerRows } from '../helpers/runner-rows.ts';
import { openTestStore, type BackendName, type TestStore } from './helpers.ts';

/**
 * What runner hosts left in a store (store/runner-leftovers.ts): a store written by a release with
 * runner hosts still opens, on SQLite and PostgreSQL alike, its rows are read as they were written, and
 * they are removed only once no sandbox is left on a runner host.
 */
for (const backend of ['sqlite', 'postgres'] as BackendName[]) {
  describe(`runner leftovers (${backend})`, () => {
    const opened: TestStore[] = [];
    after(async () => { for (const t of opened) await t.cleanup(); });
    const fresh = async () => {
      const t = await openTestStore(backend);
      opened.push(t);
      return t;
    };

    it('a store without them reads none', async () => {
      const t = await fresh();
      assert.deepEqual(await t.store.runnerLeftovers.read(), { hosts: [], stranded: new Map(), rows: 0 });
    });

    it('names the sandboxes on runner hosts, and keeps every row while there are any', async () => {
      const t = await fresh();
      await writeRunnerRows(t.url, t.table, {
        hosts: ['runner-b', 'local', 'runner-a'],
        placements: { 'svc-on-a': 'runner-a', 'svc-here': 'local', 'svc-on-b': 'runner-b' },
        moves: { 'svc-here': ['local', 'runner-a'] },
      });
      const store = await t.reopen(); // a store of that release opens as it is
      try {
        const left = await store.runnerLeftovers.read();
        assert.deepEqual(left.hosts, ['runner-a', 'runner-b'], 'this machine\'s own record is not a runner host');
        assert.deepEqual([...left.stranded].sort(), [['svc-on-a', 'runner-a'], ['svc-on-b', 'runner-b']]);
        assert.equal(left.rows, 7);
        await assert.rejects(store.runnerLeftovers.clear(), /2 sandbox\(es\) are on runner hosts/);
        assert.equal((await t.store.runnerLeftovers.read()).rows, 7, 'nothing removed');
      } finally {
        await store.close();
      }
    });

    it('removes them all once every sandbox is on this machine (evacuated with the previous release)', async () => {
      const t = await fresh();
      await writeRunnerRows(t.url, t.table, { hosts: ['runner-a', 'local'], placements: { 'svc-back': 'local' }, moves: { 'svc-back': ['local', 'runner-a'] } });
      const left = await t.store.runnerLeftovers.read();
      assert.deepEqual([left.hosts, left.stranded.size, left.rows], [['runner-a'], 0, 4]);
      await t.store.runnerLeftovers.clear();
      assert.deepEqual(await t.store.runnerLeftovers.read(), { hosts: [], stranded: new Map(), rows: 0 });
    });
  });
}
