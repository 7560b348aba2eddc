import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import sqlite3 from 'sqlite3';
import { createToken, createUser } from '../../accounts/index.ts';
import { generateKeys, privateKeyPem } from '../../core/x509.ts';
import { openStore } from '../../store/index.ts';
import type { SandboxRecord } from '../../store/records.ts';
import { answerOf, startTestService } from '../../harness/service.ts';
import { TEST_SECRET_KEY_FILE } from './helpers.ts';

function sql(file: string, query: string, params: unknown[] = []): Promise<Array<{ key: string; value: string }>> {
  const db = new sqlite3.Database(file);
  return new Promise<Array<{ key: string; value: string }>>((resolve, reject) => db.all(query, params, (err, rows) => (err ? reject(err) : resolve(rows as never))))
    .finally(() => db.close());
}

/**
 * What a start does to a data folder an operator (or an older version) left behind: the folder
 * becomes 0700, the store files 0600, and engine keys written in plain text are sealed, while the
 * API still hands the owner the same key.
 */
test('a start tightens the data folder and the store files and seals old plain engine keys', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-start-'));
  fs.chmodSync(dataDir, 0o755);
  const file = path.join(dataDir, 'svc.sqlite');
  const storeUrl = `sqlite://${file}`;

  // The store as an older version wrote it: a user with a token, and a sandbox whose keys are plain.
  const old = await openStore(storeUrl, { secretKeyFile: TEST_SECRET_KEY_FILE });
  const { user } = await createUser(old, { name: 'start-check' });
  const { value: token } = await createToken(old, { userId: user.id });
  await old.close();
  const clientKey = await privateKeyPem((await generateKeys()).privateKey);
  const record: SandboxRecord = {
    name: 'svc-start-check', owner_id: user.id, template: 'default', idle_timeout: '30m', deep_sleep_after: '14d', created_at: new Date().toISOString(),
    certs: { ca_cert: 'CA', client_cert: 'CERT', client_key: clientKey, server_cert: 'SERVER', server_key: clientKey },
  };
  await sql(file, 'INSERT INTO svc_store (key, value) VALUES (?, ?), (?, ?)', [
    'sandboxes:svc-start-check', JSON.stringify({ value: record }), `sandboxes-idx:owner:${user.id}:svc-start-check`, JSON.stringify({ value: 1 }),
  ]);
  for (const f of fs.readdirSync(dataDir)) {
    // SQLite may remove its -shm and -wal files as the last connection closes, between the listing and here
    try { fs.chmodSync(path.join(dataDir, f), 0o644); } catch (err) { if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err; }
  }

  const t = await startTestService({ dataDir, storeUrl });
  try {
    assert.equal(fs.statSync(dataDir).mode & 0o777, 0o700, 'the data folder');
    for (const f of fs.readdirSync(dataDir).filter((n) => n.startsWith('svc.sqlite'))) {
      assert.equal(fs.statSync(path.join(dataDir, f)).mode & 0o777, 0o600, f);
    }
    for (const row of await sql(file, 'SELECT key, value FROM svc_store')) {
      assert.ok(!row.value.includes('PRIVATE KEY'), `row ${row.key} holds no private key`);
    }
    const res = await t.api('GET', '/api/sandboxes/svc-start-check', token);
    assert.equal(res.status, 200, answerOf(res));
    assert.ok(res.body.client_key === clientKey, 'the owner still gets the key'); // equal would print it
  } finally {
    await t.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
