import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { Admission } from '../../accounts/admission.ts';
import { createUser } from '../../accounts/index.ts';
import { quotaDefaults } from '../../accounts/quotas.ts';
import { loadConfig, type Config } from '../../core/config.ts';
import { RedisLeases } from '../../core/redis-lease.ts';
import { removeInstance } from '../../harness/service.ts';
import { TEST_SECRET_KEY_FILE } from '../../harness/secret-key.ts';
import { AppDirectory } from '../../lifecycle/apps/app-directory.ts';
import { IdleSessions, Lifecycle, SshKeyMarks } from '../../lifecycle/index.ts';
import { createRedis, LifecycleQueue } from '../../queue/index.ts';
import { openStore, type Store } from '../../store/index.ts';
import type { UserRecord } from '../../store/records.ts';
import { MemoryRuntime } from './memory-runtime.ts';

export interface MemoryLifecycle {
  lifecycle: Lifecycle;
  admission: Admission;
  runtime: MemoryRuntime;
  sessions: IdleSessions;
  queue: LifecycleQueue;
  store: Store;
  config: Config;
  owner: UserRecord;
  close(): Promise<void>;
}

/**
 * The state machine as service.ts builds it, on the real Redis (a key prefix of its own) and a real
 * SQLite store, with the in-memory runtime in place of an engine. No queue worker runs: a test fires
 * the timers itself (onIdleCheck, onDeepSleep) and reads the jobs they leave.
 */
export async function memoryLifecycle(): Promise<MemoryLifecycle> {
  const id = `svct${randomBytes(3).toString('hex')}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${id}-`));
  const config: Config = {
    ...loadConfig({ SVC_DATA_DIR: path.join(dir, 'data'), SVC_ARCHIVE_DIR: path.join(dir, 'shared-archive') }),
    secretKeyFile: TEST_SECRET_KEY_FILE,
    redisPrefix: id,
  };
  const logger = pino({ level: 'silent' });
  const redis = createRedis(config.redisUrl);
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
  const runtime = new MemoryRuntime();
  const sessions = new IdleSessions(redis, id);
  const leases = new RedisLeases(redis, `${id}:lease`);
  const queue = new LifecycleQueue(redis, id);
  const apps = new AppDirectory(redis, id, logger, async () => '', async (name) => (await store.sandboxes.get(name)) !== undefined);
  await apps.start();
  const admission = new Admission({
    store, redis, leases, prefix: id,
    defaults: quotaDefaults(config),
    host: async () => ({ memoryMb: 1 << 20, cpus: 1024, hosts: 1, overcommitMemory: 1, overcommitCpus: 1 }),
    stopsAt: async (sandbox) => (await sessions.get(sandbox))?.expiresAt,
  });
  const lifecycle = new Lifecycle({ config, store, runtime, sessions, sshKeyMarks: new SshKeyMarks(redis, id), leases, queue, apps, logger, admission });
  const { user: owner } = await createUser(store, { name: `owner-${id}` });
  return {
    lifecycle, admission, runtime, sessions, queue, store, config, owner,
    async close() {
      await apps.close();
      await queue.close();
      await store.close();
      redis.disconnect();
      await removeInstance(id);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
