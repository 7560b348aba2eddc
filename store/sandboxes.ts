import { randomBytes } from 'node:crypto';
import { errors } from '../core/errors.ts';
import { SecretBox } from '../core/secret-box.ts';
import type { Backend, Collection, Write } from './kv.ts';
import type { KeyedLock } from '../core/keyed-lock.ts';
import type { SandboxRecord } from './records.ts';

export interface SandboxStore {
  get(name: string): Promise<SandboxRecord | undefined>;
  /** Creates or replaces the record. */
  put(s: SandboxRecord): Promise<void>;
  /** Creates the record; atomically fails with errors.NameTaken if the name exists (archived ones too). */
  insert(s: SandboxRecord): Promise<void>;
  /**
   * The owner's sandboxes, archived ones included, by name. `secrets: false`: without the secret
   * fields, for lists that show none (opening them costs two decryptions per record: 1000 for 500);
   * those records are frozen, kept by this process and shared with later calls while the owner's
   * sandboxes do not change (see `sandboxStore`).
   */
  listByOwner(ownerId: string, opts?: { secrets: false }): Promise<SandboxRecord[]>;
  /** The records of these sandboxes that exist, in no set order; `secrets: false` as for listAll. */
  getMany(names: readonly string[], opts?: { secrets: false }): Promise<SandboxRecord[]>;
  /** Every sandbox, archived ones included, by name; `secrets: false` as for listByOwner. */
  listAll(opts?: { secrets: false }): Promise<SandboxRecord[]>;
  /**
   * At start: seals the secrets of records written before sealing existed (the number sealed is
   * returned) and checks that every sealed one opens with this key, throwing for the first that does not.
   */
  sealPlainRecords(): Promise<number>;
}

/**
 * The secret fields of a record, as `<object>.<field>` or a top-level `<field>`: sealed in the
 * database, plain in the records this store hands out. A new secret in a record is one more entry here.
 */
const SECRET_FIELDS = ['certs.client_key', 'certs.server_key', 'manager_password'] as const;

/** The record with `fn` applied to each secret field it has. */
function mapSecrets(s: SandboxRecord, fn: (value: string, context: string) => string): SandboxRecord {
  let out = s;
  for (const field of SECRET_FIELDS) {
    const [parent, key] = field.includes('.') ? (field.split('.') as [keyof SandboxRecord, string]) : [undefined, field];
    const holder = (parent ? out[parent] : out) as Record<string, unknown> | undefined;
    if (typeof holder?.[key] !== 'string') continue;
    const value = fn(holder[key] as string, `sandboxes:${s.name}:${field}`);
    out = parent ? { ...out, [parent]: { ...holder, [key]: value } } : { ...out, [key]: value };
  }
  return out;
}

/** The record without its secret fields (they stay sealed in the database). */
function withoutSecrets(s: SandboxRecord): SandboxRecord {
  let out = s;
  for (const field of SECRET_FIELDS) {
    const [parent, key] = field.includes('.') ? (field.split('.') as [keyof SandboxRecord, string]) : [undefined, field];
    const holder = (parent ? out[parent] : out) as Record<string, unknown> | undefined;
    if (holder?.[key] === undefined) continue;
    const { [key]: _secret, ...rest } = holder;
    out = (parent ? { ...out, [parent]: rest } : rest) as unknown as SandboxRecord;
  }
  return out;
}

/** Owners whose lists (without secrets) a process keeps, the most recently listed ones. */
const LISTS_KEPT = 64;

/**
 * Keys: `sandboxes:<name>` → record (the name is the primary key, so `insert` is one atomic
 * `INSERT … ON CONFLICT`, race-free across processes too); `sandboxes-idx:owner:<ownerId>:<name>` → 1;
 * `sandboxes-gen:<ownerId>` → a token of the owner's records.
 *
 * Reading an owner's 500 records costs 10–20 ms of CPU (each record is 3 KB of JSON with its
 * certificates), which a loaded machine turns into hundreds of ms for every `GET /api/sandboxes`. So
 * each process keeps the lists it read, with the token read before them, and answers from them while
 * the token is unchanged: every write of a record writes a new token of its owner (of its old owner
 * too, when the owner changes) in the same statement (Backend.write), so no process, whatever crashes
 * when, sees a record change without a new token, and a list read after a token holds every change
 * made before it.
 */
