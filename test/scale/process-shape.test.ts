import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../../core/config.ts';
import { destroyStore, openStore } from '../../store/index.ts';
import { freePort } from '../../harness/ports.ts';
import { removeInstance } from '../../harness/service.ts';
import { POSTGRES_URL, TEST_SECRET_KEY_FILE } from '../store/helpers.ts';
import { ServiceProcess, type ServiceEnv } from '../faults/harness.ts';

/**
 * A service process refuses to start beside another on the same Redis prefix when the two cannot
 * share their state (issue 19), and says what to set: a SQLite store or a spawned registry lives
 * in one data folder.
 */
describe('a second process in a shape that cannot work refuses to start', () => {
  const prefix = `svcp${randomBytes(3).toString('hex')}`;
  const table = `svc_shape_${randomBytes(4).toString('hex')}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  const running: ServiceProcess[] = [];
  const env = async (n: number, extraEnv: Record<string, string> = {}): Promise<ServiceEnv> => ({
    dataDir: path.join(dir, `data${n}`), redisUrl: loadConfig().redisUrl, prefix, httpsPort: await freePort(), apiPort: await freePort(), secretKeyFile: TEST_SECRET_KEY_FILE, extraEnv,
  });
  after(async () => {
    await Promise.all(running.map((s) => s.terminate(25_000)));
    await removeInstance(prefix);
    await destroyStore(await openStore(POSTGRES_URL, { table, secretKeyFile: TEST_SECRET_KEY_FILE }));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('names SVC_STORE_URL beside a SQLite process on another data folder, then SVC_REGISTRY_UPSTREAM beside a spawned registry', async () => {
    const first = new ServiceProcess(await env(1));
    running.push(first);
    await first.start();
    await assert.rejects(new ServiceProcess(await env(2)).start(), /SQLite[\s\S]*set SVC_STORE_URL=postgres/);
    await first.terminate(25_000);

    const onPostgres = { SVC_STORE_URL: POSTGRES_URL, SVC_STORE_TABLE: table };
    const second = new ServiceProcess(await env(3, onPostgres));
    running.push(second);
    await second.start();
    await assert.rejects(new ServiceProcess(await env(4, onPostgres)).start(), /spawns its registry[\s\S]*set SVC_REGISTRY_UPSTREAM/);
    // the same data folder is one store and one registry: a second process there is fine
    const beside = new ServiceProcess({ ...(await env(3, onPostgres)) });
    running.push(beside);
    await beside.start();
  });
});
