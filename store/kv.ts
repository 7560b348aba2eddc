import { chmodSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import Keyv from 'keyv';
import KeyvSqlite from '@keyv/sqlite';
import KeyvPostgres from '@keyv/postgres';

/**
 * The keyv layer under the store: one keyv table, one Keyv (and one adapter) per namespace.
 *
 * Keys are made of parts joined by `:`; each part is URI-encoded, so a part never contains a `:`
 * and a key read back splits unambiguously. Three things keyv itself does not give us are done with
 * the adapter's own SQL connection, on the very same table and value format:
 *  - `Backend.write`: rows of several collections in one upsert, atomic across processes and crashes;
 *  - `insertIfAbsent` (one such row, kept if its key exists) and `replaceIf` (compare-and-set);
 *  - `scan`: the adapter's iterator over a key prefix (see `scan` for why it is reliable here).
 */

export type Dialect = 'sqlite' | 'postgres';
type Adapter = KeyvSqlite | KeyvPostgres;

export interface BackendOptions {
  /** keyv table name: lowercase letters, digits, `_`. Default `svc_store`. */
  table?: string;
}

const TABLE = /^[a-z_][a-z0-9_]{0,62}$/;
/** SQLite: one page holds every row of a scan, so LIMIT/OFFSET paging never shifts under a writer. */
const SQLITE_ITERATION_LIMIT = 1_000_000;
const SQLITE_BUSY_TIMEOUT_MS = 15_000;
/** Postgres pages by key (`key > last ORDER BY key`), which is stable under concurrent writes. */
const POSTGRES_ITERATION_LIMIT = 1000;

export function keyOf(parts: readonly string[]): string {
  return parts.map((p) => encodeURIComponent(p)).join(':');
}

/** A URL with any password removed, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/\/\/([^:/@]+):[^@/]*@/, '//$1:***@');
  }
}

export class Collection<T> {
  constructor(
    private readonly backend: Backend,
    readonly namespace: string,
    private readonly adapter: Adapter,
    private readonly kv: Keyv<T>,
  ) {}

  async get(parts: readonly string[]): Promise<T | undefined> {
    const value = await this.kv.get(keyOf(parts));
    return value ?? undefined;
  }

  async getMany(keys: ReadonlyArray<readonly string[]>): Promise<Array<T | undefined>> {
    if (keys.length === 0) return [];
    if (this.backend.dialect === 'postgres') {
      const values = await this.kv.get(keys.map(keyOf));
      return values.map((v) => v ?? undefined);
    }
    // @keyv/sqlite's getMany looks each key up in the rows found (n² comparisons: 12.5 M on the event
    // loop for 5,000 sandboxes): the same query here, the rows found kept by key
    const wanted = keys.map((parts) => this.rowKey(parts));
    const rows = await this.backend.rawQuery(`SELECT key, value FROM ${this.backend.tableRef} WHERE key IN (SELECT value FROM json_each(?))`, [JSON.stringify(wanted)]);
    const found = new Map((rows as Array<{ key: string; value: string }>).map((r) => [r.key, r.value]));
    return Promise.all(wanted.map(async (key) => {
      const raw = found.get(key);
      if (raw === undefined) return undefined;
      const data = await this.kv.deserializeData<T>(raw);
      // no value of the store expires (none is written with a ttl); keyv's rule all the same
      if (!data || data.value === undefined || data.value === null || (typeof data.expires === 'number' && Date.now() > data.expires)) return undefined;
      return data.value;
    }));
  }

  async set(parts: readonly string[], value: T): Promise<void> {
    await this.kv.set(keyOf(parts), value);
  }

  async delete(parts: readonly string[]): Promise<void> {
    await this.kv.delete(keyOf(parts));
  }

  /** The row this collection keeps `value` under `parts` in: its key in the table and its value as stored. */
  async row(parts: readonly string[], value: T): Promise<{ key: string; serialized: string }> {
    const serialized = await this.kv.serializeData({ value, expires: undefined });
    if (typeof serialized !== 'string') throw new Error('keyv serializer did not produce a string');
    return { key: this.rowKey(parts), serialized };
  }

  /** The key of `parts` in the table, as keyv writes it: `<namespace>:<key>`. */
  private rowKey(parts: readonly string[]): string {
    return `${this.namespace}:${keyOf(parts)}`;
  }

  /** Writes the value only if the key does not exist yet; true if this call wrote it. Atomic in the database. */
  async insertIfAbsent(parts: readonly string[], value: T): Promise<boolean> {
    const [written] = await this.backend.write([{ collection: this, parts, value, ifAbsent: true }]);
    return written!;
  }

  /**
   * Replaces the value only if the row still holds `raw` (as `scan` returned it); true if this call
   * wrote. Atomic in the database, so a writer in another process is never overwritten.
   */
  async replaceIf(parts: readonly string[], raw: string, value: T): Promise<boolean> {
    const { key, serialized } = await this.row(parts, value);
    const rows = await this.backend.rawQuery(`UPDATE ${this.backend.tableRef} SET value = ? WHERE key = ? AND value = ? RETURNING key`, [serialized, key, raw]);
    return rows.length === 1;
  }

  /**
   * Every entry whose key starts with `prefix` (whole parts), with the remaining key parts.
   *
   * Uses the adapter's iterator with `<namespace>:<prefix>` as its "namespace", i.e. a
   * `LIKE '<namespace>:<prefix>:%'` scan. Postgres escapes the pattern and pages by key; SQLite
   * neither escapes (`_`, `%` are wildcards, and LIKE ignores ASCII case) nor orders, so every row
   * is checked against the exact prefix here (the pattern only ever matches a superset), and the
   * SQLite page size is large enough for one query. The Postgres iterator reports a database error
   * as an `error` event and stops early: that is turned back into a thrown error.
   */
  async scan(prefix: readonly string[] = []): Promise<Array<{ rest: string[]; value: T; raw: string }>> {
    const scope = prefix.length ? `${this.namespace}:${keyOf(prefix)}` : this.namespace;
    const exact = `${scope}:`;
    let failure: unknown;
    const onError = (error: unknown) => { failure ??= error; };
    this.adapter.on('error', onError);
    const out: Array<{ rest: string[]; value: T; raw: string }> = [];
    const seen = new Set<string>();
    try {
      for await (const entry of this.adapter.iterator(scope)) {
        const [key, raw] = entry as [string, string];
        if (typeof key !== 'string' || !key.startsWith(exact) || seen.has(key)) continue;
        seen.add(key);
        const data = await this.kv.deserializeData<T>(raw);
        if (data === undefined || data === null || data.value === undefined || data.value === null) continue;
        out.push({ rest: key.slice(exact.length).split(':').map((p) => decodeURIComponent(p)), value: data.value, raw });
      }
    } finally {
      this.adapter.off('error', onError);
    }
    if (failure !== undefined) throw failure instanceof Error ? failure : new Error(String(failure));
    return out;
  }
}

