import fs from 'node:fs';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { Config } from '../core/config.ts';
import { openStore, type AuditRow, type Store, Backend, redactUrl } from '../store/index.ts';
import { archiveFolder } from '../lifecycle/index.ts';

/**
 * `svc backup` and `svc restore` (docs/operations.md). One file holds what the store holds: every
 * record (users, tokens, SSH keys, sandbox records with their engine keys, registry metadata, the
 * service CA and the registry token key), with the secrets still sealed under the secret key, the
 * audit log, and the list of archives. The secret key itself only when asked for: whoever has the
 * file and the key has every engine key.
 *
 * Redis is not in it: sessions, timers and the app table are rebuilt by the first reconcile pass.
 */

export const BACKUP_FORMAT = 'svc-backup';
const BACKUP_VERSION = 1;

interface BackupFile {
  format: typeof BACKUP_FORMAT;
  version: number;
  created_at: string;
  /** Where it came from, for the operator (the store URL without its password). */
  source: { store: string; domain: string };
  /** The store's table, row by row, as stored: sealed values stay sealed. */
  records: Array<[string, string]>;
  audit: AuditRow[];
  /** Archives of deleted sandboxes, relative to the data folder (they are not in the file: too big). */
  archives: Array<{ sandbox: string; path: string; bytes: number }>;
  /** The secret key file's content, only with --with-secret-key. */
  secret_key?: string;
}

export interface BackupSummary {
  records: number;
  audit: number;
  archives: number;
  withSecretKey: boolean;
}

export interface RestoreReport {
  records: number;
  audit: number;
  users: number;
  sandboxes: number;
  /** What the restored service will miss until the operator copies it: one line each. */
  missing: string[];
}

/** Rows the store keeps for its write locks (store/lock.ts): a writer's, not data. */
const LOCK_ROW = 'locks:';
const AUDIT_PAGE = 500;

/**
 * Writes the backup of the configured store to `file` (0600, atomically). Safe while the service
 * runs: the records are one SELECT, a consistent snapshot in SQLite and Postgres alike; the audit
 * log is read after them and may hold a few rows more.
 */
export async function writeBackup(config: Config, file: string, opts: { withSecretKey: boolean }): Promise<BackupSummary> {
  const target = path.resolve(file);
  if (!fs.existsSync(path.dirname(target))) throw new Error(`the folder ${path.dirname(target)} does not exist`);
  if (!fs.existsSync(config.secretKeyFile)) {
    throw new Error(`the secret key file ${config.secretKeyFile} (SVC_SECRET_KEY_FILE) does not exist: this is not the configuration of a service that has run`);
  }
  const backend = await Backend.open(config.storeUrl, { table: config.storeTable });
  let records: Array<[string, string]>;
  try {
    const rows = (await backend.rawQuery(`SELECT key, value FROM ${backend.tableRef} ORDER BY key`, [])) as Array<{ key: string; value: string }>;
    records = rows.filter((r) => !r.key.startsWith(LOCK_ROW)).map((r) => [r.key, r.value]);
  } finally {
    await backend.close();
  }
  const store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
  let audit: AuditRow[];
  let archives: BackupFile['archives'];
  try {
    audit = await allAuditRows(store);
    archives = (await store.sandboxes.listAll())
      .filter((s) => s.archive_path)
      .map((s) => ({ sandbox: s.name, path: s.archive_path!, bytes: folderBytes(archiveFolder(config.archiveDir, s.archive_path!)) }));
  } finally {
    await store.close();
  }
  const backup: BackupFile = {
    format: BACKUP_FORMAT,
    version: BACKUP_VERSION,
    created_at: new Date().toISOString(),
    source: { store: redactUrl(config.storeUrl), domain: config.domain },
    records,
    audit,
    archives,
    ...(opts.withSecretKey ? { secret_key: fs.readFileSync(config.secretKeyFile, 'utf8') } : {}),
  };
  const partial = `${target}.partial-${process.pid}`;
  fs.writeFileSync(partial, gzipSync(JSON.stringify(backup)), { mode: 0o600, flag: 'wx' });
  fs.renameSync(partial, target);
  return { records: records.length, audit: audit.length, archives: archives.length, withSecretKey: opts.withSecretKey };
}

/**
 * Restores `file` into the configured store, which must be empty. Refuses, changing nothing, when
 * the secret key is missing or is not the one that sealed the backup's secrets. Says what else the
 * restored service needs that a backup file does not hold: archives and registry blobs.
 */
