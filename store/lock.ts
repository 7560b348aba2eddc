import { randomBytes } from 'node:crypto';
import { KeyedLock, type CrossProcessLock } from '../core/keyed-lock.ts';
import { keyOf, type Backend } from './kv.ts';

/** A store write takes milliseconds; a lease row this old belongs to a writer that died. */
const LEASE_TTL_MS = 30_000;
const RETRY_FIRST_MS = 5;
const RETRY_MOST_MS = 100;
const ACQUIRE_TIMEOUT_MS = 60_000;

/**
 * Write serialisation for the store, across every process on one database (the service processes,
 * the CLI): a lease row per key in the store's own table (`locks:<key>` → `<holder> <until>`),
 * taken with an atomic insert and given back with a delete that names its holder. Rows, not a
 * PostgreSQL advisory lock, because SQLite (the CLI beside a service) needs the same, and an
 * advisory lock would pin one pooled connection per held key. A writer that dies leaves its row
 * to expire.
 */
class LeaseRows implements CrossProcessLock {
  constructor(private readonly backend: Backend) {}

  async hold<T>(keys: readonly string[], work: () => Promise<T>): Promise<T> {
    const taken: Array<{ key: string; value: string }> = [];
    try {
      for (const key of keys) taken.push(await this.take(`locks:${keyOf([key])}`));
      return await work();
    } finally {
      for (const { key, value } of taken.reverse()) {
        await this.backend.rawQuery(`DELETE FROM ${this.backend.tableRef} WHERE key = ? AND value = ?`, [key, value]).catch(() => undefined);
      }
    }
  }

  private async take(key: string): Promise<{ key: string; value: string }> {
    const table = this.backend.tableRef;
    const deadline = Date.now() + ACQUIRE_TIMEOUT_MS;
    const holder = randomBytes(9).toString('base64url');
    for (let wait = RETRY_FIRST_MS; ; wait = Math.min(wait * 2, RETRY_MOST_MS)) {
      const value = `${holder} ${Date.now() + LEASE_TTL_MS}`;
      const inserted = await this.backend.rawQuery(`INSERT INTO ${table} (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING RETURNING key`, [key, value]);
      if (inserted.length === 1) return { key, value };
      const [row] = (await this.backend.rawQuery(`SELECT value FROM ${table} WHERE key = ?`, [key])) as Array<{ value: string }>;
      if (row && Number(row.value.split(' ')[1]) < Date.now()) {
        // the holder died: take its row over, unless another waiter just did
        const replaced = await this.backend.rawQuery(`UPDATE ${table} SET value = ? WHERE key = ? AND value = ? RETURNING key`, [value, key, row.value]);
        if (replaced.length === 1) return { key, value };
      }
      if (!row) continue; // released meanwhile: insert again at once
      if (Date.now() > deadline) throw new Error(`the store record "${key}" stays locked by another process; try again`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

/** One lock per store: keys are serialised in this process first, then across processes by lease rows. */
export function storeLock(backend: Backend): KeyedLock {
  return new KeyedLock(new LeaseRows(backend));
}
