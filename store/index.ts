import { SecretBox } from '../core/secret-box.ts';
import { Backend, type BackendOptions } from './kv.ts';
import { sandboxStore, type SandboxStore } from './sandboxes.ts';
import { registryStore, type RegistryStore } from './registry.ts';
import { tokenStore, type TokenStore } from './tokens.ts';
import { userStore, type UserStore } from './users.ts';
import { serviceKeyStore, type ServiceKeyStore } from './service-keys.ts';
import { storeLock } from './lock.ts';
import { auditStore, type AuditStore } from './audit.ts';
import { runnerLeftoverStore, type RunnerLeftoverStore } from './runner-leftovers.ts';
import { secretStore, type SecretStore } from './secrets.ts';
import { addressStore, type AddressStore } from './addresses.ts';

export type { UserRecord, TokenRecord, SandboxRecord, SshKeyRecord, EngineCerts, QuotaValues } from './records.ts';
export type { UserStore, TokenStore, SandboxStore, ServiceKeyStore, SecretStore, AddressStore, RunnerLeftoverStore };
export type { RunnerLeftovers } from './runner-leftovers.ts';
export type { SecretMeta, SecretScope, SecretHash } from './secrets.ts';
export type { ServiceKeyName } from './service-keys.ts';
export type { AuditStore, AuditRow, AuditFilter, AuditPage } from './audit.ts';
export type { RegistryStore, RepoRecord, VersionRecord, LayerScanRecord, Finding, ScanState, ScanProgress } from './registry.ts';
export { splitRepo } from './registry.ts';
export { Backend, redactUrl } from './kv.ts';

export interface Store {
  users: UserStore;
  tokens: TokenStore;
  sandboxes: SandboxStore;
  /** Registry repositories, versions and layer scan results (issue 4). */
  registry: RegistryStore;
  /** The service CA and the registry token key, sealed (issue 19: one of each for every process). */
  serviceKeys: ServiceKeyStore;
  /** The audit log (issue 24): a table of its own. */
  audit: AuditStore;
  /** What runner hosts (issue 20, removed by issue 34) left in the store: read at start, never written. */
  runnerLeftovers: RunnerLeftoverStore;
  /** Users' secrets (issue 35), sealed; their keyed hashes for the registry's scan. */
  secrets: SecretStore;
  /** Sandbox addresses of the Incus runtime's routed NICs, one pool for every cluster member (issue 34). */
  addresses: AddressStore;
  /**
   * Runs `work` while no other writer, in this process or another on the same database, holds any
   * of `keys`: for a read-modify-write of a record (accounts' user changes).
   */
  exclusive<T>(keys: readonly string[], work: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface StoreOptions extends BackendOptions {
  /** Key of the secrets sealed in the store (SVC_SECRET_KEY_FILE), created if missing. */
  secretKeyFile: string;
}

const backends = new WeakMap<Store, Backend>();

/**
 * Opens the store at `url`: `sqlite:///abs/path/file.sqlite` (the folder is created) or
 * `postgres://user@host:port/db`, with the key that seals its secrets. Throws a clear error if the database cannot be opened or reached.
 */
export async function openStore(url: string, options: StoreOptions): Promise<Store> {
  const box = SecretBox.open(options.secretKeyFile);
  const backend = await Backend.open(url, options);
  try {
    const locks = storeLock(backend);
    const store: Store = {
      users: await userStore(backend, locks),
      tokens: await tokenStore(backend, locks),
      sandboxes: await sandboxStore(backend, box, locks),
      registry: await registryStore(backend),
      serviceKeys: await serviceKeyStore(backend, box),
      audit: await auditStore(backend),
      runnerLeftovers: await runnerLeftoverStore(backend),
      secrets: await secretStore(backend, box),
      addresses: await addressStore(backend),
      exclusive: (keys, work) => locks.run(keys, work),
      close: () => backend.close(),
    };
    backends.set(store, backend);
    return store;
  } catch (error) {
    await backend.close().catch(() => undefined);
    throw error;
  }
}

/** Drops the store's table and closes it. For tests, which use a table of their own. */
export async function destroyStore(store: Store): Promise<void> {
  const backend = backends.get(store);
  if (!backend) throw new Error('not a store opened by openStore');
  await store.audit.drop();
  await backend.drop();
}
