import type { SecretBox } from '../core/secret-box.ts';
import type { Backend, Collection } from './kv.ts';

/** Which of the owner's sandboxes get a secret: all of them, or these (by name). */
export type SecretScope = 'all' | string[];

/** A user's secret as the API shows it: never its value. */
export interface SecretMeta {
  name: string;
  scope: SecretScope;
  created_at: string;
  updated_at: string;
}

interface SecretRecord extends SecretMeta {
  /** The value sealed with the store's key, bound to its owner and name. */
  sealed: string;
  /** The value's keyed hash (`SecretBox.keyedHash`), which the registry's scan looks for. */
  hash: string;
  /** The value's length in bytes (the scan hashes candidates of these lengths only). */
  bytes: number;
  /** The keyed fingerprint of the value's first 8 bytes (`SecretBox.keyedFingerprint8`); absent for a shorter value. */
  head?: number;
}

/** A secret's keyed hash and length: what the scan of the owner's images needs, never the value. */
export interface SecretHash {
  name: string;
  hash: string;
  bytes: number;
  head?: number;
}

export interface SecretStore {
  list(ownerId: string): Promise<SecretMeta[]>;
  /** Keeps (or replaces) a secret; `created` says whether it is new. */
  put(ownerId: string, name: string, value: string, scope: SecretScope): Promise<{ meta: SecretMeta; created: boolean }>;
  /** Removes a secret; undefined when there was none. */
  remove(ownerId: string, name: string): Promise<SecretMeta | undefined>;
  /** The opened values of the secrets `sandbox` gets, by name. */
  valuesFor(ownerId: string, sandbox: string): Promise<Array<{ name: string; value: string }>>;
  /**
   * What says whether `sandbox`'s secrets changed: a digest of the sealed values it gets (a value is
   * sealed anew at each change), so no value is opened to compare; '' when it gets none.
   */
  versionFor(ownerId: string, sandbox: string): Promise<string>;
  hashes(ownerId: string): Promise<SecretHash[]>;
  /** The keyed hash of a candidate value, as `hashes` keeps them. */
  hash(value: Buffer | string): string;
  /** The keyed fingerprint of the 8 bytes at `at`, as `hashes` keeps them (`head`). */
  head(bytes: Uint8Array, at: number): number;
}

const applies = (scope: SecretScope, sandbox: string) => scope === 'all' || scope.includes(sandbox);

/**
 * Keys: `user-secrets:<ownerId>:<name>` → the record: the value sealed with the store's secret key
 * (context `user-secrets:<ownerId>:<name>`, so a sealed value moved to another user or name does not
 * open) and its keyed hash under a key derived from the same service key.
 */
export async function secretStore(backend: Backend, box: SecretBox): Promise<SecretStore> {
  const secrets: Collection<SecretRecord> = await backend.collection<SecretRecord>('user-secrets');
  const context = (ownerId: string, name: string) => `user-secrets:${ownerId}:${name}`;
  const hash = box.keyedHash('user-secrets');
  const head = box.keyedFingerprint8('user-secrets');
  const all = async (ownerId: string) => (await secrets.scan([ownerId])).map((r) => r.value).sort((a, b) => (a.name < b.name ? -1 : 1));
  const meta = ({ name, scope, created_at, updated_at }: SecretRecord): SecretMeta => ({ name, scope, created_at, updated_at });

  return {
    async list(ownerId) {
      return (await all(ownerId)).map(meta);
    },
    async put(ownerId, name, value, scope) {
      const before = await secrets.get([ownerId, name]);
      const now = new Date().toISOString();
      const record: SecretRecord = {
        name, scope, created_at: before?.created_at ?? now, updated_at: now,
        sealed: box.seal(value, context(ownerId, name)), hash: hash(value), bytes: Buffer.byteLength(value),
      };
      const bytes = Buffer.from(value);
      if (bytes.length >= 8) record.head = head(bytes, 0);
      await secrets.set([ownerId, name], record);
      return { meta: meta(record), created: !before };
    },
    async remove(ownerId, name) {
      const before = await secrets.get([ownerId, name]);
      if (!before) return undefined;
      await secrets.delete([ownerId, name]);
      return meta(before);
    },
    async valuesFor(ownerId, sandbox) {
      return (await all(ownerId)).filter((s) => applies(s.scope, sandbox)).map((s) => ({ name: s.name, value: box.open(s.sealed, context(ownerId, s.name)) }));
    },
    async versionFor(ownerId, sandbox) {
      const given = (await all(ownerId)).filter((s) => applies(s.scope, sandbox));
      return given.length ? hash(given.map((s) => `${s.name}\0${s.sealed}`).join('\n')) : '';
    },
    async hashes(ownerId) {
      return (await all(ownerId)).map(({ name, hash: h, bytes, head: first }) => ({ name, hash: h, bytes, ...(first !== undefined ? { head: first } : {}) }));
    },
    hash,
    head,
  };
}
