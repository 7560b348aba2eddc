import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import sqlite3 from 'sqlite3';
import { SecretBox } from '../../core/secret-box.ts';
import { generateKeys, privateKeyPem } from '../../core/x509.ts';
import { openStore } from '../../store/index.ts';
import type { EngineCerts, SandboxRecord } from '../../store/records.ts';
import { openTestStore, tempDir, TEST_SECRET_KEY_FILE, type BackendName, type TestStore } from './helpers.ts';

/** The database's own rows, read past the store (as a dump or a stolen file would show them). */
async function rawRows(t: TestStore): Promise<Array<{ key: string; value: string }>> {
  if (t.url.startsWith('sqlite://')) {
    const db = new sqlite3.Database(t.url.slice('sqlite://'.length), sqlite3.OPEN_READONLY);
    try {
      return await new Promise((resolve, reject) => db.all(`SELECT key, value FROM ${t.table}`, (err, rows) => (err ? reject(err) : resolve(rows as never))));
    } finally {
      db.close();
    }
  }
  return JSON.parse(await psql(t.url, `SELECT coalesce(json_agg(json_build_object('key', key, 'value', value)), '[]') FROM public.${t.table}`));
}

/** psql, the database's own client; variables (`:'name'`) are quoted by psql. */
function psql(url: string, sql: string, vars: Record<string, string> = {}): Promise<string> {
  const args = [url, '-X', '-q', '-tA', '-v', 'ON_ERROR_STOP=1', ...Object.entries(vars).flatMap(([k, v]) => ['-v', `${k}=${v}`])];
  return new Promise((resolve, reject) => {
    const child = execFile('psql', args, (err, stdout, stderr) => (err ? reject(new Error(`psql: ${stderr || err.message}`)) : resolve(stdout)));
    child.stdin!.end(sql);
  });
}

/** Writes a row as a version before sealing did: the record with its keys in plain text. */
async function rawPut(t: TestStore, key: string, value: string): Promise<void> {
  if (t.url.startsWith('sqlite://')) {
    const db = new sqlite3.Database(t.url.slice('sqlite://'.length));
    try {
      await new Promise<void>((resolve, reject) => db.run(`INSERT INTO ${t.table} (key, value) VALUES (?, ?)`, [key, value], (err) => (err ? reject(err) : resolve())));
    } finally {
      db.close();
    }
    return;
  }
  await psql(t.url, `INSERT INTO public.${t.table} (key, value) VALUES (:'k', :'v')`, { k: key, v: value });
}

async function certs(): Promise<EngineCerts> {
  const key = async () => privateKeyPem((await generateKeys()).privateKey);
  return { ca_cert: 'CA', client_cert: 'CLIENT', client_key: await key(), server_cert: 'SERVER', server_key: await key() };
}

function sandbox(name: string, c: EngineCerts): SandboxRecord {
  return { name, owner_id: 'owner-1', template: 'default', idle_timeout: '30m', deep_sleep_after: '14d', created_at: new Date().toISOString(), certs: c };
}

function suite(backend: BackendName): void {
  describe(`sealed secrets on ${backend}`, () => {
    let t: TestStore;
    before(async () => { t = await openTestStore(backend); });
    after(async () => { await t?.cleanup(); });

    test('engine keys are sealed in the rows and plain in the records the store hands out', async () => {
      const c = await certs();
      await t.store.sandboxes.put(sandbox('svc-sealed-put', c));
      await t.store.sandboxes.insert(sandbox('svc-sealed-insert', c));
      for (const name of ['svc-sealed-put', 'svc-sealed-insert']) {
        assert.deepEqual((await t.store.sandboxes.get(name))?.certs, c);
      }
      assert.deepEqual((await t.store.sandboxes.listAll()).map((s) => s.certs), [c, c]);
      assert.deepEqual((await t.store.sandboxes.listByOwner('owner-1')).map((s) => s.certs), [c, c]);
      // lists that show no secret get none (nothing opened): the certificates without their keys
      const { client_key: _c, server_key: _s, ...certsOnly } = c;
      assert.deepEqual((await t.store.sandboxes.listByOwner('owner-1', { secrets: false })).map((s) => s.certs), [certsOnly, certsOnly]);
      assert.deepEqual((await t.store.sandboxes.listAll({ secrets: false })).map((s) => s.certs), [certsOnly, certsOnly]);
      const rows = await rawRows(t);
      assert.ok(rows.some((r) => r.key === 'sandboxes:svc-sealed-put'));
      for (const r of rows) assert.ok(!r.value.includes('PRIVATE KEY'), `row ${r.key} holds no private key`);
      assert.equal(await t.store.sandboxes.sealPlainRecords(), 0, 'nothing left to seal');
    });

    test("a manager sandbox's tool password is sealed in its row too", async () => {
      const password = 'tool-password-in-plain-sight';
      await t.store.sandboxes.put({ ...sandbox('svc-sealed-manager', await certs()), template: 'manager', manager_password: password });
      assert.equal((await t.store.sandboxes.get('svc-sealed-manager'))?.manager_password, password);
      const listed = (await t.store.sandboxes.listByOwner('owner-1', { secrets: false })).find((r) => r.name === 'svc-sealed-manager');
      assert.ok(listed && !('manager_password' in listed) && listed.template === 'manager', 'not in a list without secrets');
      const row = (await rawRows(t)).find((r) => r.key === 'sandboxes:svc-sealed-manager');
      assert.ok(row && !row.value.includes(password) && row.value.includes('svc-sealed:v1:'));
    });

    test('records written before sealing are sealed by sealPlainRecords, once', async () => {
      const c = await certs();
      const old = sandbox('svc-plain-old', c);
      await rawPut(t, 'sandboxes:svc-plain-old', JSON.stringify({ value: old }));
      assert.ok((await rawRows(t)).some((r) => r.value.includes('PRIVATE KEY')), 'the old row is plain');
      assert.deepEqual((await t.store.sandboxes.get('svc-plain-old'))?.certs, c, 'a plain record still reads');
      assert.equal(await t.store.sandboxes.sealPlainRecords(), 1);
      assert.equal(await t.store.sandboxes.sealPlainRecords(), 0);
      for (const r of await rawRows(t)) assert.ok(!r.value.includes('PRIVATE KEY'), `row ${r.key} holds no private key`);
      assert.deepEqual(await t.store.sandboxes.get('svc-plain-old'), old);
    });

    test('a store opened with another key refuses to hand out the secrets', async () => {
      await t.store.sandboxes.put(sandbox('svc-other-key', await certs()));
      const other = tempDir('svc-key-');
      const store = await openStore(t.url, { table: t.table, secretKeyFile: path.join(other.dir, 'secret.key') });
      try {
        await assert.rejects(store.sandboxes.get('svc-other-key'), /certs\.client_key does not open: SVC_SECRET_KEY_FILE is not the key/);
        await assert.rejects(store.sandboxes.sealPlainRecords(), /does not open/, 'a start with the wrong key stops');
      } finally {
        await store.close();
        other.remove();
      }
    });
  });
}