/** One row of `Backend.write`: a value of a collection, written only while its key is absent if `ifAbsent`. */
export interface Write<T = unknown> {
  collection: Collection<T>;
  parts: readonly string[];
  value: T;
  ifAbsent?: boolean;
}

/** Postgres: @keyv/postgres keeps one pg pool per process, for one URL. We count its users. */
const postgresUsers = { url: '', count: 0 };

export class Backend {
  private readonly adapters: Adapter[] = [];
  private closed = false;

  private constructor(
    readonly dialect: Dialect,
    private readonly adapterOptions: Record<string, unknown>,
    readonly table: string,
  ) {}

  /** The table as the adapter names it in its own SQL. */
  get tableRef(): string {
    return this.dialect === 'postgres' ? `public.${this.table}` : this.table;
  }

  static async open(url: string, options: BackendOptions = {}): Promise<Backend> {
    const table = options.table ?? 'svc_store';
    if (!TABLE.test(table)) throw new Error(`invalid store table name "${table}": use lowercase letters, digits and _`);
    if (url.startsWith('sqlite://')) return Backend.openSqlite(url, table);
    if (url.startsWith('postgres://') || url.startsWith('postgresql://')) return Backend.openPostgres(url, table);
    throw new Error(`unsupported store URL "${redactUrl(url)}": use sqlite:///absolute/path/file.sqlite or postgres://user@host:port/db`);
  }

  private static async openSqlite(url: string, table: string): Promise<Backend> {
    const location = url.slice('sqlite://'.length);
    if (location === '' || location.startsWith(':memory:')) {
      throw new Error(`store URL "${url}" has no file: use sqlite:///absolute/path/file.sqlite (an in-memory database cannot be shared between connections)`);
    }
    const file = path.resolve(location);
    try {
      // 0700: the store holds password and token hashes (only folders created here get this mode).
      mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    } catch (error) {
      throw new Error(`cannot create the folder for the SQLite store ${file}: ${(error as Error).message}`);
    }
    const backend = new Backend('sqlite', {
      uri: `sqlite://${file}`,
      table,
      busyTimeout: SQLITE_BUSY_TIMEOUT_MS,
      iterationLimit: SQLITE_ITERATION_LIMIT,
    }, table);
    try {
      const first = backend.newAdapter();
      // WAL: the CLI and the service may use the file at the same time; readers do not block the writer.
      await first.query('PRAGMA journal_mode=WAL');
      // 0600 at every open, whatever an operator or an older version left: the store holds hashes and sealed keys.
      for (const f of [file, `${file}-wal`, `${file}-shm`]) {
        try { chmodSync(f, 0o600); } catch (error) { if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error; }
      }
    } catch (error) {
      await backend.close().catch(() => undefined);
      throw new Error(`cannot open the SQLite store ${file}: ${(error as Error).message}`);
    }
    return backend;
  }

