import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { openTestStore, type BackendName, type TestStore } from './helpers.ts';

/** The routed sandboxes' address table (store/addresses.ts, issue 34 §3) on both backends. */
for (const backend of ['sqlite', 'postgres'] as BackendName[]) {
  describe(`address store (${backend})`, () => {
    let t: TestStore;
    before(async () => { t = await openTestStore(backend); });
    after(async () => { await t?.cleanup(); });

    it('hands out the lowest free address, the same one again to the same sandbox, and takes one back on release', async () => {
      const pool = '100.73.0.0/29';
      assert.equal(await t.store.addresses.hold(pool, 'svc-a'), '100.73.0.2');
      assert.equal(await t.store.addresses.hold(pool, 'svc-b'), '100.73.0.3');
      assert.equal(await t.store.addresses.hold(pool, 'svc-a'), '100.73.0.2', 'a sandbox keeps its address');
      assert.equal(await t.store.addresses.of('svc-b'), '100.73.0.3');
      await t.store.addresses.release('svc-a');
      await t.store.addresses.release('svc-a');
      assert.equal(await t.store.addresses.of('svc-a'), undefined);
      assert.equal(await t.store.addresses.hold(pool, 'svc-c'), '100.73.0.2', 'a released address is handed out again');
      for (const s of ['svc-d', 'svc-e', 'svc-f']) await t.store.addresses.hold(pool, s);
      // a /29 hands out .2 to .6: five sandboxes
      await assert.rejects(t.store.addresses.hold(pool, 'svc-g'), /no free address left in 100\.73\.0\.0\/29/);
      assert.equal(await t.store.addresses.of('svc-g'), undefined, 'nothing held after a refusal');
      await assert.rejects(t.store.addresses.hold('100.73.0.0', 'svc-h'), /not an address pool/);
      for (const s of ['svc-b', 'svc-c', 'svc-d', 'svc-e', 'svc-f']) await t.store.addresses.release(s);
      assert.equal((await t.store.addresses.held()).size, 0);
    });

    it('never gives one address to two sandboxes, whichever process asks (holds at once from two store connections)', async () => {
      const other = await t.reopen();
      try {
        const pool = '100.74.0.0/24';
        const names = Array.from({ length: 16 }, (_, i) => `svc-p${i}`);
        const got = await Promise.all(names.map((name, i) => (i % 2 ? other : t.store).addresses.hold(pool, name)));
        assert.equal(new Set(got).size, names.length, `distinct addresses: ${got.join(' ')}`);
        const held = await t.store.addresses.held();
        assert.deepEqual(got.map((a) => held.get(a)), names, 'each address recorded for its sandbox');
        // the same sandbox asked twice at once: one address, the other hold gives its own back
        const twice = await Promise.all([t.store.addresses.hold(pool, 'svc-twice'), other.addresses.hold(pool, 'svc-twice')]);
        assert.equal(twice[0], twice[1]);
        assert.equal([...(await t.store.addresses.held()).values()].filter((s) => s === 'svc-twice').length, 1);
      } finally {
        await other.close();
      }
    });
  });
}
