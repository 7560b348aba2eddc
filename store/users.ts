import { errors } from '../core/errors.ts';
import type { Backend, Collection } from './kv.ts';
import type { KeyedLock } from '../core/keyed-lock.ts';
import type { UserRecord } from './records.ts';

export interface UserStore {
  get(id: string): Promise<UserRecord | undefined>;
  getByName(name: string): Promise<UserRecord | undefined>;
  /** Creates or replaces the user; throws errors.NameTaken if another user has the name. */
  put(u: UserRecord): Promise<void>;
  /** Every user, oldest first. */
  list(): Promise<UserRecord[]>;
  /** The user linked to an OpenID Connect subject (`<issuer>#<sub>`). */
  getBySubject(subject: string): Promise<UserRecord | undefined>;
  /**
   * Insert-or-get by OpenID Connect subject: creates `u` (its `oidc_subject` set) unless a user
   * holds that subject already, atomically across processes, so two first sign-ins of one person
   * make one user. Returns the user holding the subject and whether this call made it. Throws
   * errors.NameTaken, with nothing made, if another user has u's name.
   */
  insertForSubject(u: UserRecord): Promise<{ user: UserRecord; created: boolean }>;
}

/**
 * Keys: `users:<id>` → record; `users-idx:name:<name>` → id (the unique name claim, taken with an
 * atomic insert, so two processes cannot both create "alice"); `users-idx:oidc:<subject>` → id (the
 * unique OpenID Connect subject claim, taken the same way).
 */
export async function userStore(backend: Backend, locks: KeyedLock): Promise<UserStore> {
  const records: Collection<UserRecord> = await backend.collection<UserRecord>('users');
  const index: Collection<string> = await backend.collection<string>('users-idx');
  const lock = (...keys: string[]) => keys.map((k) => `users|${k}`);

  async function get(id: string): Promise<UserRecord | undefined> {
    return records.get([id]);
  }

  async function getByName(name: string): Promise<UserRecord | undefined> {
    const id = await index.get(['name', name]);
    if (id === undefined) return undefined;
    const user = await get(id);
    // The index is written before the record and never trusted alone.
    return user && user.name === name ? user : undefined;
  }

  async function claimName(name: string, id: string): Promise<void> {
    if (await index.insertIfAbsent(['name', name], id)) return;
    const holder = await index.get(['name', name]);
    if (holder === id) return;
    const other = holder === undefined ? undefined : await get(holder);
    if (other && other.name === name) throw new errors.NameTaken(name);
    // A claim left behind by a writer that died before writing its record, or by a rename.
    await index.set(['name', name], id);
  }

  async function put(u: UserRecord): Promise<void> {
    if (!u.id || !u.name) throw new errors.BadRequest('a user needs an id and a name');
    await locks.run(lock(`id:${u.id}`, `name:${u.name}`), async () => {
      const previous = await get(u.id);
      await claimName(u.name, u.id);
      await records.set([u.id], u);
      if (previous && previous.name !== u.name) {
        await locks.run(lock(`name:${previous.name}`), async () => {
          if ((await index.get(['name', previous.name])) === u.id) await index.delete(['name', previous.name]);
        });
      }
    });
  }

  async function list(): Promise<UserRecord[]> {
    const rows = await records.scan();
    return rows.map((r) => r.value).sort(byCreated);
  }

  async function getBySubject(subject: string): Promise<UserRecord | undefined> {
    const id = await index.get(['oidc', subject]);
    const user = id === undefined ? undefined : await get(id);
    if (user?.oidc_subject === subject) return user;
    // a user linked before the subject index existed: found once by a scan of every user, then
    // claimed, so their next sign-in is a lookup (a claim already there, left by a writer that
    // died, stays: insertForSubject's caller owns that case under its lock)
    const linked = (await list()).find((u) => u.oidc_subject === subject);
    if (linked && id === undefined) await index.insertIfAbsent(['oidc', subject], linked.id);
    return linked;
  }

  async function insertForSubject(u: UserRecord): Promise<{ user: UserRecord; created: boolean }> {
    const subject = u.oidc_subject;
    if (!subject) throw new errors.BadRequest('a user made for a single sign-on subject needs oidc_subject');
    // The lock covers the moment between a claim and its record, so a second caller never sees a
    // claim whose user is still being written; the claim itself is the unique row.
    return locks.run(lock(`oidc:${subject}`), async () => {
      const holder = await getBySubject(subject);
      if (holder) return { user: holder, created: false };
      // No live writer holds the lock: a claim without its user was left by one that died.
      if (!(await index.insertIfAbsent(['oidc', subject], u.id))) await index.set(['oidc', subject], u.id);
      try {
        await put(u);
      } catch (error) {
        await index.delete(['oidc', subject]);
        throw error;
      }
      return { user: u, created: true };
    });
  }

  return { get, getByName, put, list, getBySubject, insertForSubject };
}

function byCreated(a: { created_at: string; name: string }, b: { created_at: string; name: string }): number {
  return a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : a.name.localeCompare(b.name);
}
