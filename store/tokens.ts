import { errors } from '../core/errors.ts';
import type { Backend, Collection } from './kv.ts';
import type { KeyedLock } from '../core/keyed-lock.ts';
import type { TokenRecord } from './records.ts';

export interface TokenStore {
  get(id: string): Promise<TokenRecord | undefined>;
  /** The token whose value hashes to `hash` (sha256 hex), revoked or not. */
  getByHash(hash: string): Promise<TokenRecord | undefined>;
  /** Creates or replaces the token record. */
  put(t: TokenRecord): Promise<void>;
  /** The user's tokens, revoked ones included, oldest first. */
  listByUser(userId: string): Promise<TokenRecord[]>;
  /**
   * Notes when a token was last used. Kept apart from the record, so a write here can never undo
   * a revocation written at the same moment by another process.
   */
  touch(id: string, at: string): Promise<void>;
  /** When each token was last used (absent: never, or before this was kept). */
  lastUsed(ids: string[]): Promise<Map<string, string>>;
}

/**
 * Keys: `tokens:<id>` → record; `tokens-idx:hash:<hash>` → id; `tokens-idx:user:<userId>:<id>` → 1;
 * `tokens-idx:used:<id>` → when it was last used.
 * One index key per token: writers in different processes never rewrite a shared list, so none
 * can drop another's entry. Index keys are written before the record and checked against it on
 * read, so an index key left without its record is harmless.
 */
export async function tokenStore(backend: Backend, locks: KeyedLock): Promise<TokenStore> {
  const records: Collection<TokenRecord> = await backend.collection<TokenRecord>('tokens');
  const index: Collection<string | number> = await backend.collection<string | number>('tokens-idx');
  const lock = (...keys: string[]) => keys.map((k) => `tokens|${k}`);

  async function get(id: string): Promise<TokenRecord | undefined> {
    return records.get([id]);
  }

  async function getByHash(hash: string): Promise<TokenRecord | undefined> {
    const id = await index.get(['hash', hash]);
    if (typeof id !== 'string') return undefined;
    const token = await get(id);
    return token && token.hash === hash ? token : undefined;
  }

  async function put(t: TokenRecord): Promise<void> {
    if (!t.id || !t.user_id || !t.hash) throw new errors.BadRequest('a token needs an id, a user_id and a hash');
    await locks.run(lock(`id:${t.id}`, `hash:${t.hash}`), async () => {
      const previous = await get(t.id);
      if (!(await index.insertIfAbsent(['hash', t.hash], t.id))) {
        const holder = await index.get(['hash', t.hash]);
        if (holder !== t.id) {
          const other = typeof holder === 'string' ? await get(holder) : undefined;
          if (other && other.hash === t.hash) throw new errors.Conflict('another token has the same hash');
          await index.set(['hash', t.hash], t.id);
        }
      }
      await index.set(['user', t.user_id, t.id], 1);
      await records.set([t.id], t);
      if (previous && previous.hash !== t.hash && (await index.get(['hash', previous.hash])) === t.id) {
        await index.delete(['hash', previous.hash]);
      }
      if (previous && previous.user_id !== t.user_id) await index.delete(['user', previous.user_id, t.id]);
    });
  }

  async function listByUser(userId: string): Promise<TokenRecord[]> {
    const ids = (await index.scan(['user', userId])).map((r) => r.rest[0]!).filter(Boolean);
    const tokens = await records.getMany(ids.map((id) => [id]));
    return tokens
      .filter((t): t is TokenRecord => t !== undefined && t.user_id === userId)
      .sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.id.localeCompare(b.id)));
  }

  async function touch(id: string, at: string): Promise<void> {
    await index.set(['used', id], at);
  }

  async function lastUsed(ids: string[]): Promise<Map<string, string>> {
    const times = await index.getMany(ids.map((id) => ['used', id]));
    return new Map(ids.flatMap((id, i) => (typeof times[i] === 'string' ? [[id, times[i] as string]] : [])));
  }

  return { get, getByHash, put, listByUser, touch, lastUsed };
}
