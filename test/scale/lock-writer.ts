/**
 * One service process's writes for locks.test.ts, in a process of its own. Args: mode url table
 * redisUrl redisPrefix userId writer count startAtMs. Each write is a read-modify-write with a pause
 * between the read and the write, so writers that are not serialised lose each other's changes:
 * - `accounts`: adds an SSH key to one user through accounts' updateUser (the store's lock);
 * - `catalog`: adds a blob to one repository record inside Catalog.withRepo (the registry's lock).
 */
import { updateUser } from '../../accounts/index.ts';
import { logger } from '../../core/logger.ts';
import { RedisLeases } from '../../core/redis-lease.ts';
import { createRedis } from '../../queue/connection.ts';
import { Catalog } from '../../registry/index.ts';
import { openStore } from '../../store/index.ts';
import { TEST_SECRET_KEY_FILE } from '../store/helpers.ts';

const [mode, url, table, redisUrl, prefix, userId, writer, countText, startAtText] = process.argv.slice(2);
const store = await openStore(url!, { table: table!, secretKeyFile: TEST_SECRET_KEY_FILE });
const redis = createRedis(redisUrl!);
const catalog = new Catalog(store, logger, new RedisLeases(redis, `${prefix}:repo-lease`));
const pause = () => new Promise((r) => setTimeout(r, 3 + Math.random() * 5));
const wait = Number(startAtText) - Date.now();
if (wait > 0) await new Promise((r) => setTimeout(r, wait));
try {
  await Promise.all(Array.from({ length: Number(countText) }, async (_, i) => {
    const item = `${writer}-${i}`;
    if (mode === 'accounts') {
      await updateUser(store, userId!, async (u) => {
        await pause();
        return { ...u, ssh_keys: [...u.ssh_keys, { id: item, key: `ssh-ed25519 AAAA ${item}`, fingerprint: item, created_at: new Date().toISOString() }] };
      });
    } else {
      await catalog.withRepo('scale/locks', async () => {
        const repo = await store.registry.getRepo('scale/locks');
        await pause();
        await store.registry.putRepo({ ...repo!, blobs: [...repo!.blobs, item] });
      });
    }
  }));
} finally {
  redis.disconnect();
  await store.close();
}
