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

    it('records a move once, changes it only from the row it was read as (a take-over by one process), and keeps its hosts', async () => {
      const created_at = new Date().toISOString();
      await t.store.hosts.put({ name: 'd-host', address: '10.0.0.5', drained_at: created_at, created_at });
      const move = { sandbox: 'svc-m', from: 'd-host', to: 'local', phase: 'copying' as const, owner: 'p1', heartbeat_at: created_at, started_at: created_at };
      const other = await t.reopen();
      try {
        const begun = await Promise.all([t.store.hosts.beginMove(move), other.hosts.beginMove({ ...move, owner: 'p2' })]);
        assert.deepEqual(begun.sort(), [false, true], 'one move per sandbox');
        assert.equal(await other.hosts.copying('svc-m'), true);
        assert.equal(await other.hosts.copying('svc-n'), false);
        const [{ raw, move: stored }] = await t.store.hosts.moves();
        const takeOvers = await Promise.all([t.store.hosts.updateMove(raw, { ...stored!, owner: 'p3' }), other.hosts.updateMove(raw, { ...stored!, owner: 'p4' })]);
        assert.deepEqual(takeOvers.sort(), [false, true], 'one process takes it over');
        await assert.rejects(t.store.hosts.remove('d-host'), (err: { statusCode?: number; message: string }) => err.statusCode === 409 && /unfinished move/.test(err.message));
        await t.store.hosts.place('svc-m', 'd-host');
        const [current] = await other.hosts.moves();
        assert.equal(await other.hosts.updateMove(current!.raw, { ...current!.move, phase: 'cleaning', leftover: 'd-host' }), true);
        assert.equal(await t.store.hosts.copying('svc-m'), true, 'committed, its placement not switched yet: it starts nowhere');
        await t.store.hosts.replace('svc-m', 'local');
        assert.equal(await t.store.hosts.copying('svc-m'), false, 'a move cleaning up its source lets its sandbox start on its target');
        assert.equal(await other.hosts.placementOf('svc-m'), 'local');
        await t.store.hosts.endMove('svc-m');
        assert.deepEqual(await other.hosts.moves(), []);
        await t.store.hosts.unplace('svc-m');
        await t.store.hosts.remove('d-host');
      } finally {
        await other.close();
      }
    });

    it('answers placements asked for at once (read together) each with its own host, and a change made before a read', async () => {
      const sandboxes = Array.from({ length: 300 }, (_, i) => `svc-batch-${i}`);
      await Promise.all(sandboxes.filter((_, i) => i % 3 !== 0).map((s, i) => t.store.hosts.place(s, i % 2 ? 'a-host' : 'b-host')));
      const expected = new Map((await t.store.hosts.placements()));
      const answers = await Promise.all(sandboxes.map((s) => t.store.hosts.placementOf(s)));
      assert.deepEqual(answers, sandboxes.map((s) => expected.get(s)), 'absent ones undefined, the others their own host');
      const other = await t.reopen();
      try {
        await other.hosts.replace('svc-batch-1', 'local');
        await other.hosts.unplace('svc-batch-2');
        assert.deepEqual(await Promise.all(['svc-batch-1', 'svc-batch-2', 'svc-batch-1'].map((s) => t.store.hosts.placementOf(s))), ['local', undefined, 'local']);
      } finally {
        await other.close();
      }
      await Promise.all(sandboxes.map((s) => t.store.hosts.unplace(s)));
    });
  });
}