  private static async openPostgres(url: string, table: string): Promise<Backend> {
    if (postgresUsers.count > 0 && postgresUsers.url !== url) {
      throw new Error(`a store on ${redactUrl(postgresUsers.url)} is open in this process; @keyv/postgres shares one pool per process, so only one Postgres URL can be used at a time`);
    }
    postgresUsers.url = url;
    postgresUsers.count += 1;
    const backend = new Backend('postgres', {
      uri: url,
      table,
      iterationLimit: POSTGRES_ITERATION_LIMIT,
      connectionTimeoutMillis: 5000,
    }, table);
    try {
      // The first adapter creates the table; probing it surfaces a connection error here, clearly.
      await backend.newAdapter().query('SELECT 1');
    } catch (error) {
      await backend.close().catch(() => undefined);
      const e = error as Error & { code?: string };
      throw new Error(`cannot reach PostgreSQL at ${redactUrl(url)}: ${e.message || e.code || String(error)}`);
    }
    return backend;
  }

  private newAdapter(): Adapter {
    const adapter = this.dialect === 'sqlite'
      ? new KeyvSqlite(this.adapterOptions as ConstructorParameters<typeof KeyvSqlite>[0])
      : new KeyvPostgres(this.adapterOptions as ConstructorParameters<typeof KeyvPostgres>[0]);
    // Errors are thrown to the caller (throwOnErrors); this keeps the emitter from treating them as unhandled.
    adapter.on('error', () => undefined);
    this.adapters.push(adapter);
    return adapter;
  }

  /** One Keyv per namespace, each on its own adapter (an adapter carries its Keyv's namespace). */
  async collection<T>(namespace: string): Promise<Collection<T>> {
    if (!/^[a-z][a-z0-9-]*$/.test(namespace)) throw new Error(`invalid namespace "${namespace}"`);
    const adapter = this.adapters.length === 1 && !this.adapters[0]!.namespace ? this.adapters[0]! : this.newAdapter();
    const kv = new Keyv<T>({ store: adapter, namespace, throwOnErrors: true });
    kv.on('error', () => undefined);
    await adapter.query('SELECT 1'); // table ready, connection good
    return new Collection<T>(this, namespace, adapter, kv);
  }

  /**
   * Writes rows of any collections in one statement: every process sees all of them or none, a crash
   * included (two statements, or a transaction on the adapters' separate connections, could not say
   * that). A row `ifAbsent` whose key exists is left as it is. Answers, in order, whether each was written.
   */
  async write(rows: ReadonlyArray<Write<any>>): Promise<boolean[]> {
    if (rows.length === 0) return [];
    const made = await Promise.all(rows.map((r) => r.collection.row(r.parts, r.value)));
    if (new Set(made.map((m) => m.key)).size !== made.length) throw new Error('Backend.write: a key given twice');
    const kept = made.filter((_, i) => rows[i]!.ifAbsent).map((m) => m.key);
    // PostgreSQL locks the rows in the order of VALUES: in the keys' order, two writes sharing rows
    // wait for each other instead of deadlocking
    const ordered = [...made].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    // one upsert: a row to keep conflicts and is not updated (the WHERE), so RETURNING leaves it out
    const written = new Set((await this.rawQuery(
      `INSERT INTO ${this.tableRef} (key, value) VALUES ${ordered.map(() => '(?, ?)').join(', ')}`
        + ` ON CONFLICT (key) DO UPDATE SET value = excluded.value${kept.length ? ` WHERE excluded.key NOT IN (${kept.map(() => '?').join(', ')})` : ''}`
        + ' RETURNING key',
      [...ordered.flatMap((m) => [m.key, m.serialized]), ...kept],
    ) as Array<{ key: string }>).map((r) => r.key));
    return made.map((m) => written.has(m.key));
  }

  /** A query on the store's own connection; `?` placeholders in both dialects. */
  async rawQuery(sql: string, params: unknown[]): Promise<unknown[]> {
    const adapter = this.adapters[0];
    if (!adapter || this.closed) throw new Error('the store is closed');
    if (this.dialect === 'sqlite') return (await (adapter as KeyvSqlite).query(sql, ...params)) as unknown[];
    let n = 0;
    const pgSql = sql.replace(/\?/g, () => `$${++n}`);
    return (adapter as KeyvPostgres).query(pgSql, params);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.dialect === 'sqlite') {
      await Promise.allSettled(this.adapters.map((a) => (a as KeyvSqlite).disconnect()));
      return;
    }
    postgresUsers.count -= 1;
    if (postgresUsers.count === 0) {
      postgresUsers.url = '';
      await (this.adapters[0] as KeyvPostgres | undefined)?.disconnect();
    }
  }

  /** Drops the table (tests clean up with this), then closes. */
  async drop(): Promise<void> {
    await this.rawQuery(`DROP TABLE IF EXISTS ${this.tableRef}`, []);
    await this.close();
  }
}
