import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { openTestStore, type BackendName, type TestStore } from './helpers.ts';

/** Runner hosts and placements (store/hosts.ts) on both backends. */
for (const backend of ['sqlite', 'postgres'] as BackendName[]) {
  describe(`host store (${backend})`, () => {
    let t: TestStore;
    before(async () => { t = await openTestStore(backend); });
    after(async () => { await t?.cleanup(); });

    it('keeps a host with its client key (opened again as the service reads it), and lists hosts by name', async () => {
      const created_at = new Date().toISOString();
      await t.store.hosts.put({ name: 'b-host', address: '10.0.0.2', port: 2376, client_key: '-----BEGIN PRIVATE KEY-----secret', created_at });
      await t.store.hosts.put({ name: 'a-host', address: '10.0.0.3', created_at });
      assert.equal((await t.store.hosts.get('b-host'))?.client_key, '-----BEGIN PRIVATE KEY-----secret');
      assert.deepEqual((await t.store.hosts.list()).map((h) => h.name), ['a-host', 'b-host']);
      const other = await t.reopen();
      try {
        assert.equal((await other.hosts.get('b-host'))?.address, '10.0.0.2', 'another process reads it');
      } finally {
        await other.close();
      }
      await assert.rejects(t.store.hosts.put({ name: 'Bad Name', created_at }), /lowercase/);
    });

    it('places a sandbox once (the first placement wins, in every process), and refuses to remove a host that holds one', async () => {
      const other = await t.reopen();
      try {
        const answers = await Promise.all([t.store.hosts.place('svc-x', 'a-host'), other.hosts.place('svc-x', 'b-host')]);
        assert.equal(answers[0], answers[1], 'both use the same placement');
        assert.equal(await t.store.hosts.placementOf('svc-x'), answers[0]);
        await assert.rejects(t.store.hosts.remove(answers[0]), (err: { statusCode?: number; message: string }) => err.statusCode === 409 && /not drained/.test(err.message));
        await t.store.hosts.put({ ...(await t.store.hosts.get(answers[0]))!, drained_at: new Date().toISOString() });
        await assert.rejects(t.store.hosts.remove(answers[0]), (err: { statusCode?: number; message: string }) => err.statusCode === 409 && err.message.includes('svc-x'));
        await t.store.hosts.unplace('svc-x');
        assert.equal(await other.hosts.placementOf('svc-x'), undefined);
        await t.store.hosts.remove(answers[0]);
        assert.equal(await t.store.hosts.get(answers[0]), undefined);
      } finally {
        await other.close();
      }
    });

    it('keeps a drained host whose placement lands while it is removed (either the removal or the placement sees the other)', async () => {
      const created_at = new Date().toISOString();
      await t.store.hosts.put({ name: 'c-host', address: '10.0.0.4', drained_at: created_at, created_at });
      const other = await t.reopen();
      try {
        const [removed] = await Promise.allSettled([t.store.hosts.remove('c-host'), other.hosts.place('svc-y', 'c-host')]);
        const record = await t.store.hosts.get('c-host');
        if (removed.status === 'fulfilled') assert.equal(record, undefined, 'removed before the placement: the creation finds no host');
        else assert.equal(record?.name, 'c-host', 'the placement was seen: the host stays');
        assert.ok(removed.status === 'fulfilled' || (await t.store.hosts.placementOf('svc-y')) === 'c-host');
      } finally {
        await t.store.hosts.unplace('svc-y');
        await other.close();
      }
    });
  });
}
