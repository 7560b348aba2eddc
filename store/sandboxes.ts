import { errors } from '../core/errors.ts';
import { SecretBox } from '../core/secret-box.ts';
import type { Backend, Collection } from './kv.ts';
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
   * fields, for lists that show none (opening them costs two decryptions per record: 1000 for 500).
   */
  listByOwner(ownerId: string, opts?: { secrets: false }): Promise<SandboxRecord[]>;
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

/**
 * Keys: `sandboxes:<name>` → record (the name is the primary key, so `insert` is one atomic
 * `INSERT … ON CONFLICT DO NOTHING`, race-free across processes too); `sandboxes-idx:owner:<ownerId>:<name>` → 1.
 */
export async function sandboxStore(backend: Backend, box: SecretBox, locks: KeyedLock): Promise<SandboxStore> {
  const records: Collection<SandboxRecord> = await backend.collection<SandboxRecord>('sandboxes');
  const index: Collection<number> = await backend.collection<number>('sandboxes-idx');
  const lock = (name: string) => [`sandboxes|${name}`];

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
      const previous = await get(s.name);
      await index.set(['owner', s.owner_id, s.name], 1);
      await records.set([s.name], seal(s));
      if (previous && previous.owner_id !== s.owner_id) await index.delete(['owner', previous.owner_id, s.name]);
    });
  }

  async function insert(s: SandboxRecord): Promise<void> {
    check(s);
    await locks.run(lock(s.name), async () => {
      await index.set(['owner', s.owner_id, s.name], 1);
      if (await records.insertIfAbsent([s.name], seal(s))) return;
      const existing = await get(s.name);
      if (existing && existing.owner_id !== s.owner_id) await index.delete(['owner', s.owner_id, s.name]);
      throw new errors.NameTaken(s.name);
    });
  }

  async function listByOwner(ownerId: string, opts?: { secrets: false }): Promise<SandboxRecord[]> {
    const names = (await index.scan(['owner', ownerId])).map((r) => r.rest[0]!).filter(Boolean);
    const found = await records.getMany(names.map((n) => [n]));
    return found
      .filter((s): s is SandboxRecord => s !== undefined && s.owner_id === ownerId)
      .map(opts?.secrets === false ? withoutSecrets : open)
      .sort(byName);
  }

  async function listAll(opts?: { secrets: false }): Promise<SandboxRecord[]> {
    return (await records.scan()).map((r) => (opts?.secrets === false ? withoutSecrets : open)(r.value)).sort(byName);
  }

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

  return { get, put, insert, listByOwner, listAll, sealPlainRecords };
}

function byName(a: SandboxRecord, b: SandboxRecord): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