export async function restoreBackup(config: Config, file: string): Promise<RestoreReport> {
  const backup = readBackup(file);
  const keyFile = config.secretKeyFile;
  let wroteKey = false;
  if (backup.secret_key !== undefined) {
    if (fs.existsSync(keyFile)) {
      if (fs.readFileSync(keyFile, 'utf8').trim() !== backup.secret_key.trim()) {
        throw new Error(`a different secret key is already at ${keyFile} (SVC_SECRET_KEY_FILE): move it aside (or point SVC_SECRET_KEY_FILE elsewhere) to restore the backup's key; nothing was restored`);
      }
    }
  } else if (!fs.existsSync(keyFile)) {
    throw new Error(`the secret key is missing: this backup was made without --with-secret-key, and ${keyFile} (SVC_SECRET_KEY_FILE) does not exist. ` +
      'Copy the old service\'s key file there (0600), then run svc restore again; without it no engine key, service CA or registry token key can be opened. Nothing was restored');
  }

  const backend = await Backend.open(config.storeUrl, { table: config.storeTable });
  try {
    const [held] = (await backend.rawQuery(`SELECT count(*) AS n FROM ${backend.tableRef} WHERE key NOT LIKE ?`, [`${LOCK_ROW}%`])) as Array<{ n: number | string }>;
    if (Number(held?.n ?? 0) > 0) {
      throw new Error(`the store ${redactUrl(config.storeUrl)} (table ${config.storeTable}) already holds ${Number(held!.n)} records: restore only into an empty store (a new database, SQLite file or SVC_STORE_TABLE); nothing was restored`);
    }
    if (backup.secret_key !== undefined && !fs.existsSync(keyFile)) {
      fs.mkdirSync(path.dirname(keyFile), { recursive: true, mode: 0o700 });
      fs.writeFileSync(keyFile, backup.secret_key, { mode: 0o600, flag: 'wx' });
      wroteKey = true;
    }
    const store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: keyFile });
    try {
      if ((await store.audit.query({}, { limit: 1 })).rows.length > 0) {
        throw new Error(`the audit log of ${redactUrl(config.storeUrl)} is not empty: restore only into an empty store; nothing was restored`);
      }
      for (const [key, value] of backup.records) {
        await backend.rawQuery(`INSERT INTO ${backend.tableRef} (key, value) VALUES (?, ?)`, [key, value]);
      }
      let sandboxes: number;
      let users: number;
      try {
        // every sealed secret must open with this key: the records, the CA, the registry token key
        sandboxes = (await store.sandboxes.listAll()).length;
        users = (await store.users.list()).length;
        await store.serviceKeys.get('service-ca');
        await store.serviceKeys.get('registry-token-key');
      } catch (err) {
        await backend.rawQuery(`DELETE FROM ${backend.tableRef}`, []);
        throw new Error(`the secret key at ${keyFile} does not open the backup's sealed secrets (${(err as Error).message}): it is not the key of the service that made the backup. Copy that key there; nothing was restored`);
      }
      // oldest first, each keeping its time (the rows get new ids)
      for (const { id: _id, ...row } of [...backup.audit].reverse()) await store.audit.append(row);
      return { records: backup.records.length, audit: backup.audit.length, users, sandboxes, missing: missingParts(config, backup) };
    } finally {
      await store.close();
    }
  } catch (err) {
    if (wroteKey) fs.rmSync(keyFile, { force: true });
    throw err;
  } finally {
    await backend.close();
  }
}

function readBackup(file: string): BackupFile {
  let parsed: BackupFile;
  try {
    parsed = JSON.parse(gunzipSync(fs.readFileSync(file)).toString('utf8')) as BackupFile;
  } catch (err) {
    throw new Error(`${file} is not a backup made by svc backup (${(err as Error).message})`);
  }
  if (parsed?.format !== BACKUP_FORMAT || !Array.isArray(parsed.records) || !Array.isArray(parsed.audit) || !Array.isArray(parsed.archives)) {
    throw new Error(`${file} is not a backup made by svc backup`);
  }
  if (parsed.version !== BACKUP_VERSION) throw new Error(`${file} is backup format ${parsed.version}; this svc reads format ${BACKUP_VERSION}`);
  if (!parsed.records.every((r) => Array.isArray(r) && typeof r[0] === 'string' && typeof r[1] === 'string')) throw new Error(`${file} holds malformed records`);
  return parsed;
}

/** What the backup points at that is not in it, and not (yet) where the restored service looks. */
function missingParts(config: Config, backup: BackupFile): string[] {
  const missing: string[] = [];
  const absent = backup.archives.filter((a) => !fs.existsSync(archiveFolder(config.archiveDir, a.path)));
  if (absent.length) {
    missing.push(`archives: ${absent.length} of ${backup.archives.length} are not in ${config.archiveDir} (SVC_ARCHIVE_DIR): copy ${absent.map((a) => a.path.replace(/^archive\//, '')).join(', ')} there from the old archive folder`);
  }
  const versions = backup.records.filter(([key]) => key.startsWith('registry-versions:')).length;
  if (versions > 0 && !config.registryUpstream && !fs.existsSync(path.join(config.dataDir, 'registry', 'storage', 'docker'))) {
    missing.push(`registry blobs: ${versions} image versions are recorded, but ${path.join(config.dataDir, 'registry', 'storage')} is empty: ` +
      'copy the old data folder\'s registry/storage there (or set SVC_REGISTRY_UPSTREAM to the old upstream); pulls answer "unknown" until then');
  }
  return missing;
}

async function allAuditRows(store: Store): Promise<AuditRow[]> {
  const rows: AuditRow[] = [];
  let before: string | undefined;
  do {
    const page = await store.audit.query({}, { limit: AUDIT_PAGE, ...(before ? { before } : {}) });
    rows.push(...page.rows);
    before = page.next ?? undefined;
  } while (before);
  return rows;
}

function folderBytes(dir: string): number {
  let total = 0;
  try {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
      if (entry.isFile()) total += fs.statSync(path.join(entry.parentPath ?? entry.path, entry.name)).size;
    }
  } catch {
    return 0; // gone already: the restore names it as missing
  }
  return total;
}