suite('sqlite');
suite('postgres');

test('the store tests need no Postgres superuser (setup trusts only role svc_test on database svc_test)', async () => {
  const t = await openTestStore('postgres');
  try {
    assert.equal((await psql(t.url, 'SELECT current_user || \' \' || rolsuper FROM pg_roles WHERE rolname = current_user')).trim(), 'svc_test false');
  } finally {
    await t.cleanup();
  }
});

describe('SecretBox', () => {
  const tmp = tempDir('svc-secretbox-');
  after(() => tmp.remove());

  test('makes its key file 0600 in a 0700 folder; an existing key is kept and tightened', () => {
    const file = path.join(tmp.dir, 'etc', 'secret.key');
    const sealed = SecretBox.open(file).seal('hello', 'ctx');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.equal(fs.statSync(path.dirname(file)).mode & 0o777, 0o700);
    fs.chmodSync(file, 0o644);
    assert.equal(SecretBox.open(file).open(sealed, 'ctx'), 'hello');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  });

  test('refuses a malformed key file, a shortened tag, another context and an altered value', () => {
    const bad = path.join(tmp.dir, 'bad.key');
    fs.writeFileSync(bad, 'not a key\n', { mode: 0o600 });
    assert.throws(() => SecretBox.open(bad), /does not hold 64 hex digits/);
    const box = SecretBox.open(path.join(tmp.dir, 'good.key'));
    const sealed = box.seal('-----BEGIN PRIVATE KEY-----', 'sandboxes:a:certs.client_key');
    assert.ok(SecretBox.isSealed(sealed) && !sealed.includes('PRIVATE'));
    assert.equal(box.seal(sealed, 'sandboxes:a:certs.client_key'), sealed, 'sealing twice changes nothing');
    const [iv, body, tag] = sealed.slice('svc-sealed:v1:'.length).split('.');
    const short = `svc-sealed:v1:${iv}.${body}.${Buffer.from(tag!, 'base64url').subarray(0, 12).toString('base64url')}`;
    assert.throws(() => box.open(short, 'sandboxes:a:certs.client_key'), /malformed/);
    assert.throws(() => box.open(sealed, 'sandboxes:b:certs.client_key'), /does not open/);
    const flipped = Buffer.from(body!, 'base64url');
    flipped[0]! ^= 1;
    assert.throws(() => box.open(`svc-sealed:v1:${iv}.${flipped.toString('base64url')}.${tag}`, 'sandboxes:a:certs.client_key'), /does not open/);
    assert.equal(box.open(sealed, 'sandboxes:a:certs.client_key'), '-----BEGIN PRIVATE KEY-----');
  });
});

describe('SQLite store files', () => {
  test('are 0600 at every open, whatever mode they had', async () => {
    const tmp = tempDir('svc-store-modes-');
    try {
      const url = `sqlite://${path.join(tmp.dir, 'svc.sqlite')}`;
      const first = await openStore(url, { secretKeyFile: TEST_SECRET_KEY_FILE });
      await first.users.put({ id: 'u1', name: 'mode-check', password_hash: 'scrypt$x$y', admin: false, created_at: new Date().toISOString(), ssh_keys: [] });
      const files = ['svc.sqlite', 'svc.sqlite-wal', 'svc.sqlite-shm'].map((f) => path.join(tmp.dir, f));
      for (const f of files) fs.chmodSync(f, 0o644); // as an operator's copy or an older version left them
      const second = await openStore(url, { secretKeyFile: TEST_SECRET_KEY_FILE });
      try {
        for (const f of files) assert.equal(fs.statSync(f).mode & 0o777, 0o600, f);
        assert.equal((await second.users.get('u1'))?.name, 'mode-check');
      } finally {
        await second.close();
        await first.close();
      }
    } finally {
      tmp.remove();
    }
  });
});
