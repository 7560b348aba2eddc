import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TEST_SECRET_KEY_FILE } from '../../harness/secret-key.ts';
import { destroyStore, openStore, type Store } from '../../store/index.ts';

export type BackendName = 'sqlite' | 'postgres';

/**
 * Postgres for tests: role svc_test (no superuser) on its database svc_test, the one pair scripts/setup.sh
 * trusts on loopback; override with SVC_TEST_POSTGRES_URL.
 */
export const POSTGRES_URL = process.env.SVC_TEST_POSTGRES_URL || 'postgres://svc_test@127.0.0.1:5432/svc_test';

export { TEST_SECRET_KEY_FILE };

export interface TestStore {
  store: Store;
  url: string;
  table: string;
  /** Opens another Store on the same database and table (another "process" view). */
  reopen(): Promise<Store>;
  /** Drops the table / removes the temp folder. */
  cleanup(): Promise<void>;
}

export function uniqueTable(): string {
  return `svc_test_${process.pid}_${randomBytes(4).toString('hex')}`;
}

export function tempDir(prefix = 'svc-test-'): { dir: string; remove(): void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export async function openTestStore(backend: BackendName): Promise<TestStore> {
  const table = uniqueTable();
  if (backend === 'sqlite') {
    const tmp = tempDir();
    const url = `sqlite://${path.join(tmp.dir, 'nested', 'store.sqlite')}`;
    const store = await openStore(url, { table, secretKeyFile: TEST_SECRET_KEY_FILE });
    return {
      store, url, table,
      reopen: () => openStore(url, { table, secretKeyFile: TEST_SECRET_KEY_FILE }),
      cleanup: async () => { await store.close(); tmp.remove(); },
    };
  }
  let store: Store;
  try {
    store = await openStore(POSTGRES_URL, { table, secretKeyFile: TEST_SECRET_KEY_FILE });
  } catch (error) {
    throw new Error(
      `PostgreSQL is needed for the postgres store tests and is not reachable: ${(error as Error).message}. ` +
      'Start it (npm run setup, or: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start) ' +
      'or point SVC_TEST_POSTGRES_URL at a database.',
    );
  }
  return {
    store, url: POSTGRES_URL, table,
    reopen: () => openStore(POSTGRES_URL, { table, secretKeyFile: TEST_SECRET_KEY_FILE }),
    cleanup: () => destroyStore(store),
  };
}
