import { errors } from '../core/errors.ts';
import type { Backend, Collection } from './kv.ts';
import { withLocks } from './lock.ts';
import type { SandboxRecord } from './records.ts';

export interface SandboxStore {
  get(name: string): Promise<SandboxRecord | undefined>;
  /** Creates or replaces the record. */
  put(s: SandboxRecord): Promise<void>;
  /** Creates the record; atomically fails with errors.NameTaken if the name exists (archived ones too). */
  insert(s: SandboxRecord): Promise<void>;
  /** The owner's sandboxes, archived ones included, by name. */
  listByOwner(ownerId: string): Promise<SandboxRecord[]>;
  /** Every sandbox, archived ones included, by name. */
  listAll(): Promise<SandboxRecord[]>;
}

/**
 * Keys: `sandboxes:<name>` → record (the name is the primary key, so `insert` is one atomic
 * `INSERT … ON CONFLICT DO NOTHING`, race-free across processes too); `sandboxes-idx:owner:<ownerId>:<name>` → 1.
 */
export async function sandboxStore(backend: Backend): Promise<SandboxStore> {
  const records: Collection<SandboxRecord> = await backend.collection<SandboxRecord>('sandboxes');
  const index: Collection<number> = await backend.collection<number>('sandboxes-idx');
  const lock = (name: string) => [`${backend.identity}|sandboxes|${name}`];

  function check(s: SandboxRecord): void {
    if (!s.name || !s.owner_id) throw new errors.BadRequest('a sandbox needs a name and an owner_id');
  }

  async function get(name: string): Promise<SandboxRecord | undefined> {
    return records.get([name]);
  }

  async function put(s: SandboxRecord): Promise<void> {
    check(s);
    await withLocks(lock(s.name), async () => {
      const previous = await get(s.name);
      await index.set(['owner', s.owner_id, s.name], 1);
      await records.set([s.name], s);
      if (previous && previous.owner_id !== s.owner_id) await index.delete(['owner', previous.owner_id, s.name]);
    });
  }

  async function insert(s: SandboxRecord): Promise<void> {
    check(s);
    await withLocks(lock(s.name), async () => {
      await index.set(['owner', s.owner_id, s.name], 1);
      if (await records.insertIfAbsent([s.name], s)) return;
      const existing = await get(s.name);
      if (existing && existing.owner_id !== s.owner_id) await index.delete(['owner', s.owner_id, s.name]);
      throw new errors.NameTaken(s.name);
    });
  }

  async function listByOwner(ownerId: string): Promise<SandboxRecord[]> {
    const names = (await index.scan(['owner', ownerId])).map((r) => r.rest[0]!).filter(Boolean);
    const found = await records.getMany(names.map((n) => [n]));
    return found
      .filter((s): s is SandboxRecord => s !== undefined && s.owner_id === ownerId)
      .sort(byName);
  }

  async function listAll(): Promise<SandboxRecord[]> {
    return (await records.scan()).map((r) => r.value).sort(byName);
  }

  return { get, put, insert, listByOwner, listAll };
}

function byName(a: SandboxRecord, b: SandboxRecord): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
