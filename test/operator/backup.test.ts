import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { destroyStore, openStore } from '../../store/index.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { freePort } from '../../harness/ports.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { gzip, LAYER_GZIP, makeTar, OciClient } from '../../harness/oci.ts';
import { POSTGRES_URL } from '../store/helpers.ts';


let t: TestService;
let sb: EdgeSandbox;
let dir: string;

before(async () => {
  t = await startTestService();
  sb = await openEdgeSandbox(t, 'backup');
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ops-backup-'));
});
after(async () => {
  sb?.close();
  await t?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** `npx svc …` as an operator runs it, with the environment of the service it is for. */
async function svc(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('npx', ['svc', ...args], { env: { ...process.env, ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const envOf = (c: { dataDir: string; storeUrl: string; storeTable: string; secretKeyFile: string }) => ({
  SVC_DATA_DIR: c.dataDir, SVC_STORE_URL: c.storeUrl, SVC_STORE_TABLE: c.storeTable, SVC_SECRET_KEY_FILE: c.secretKeyFile,
});

test('a backup taken while a sandbox runs restores onto a new data folder, store and Redis prefix: the old token, engine certificates, CA and registry report work there', async () => {
  const record = await sb.record();
  const oci = new OciClient({ port: t.config.httpsPort, host: `registry.${t.config.domain}`, ca: fs.readFileSync(sb.ca, 'utf8') }).withAuth(OciClient.basic(sb.user.token));
  const repo = `${sb.name}/kept`;
  const pushed = await oci.pushImage(repo, 'v1', [{ blob: gzip(await makeTar([{ path: 'app/run.sh', content: 'echo kept\n' }])), mediaType: LAYER_GZIP }]);
  assert.equal(pushed.status, 201);
  const report = async (api: TestService) => (await api.api('GET', `/api/sandboxes/${sb.name}/registry`, sb.user.token)).body;
  const scanned = await eventually(async () => {
    const v = (await report(t)).images?.find((i: { name: string }) => i.name === repo)?.versions[0];
    return v && !['pending', 'scanning'].includes(v.scan.state) ? v : undefined;
  }, 'the scan', 60_000, 250);

  // while the service runs, and the sandbox with it
  const withKey = path.join(dir, 'with-key.svcbackup');
  const withoutKey = path.join(dir, 'without-key.svcbackup');
  const made = await svc(['backup', withKey, '--with-secret-key'], envOf(t.config));
  assert.equal(made.code, 0, made.stderr);
  assert.match(made.stdout, /WITH the secret key/);
  assert.equal((await svc(['backup', withoutKey], envOf(t.config))).code, 0);
  assert.equal(fs.statSync(withKey).mode & 0o777, 0o600);
  assert.equal((await sb.record()).status, 'running');

  // without the key, onto a machine that does not have it: refused, nothing written
  const bare = { dataDir: path.join(dir, 'bare'), storeUrl: `sqlite://${path.join(dir, 'bare', 'svc.sqlite')}`, storeTable: 'svc_store', secretKeyFile: path.join(dir, 'bare-etc', 'secret.key') };
  const refused = await svc(['restore', withoutKey], envOf(bare));
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /the secret key is missing: this backup was made without --with-secret-key.*Nothing was restored/);
  assert.ok(!fs.existsSync(path.join(dir, 'bare', 'svc.sqlite')) && !fs.existsSync(bare.secretKeyFile), 'nothing written');

  // with the key: a new data folder and SQLite file; it says the registry blobs are still to copy
  const fresh = { dataDir: path.join(dir, 'fresh'), storeUrl: `sqlite://${path.join(dir, 'fresh', 'svc.sqlite')}`, storeTable: 'svc_store', secretKeyFile: path.join(dir, 'fresh-etc', 'secret.key') };
  const restored = await svc(['restore', withKey], envOf(fresh));
  assert.equal(restored.code, 0, restored.stderr);
  assert.match(restored.stdout, /^restored \d+ records \(1 users, 1 sandboxes\)/m);
  assert.match(restored.stderr, /^missing: registry blobs: 1 image versions are recorded/m);
  assert.equal(fs.statSync(fresh.secretKeyFile).mode & 0o777, 0o600);
  assert.equal((await svc(['restore', withKey], envOf(fresh))).code, 1, 'a second restore into the same store is refused');
  // the operator copies what the message names
  fs.cpSync(path.join(t.config.dataDir, 'registry', 'storage'), path.join(fresh.dataDir, 'registry', 'storage'), { recursive: true });

  const moved = await startTestService({ ...fresh, httpsPort: await freePort() });
  const cli = new EngineCli(record.engine_access.host, '127.0.0.1', moved.config.httpsPort, record);
  try {
    assert.notEqual(moved.config.redisPrefix, t.config.redisPrefix);
    const listed = await moved.api('GET', '/api/sandboxes', sb.user.token);
    assert.equal(listed.status, 200, answerOf(listed));
    assert.deepEqual(listed.body.map((s: { name: string; status: string }) => [s.name, s.status]), [[sb.name, 'running']]);
    assert.equal((await moved.api('GET', '/ca.pem', undefined)).body, fs.readFileSync(sb.ca, 'utf8'), 'the same service CA');
    // the engine certificates issued before the backup, through the new service's edge
    const { stdout } = await cli.docker(['info', '--format', '{{.ServerVersion}}']);
    assert.match(stdout.trim(), /^\d+\.\d+/);
    const kept = (await report(moved)).images.find((i: { name: string }) => i.name === repo);
    assert.equal(kept.versions[0].digest, scanned.digest);
    assert.equal(kept.versions[0].scan.state, scanned.scan.state);
    const pull = await oci.withAuth(OciClient.basic(sb.user.token)).request('GET', `/v2/${repo}/manifests/v1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } });
    assert.equal(pull.status, 200, 'pulled through the old service (the blobs were copied for the new one)');
    const movedOci = new OciClient({ port: moved.config.httpsPort, host: `registry.${t.config.domain}`, ca: fs.readFileSync(sb.ca, 'utf8') }).withAuth(OciClient.basic(sb.user.token));
    assert.equal((await movedOci.request('GET', `/v2/${repo}/manifests/v1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).status, 200, 'pulled through the new service');
  } finally {
    cli.dispose();
    await moved.close();
  }
});

test('a backup restores into PostgreSQL with the key file already in place, and never over records', async () => {
  const file = path.join(dir, 'to-postgres.svcbackup');
  assert.equal((await svc(['backup', file], envOf(t.config))).code, 0);
  const table = `svc_restore_${randomBytes(4).toString('hex')}`;
  const target = { dataDir: path.join(dir, 'pg'), storeUrl: POSTGRES_URL, storeTable: table, secretKeyFile: t.config.secretKeyFile };
  try {
    const restored = await svc(['restore', file], envOf(target));
    assert.equal(restored.code, 0, restored.stderr);
    const store = await openStore(POSTGRES_URL, { table, secretKeyFile: t.config.secretKeyFile });
    try {
      const sandbox = await store.sandboxes.get(sb.name);
      assert.equal(sandbox?.certs?.client_cert, (await sb.record()).client_cert);
      assert.ok(sandbox?.certs?.client_key?.includes('PRIVATE KEY'), 'the engine key opens with the key file');
    } finally {
      await store.close();
    }
    const again = await svc(['restore', file], envOf(target));
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already holds \d+ records: restore only into an empty store.*nothing was restored/);
  } finally {
    await destroyStore(await openStore(POSTGRES_URL, { table, secretKeyFile: t.config.secretKeyFile }));
  }
});

test("a restore with another service's key removes what it wrote and says so", async () => {
  const file = path.join(dir, 'other-key.svcbackup');
  assert.equal((await svc(['backup', file], envOf(t.config))).code, 0);
  const otherKey = path.join(dir, 'other-etc', 'secret.key');
  fs.mkdirSync(path.dirname(otherKey), { recursive: true });
  fs.writeFileSync(otherKey, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
  const target = { dataDir: path.join(dir, 'other'), storeUrl: `sqlite://${path.join(dir, 'other', 'svc.sqlite')}`, storeTable: 'svc_store', secretKeyFile: otherKey };
  const wrong = await svc(['restore', file], envOf(target));
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderr, /does not open the backup's sealed secrets.*it is not the key of the service that made the backup.*nothing was restored/);
  const store = await openStore(target.storeUrl, { table: 'svc_store', secretKeyFile: otherKey });
  try {
    assert.deepEqual(await store.users.list(), []);
    assert.deepEqual(await store.sandboxes.listAll(), []);
  } finally {
    await store.close();
  }
});