export async function sandboxStore(backend: Backend, box: SecretBox, locks: KeyedLock): Promise<SandboxStore> {
  const records: Collection<SandboxRecord> = await backend.collection<SandboxRecord>('sandboxes');
  const index: Collection<number> = await backend.collection<number>('sandboxes-idx');
  const tokens: Collection<string> = await backend.collection<string>('sandboxes-gen');
  const lists = new Map<string, { token: string; records: readonly SandboxRecord[] }>();
  const lock = (name: string) => [`sandboxes|${name}`];
  const newToken = (ownerId: string): Write<string> => ({ collection: tokens, parts: [ownerId], value: randomBytes(12).toString('base64url') });

  function check(s: SandboxRecord): void {
    if (!s.name || !s.owner_id) throw new errors.BadRequest('a sandbox needs a name and an owner_id');
  }

  const seal = (s: SandboxRecord) => mapSecrets(s, (v, c) => box.seal(v, c));
  const open = (s: SandboxRecord) => mapSecrets(s, (v, c) => box.open(v, c));

  async function get(name: string): Promise<SandboxRecord | undefined> {
    const s = await records.get([name]);
    return s && open(s);
  }

  async function put(s: SandboxRecord): Promise<void> {
    check(s);
    await locks.run(lock(s.name), async () => {
      const previous = await records.get([s.name]); // its owner is all that is needed: left sealed
      const moved = previous !== undefined && previous.owner_id !== s.owner_id;
      await index.set(['owner', s.owner_id, s.name], 1);
      await backend.write([
        { collection: records, parts: [s.name], value: seal(s) },
        newToken(s.owner_id),
        ...(moved ? [newToken(previous.owner_id)] : []),
      ]);
      if (moved) await index.delete(['owner', previous.owner_id, s.name]);
    });
  }

  async function insert(s: SandboxRecord): Promise<void> {
    check(s);
    await locks.run(lock(s.name), async () => {
      await index.set(['owner', s.owner_id, s.name], 1);
      // a new token even when the name is taken: it costs that owner's processes one read of their list
      const [inserted] = await backend.write([{ collection: records, parts: [s.name], value: seal(s), ifAbsent: true }, newToken(s.owner_id)]);
      if (inserted) return;
      const existing = await records.get([s.name]);
      if (existing && existing.owner_id !== s.owner_id) await index.delete(['owner', s.owner_id, s.name]);
      throw new errors.NameTaken(s.name);
    });
  }

  async function listByOwner(ownerId: string, opts?: { secrets: false }): Promise<SandboxRecord[]> {
    if (opts?.secrets !== false) return (await readByOwner(ownerId)).map(open);
    const token = (await tokens.get([ownerId])) ?? ''; // none yet: a first write makes one, a change too
    let kept = lists.get(ownerId);
    lists.delete(ownerId); // taken out and put back last: the map's order is the order of use
    if (kept?.token !== token) kept = { token, records: (await readByOwner(ownerId)).map((s) => frozen(withoutSecrets(s))) };
    lists.set(ownerId, kept);
    for (const [owner] of lists) {
      if (lists.size <= LISTS_KEPT) break;
      lists.delete(owner);
    }
    return [...kept.records];
  }

  /** The owner's records as stored (secrets sealed), by name. */
  async function readByOwner(ownerId: string): Promise<SandboxRecord[]> {
    const names = (await index.scan(['owner', ownerId])).map((r) => r.rest[0]!).filter(Boolean);
    const found = await records.getMany(names.map((n) => [n]));
    return found.filter((s): s is SandboxRecord => s !== undefined && s.owner_id === ownerId).sort(byName);
  }

  async function getMany(names: readonly string[], opts?: { secrets: false }): Promise<SandboxRecord[]> {
    const found = await records.getMany(names.map((n) => [n]));
    return found.filter((s): s is SandboxRecord => s !== undefined).map(opts?.secrets === false ? withoutSecrets : open);
  }

  async function listAll(opts?: { secrets: false }): Promise<SandboxRecord[]> {
    return (await records.scan()).map((r) => (opts?.secrets === false ? withoutSecrets : open)(r.value)).sort(byName);
  }

  /**
   * Seals secrets in place: no new token, as a record without its secrets (all that the kept lists
   * hold) reads the same before and after.
   */
  async function sealPlainRecords(): Promise<number> {
    let sealed = 0;
    for (const { rest, value, raw } of await records.scan()) {
      let plain = false;
      mapSecrets(value, (v, c) => {
        if (!SecretBox.isSealed(v)) plain = true;
        return box.open(v, c); // a sealed value must open with this key; a plain one passes through
      });
      if (!plain) continue;
      // Compare-and-set: a record changed meanwhile (by any process) was written sealed already.
      if (await records.replaceIf(rest, raw, seal(value))) sealed += 1;
    }
    return sealed;
  }

  return { get, put, insert, listByOwner, getMany, listAll, sealPlainRecords };
}

/** A record shared between callers: frozen, so that none changes what another is given. */
function frozen(s: SandboxRecord): SandboxRecord {
  if (s.certs) Object.freeze(s.certs);
  return Object.freeze(s);
}

function byName(a: SandboxRecord, b: SandboxRecord): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
