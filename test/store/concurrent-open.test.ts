import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { destroyStore, openStore } from '../../store/index.ts';
import { POSTGRES_URL, TEST_SECRET_KEY_FILE } from './helpers.ts';

test('service processes starting at once on a new PostgreSQL store all open it (its tables made once)', async () => {
  for (let round = 0; round < 3; round++) {
    const table = `svc_test_race_${randomBytes(4).toString('hex')}`;
    const opened = await Promise.allSettled(Array.from({ length: 6 }, () => openStore(POSTGRES_URL, { table, secretKeyFile: TEST_SECRET_KEY_FILE })));
    const stores = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    const failed = opened.flatMap((o) => (o.status === 'rejected' ? [(o.reason as Error).message] : []));
    if (stores[0]) await destroyStore(stores[0]);
    for (const s of stores.slice(1)) await s.close();
    assert.deepEqual(failed, [], `round ${round}`);
  }
});
