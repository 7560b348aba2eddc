import { randomUUID } from 'node:crypto';
import { errors } from '../core/errors.ts';
import type { Backend } from './kv.ts';

/** One security-relevant action (issue 24). Never a token value, password or key: ids and names only. */
export interface AuditRow {
  id: string;
  /** ISO time, UTC. */
  at: string;
  /** `sandbox.create`, `session.sign_in`, `admin.user_disable`, … (docs/governance.md lists them). */
  action: string;
  outcome: 'ok' | 'refused' | 'failed';
  /** Who: the user (id and name) and the token they used, if any. Absent for an unknown caller. */
  actor_id?: string;
  actor_name?: string;
  token_id?: string;
  /** The client's address, or `cli` for the operator's command line. */
  source: string;
  sandbox?: string;
  /** What else was acted on: a user name, a token id, a key fingerprint. */
  target?: string;
  /** A short reason or the changed fields, for reading. */
  detail?: string;
}

export interface AuditFilter {
  actorId?: string;
  sandbox?: string;
  action?: string;
  since?: string;
  until?: string;
}

export interface AuditPage {
  rows: AuditRow[];
  /** Pass as `before` for the next (older) page; null on the last. */
  next: string | null;
}

export interface AuditStore {
  append(row: Omit<AuditRow, 'id' | 'at'> & { at?: string }): Promise<AuditRow>;
  /** Newest first; `before` is a `next` of an earlier page. */
  query(filter: AuditFilter, opts?: { limit?: number; before?: string }): Promise<AuditPage>;
  /** Removes rows older than `before` (ISO); returns how many. */
  prune(before: string): Promise<number>;
  /** Drops the table (tests). */
  drop(): Promise<void>;
}

const COLUMNS = ['id', 'at', 'action', 'outcome', 'actor_id', 'actor_name', 'token_id', 'source', 'sandbox', 'target', 'detail'] as const;
const MAX_PAGE = 500;

/**
 * The audit log: a table of its own beside the keyv table (`<table>_audit`), because it is read by
 * time range and filters, newest first, in pages; both SQLite and Postgres index it. Rows are only
 * appended and pruned (retention), never changed.
 */
/**
 * PostgreSQL's IF NOT EXISTS is not safe against itself: of several service processes starting at
 * once on a new store, all but one fail on the catalogue's unique index (23505) or find the object
 * made meanwhile (42P07, 42710). The object is there then, which is all a start needs.
 */
const MADE_MEANWHILE = new Set(['23505', '42P07', '42710']);

async function ddl(backend: Backend, sql: string): Promise<void> {
  try {
    await backend.rawQuery(sql, []);
  } catch (err) {
    if (!MADE_MEANWHILE.has((err as { code?: string }).code ?? '')) throw err;
  }
}

export async function auditStore(backend: Backend): Promise<AuditStore> {
  const table = `${backend.tableRef}_audit`;
  const bare = `${backend.table}_audit`;
  await ddl(backend, `CREATE TABLE IF NOT EXISTS ${table} (${COLUMNS.map((c) => `${c} TEXT${c === 'id' ? ' PRIMARY KEY' : c === 'at' || c === 'action' || c === 'outcome' || c === 'source' ? ' NOT NULL' : ''}`).join(', ')})`);
  for (const column of ['at', 'actor_id', 'sandbox', 'action']) {
    await ddl(backend, `CREATE INDEX IF NOT EXISTS ${bare}_${column} ON ${table} (${column}, id)`);
  }

  async function append(input: Omit<AuditRow, 'id' | 'at'> & { at?: string }): Promise<AuditRow> {
    const row: AuditRow = { ...input, id: randomUUID(), at: input.at ?? new Date().toISOString() };
    await backend.rawQuery(
      `INSERT INTO ${table} (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})`,
      COLUMNS.map((c) => row[c] ?? null),
    );
    return row;
  }

  async function query(filter: AuditFilter, opts: { limit?: number; before?: string } = {}): Promise<AuditPage> {
    const where: string[] = [];
    const params: unknown[] = [];
    const add = (sql: string, ...values: unknown[]) => { where.push(sql); params.push(...values); };
    if (filter.actorId) add('actor_id = ?', filter.actorId);
    if (filter.sandbox) add('sandbox = ?', filter.sandbox);
    if (filter.action) {
      // `sandbox.` matches every sandbox action; a full name matches itself
      if (filter.action.endsWith('.')) add('action LIKE ?', `${filter.action.replace(/[%_\\]/g, '')}%`);
      else add('action = ?', filter.action);
    }
    if (filter.since) add('at >= ?', filter.since);
    if (filter.until) add('at < ?', filter.until);
    if (opts.before) {
      const [at, id] = decodeCursor(opts.before);
      add('(at < ? OR (at = ? AND id < ?))', at, at, id);
    }
    const limit = Math.min(Math.max(1, opts.limit ?? 100), MAX_PAGE);
    const rows = (await backend.rawQuery(
      `SELECT ${COLUMNS.join(', ')} FROM ${table}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY at DESC, id DESC LIMIT ${limit + 1}`,
      params,
    )) as Array<Record<string, string | null>>;
    const page = rows.slice(0, limit).map(clean);
    const last = page[page.length - 1];
    return { rows: page, next: rows.length > limit && last ? encodeCursor(last.at, last.id) : null };
  }

  async function prune(before: string): Promise<number> {
    const gone = await backend.rawQuery(`DELETE FROM ${table} WHERE at < ? RETURNING id`, [before]);
    return gone.length;
  }

  async function drop(): Promise<void> {
    await backend.rawQuery(`DROP TABLE IF EXISTS ${table}`, []);
  }

  return { append, query, prune, drop };
}

function clean(raw: Record<string, string | null>): AuditRow {
  return Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null)) as unknown as AuditRow;
}

function encodeCursor(at: string, id: string): string {
  return Buffer.from(`${at}|${id}`).toString('base64url');
}

function decodeCursor(cursor: string): [string, string] {
  const [at, id] = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  if (!at || !id || Number.isNaN(Date.parse(at))) throw new errors.BadRequest('invalid page cursor: pass the "next" of an earlier answer');
  return [at, id];
}
