import assert from 'node:assert/strict';
import { test } from 'node:test';
import Docker from 'dockerode';
import { Redis } from 'ioredis';
import { loadConfig } from '../../core/config.ts';
import { logger } from '../../core/logger.ts';
import { AppDirectory } from '../../lifecycle/apps/app-directory.ts';
import { freePort } from '../../harness/ports.ts';

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('app watchers: a stopped watcher and a closed directory arm no timer, whatever is still in flight', async () => {
  const redis = new Redis(loadConfig().redisUrl, { lazyConnect: true });
  // an engine that refuses every connection: the watcher's subscribe loop retries on it
  const engine = new Docker({ host: '127.0.0.1', port: await freePort(), protocol: 'http' });
  const apps = new AppDirectory(redis, `svct-close-${process.pid}`, logger.child({}, { level: 'silent' }), async () => '', async () => false);
  const before = timers();

  apps.watch('svc-a', engine);
  await new Promise((r) => setTimeout(r, 300)); // the first subscribe failed and armed its retry
  assert.ok(timers() > before, 'the watcher retries a refused engine');

  apps.close();
  assert.equal(timers(), before, 'close clears the retry timer');

  // a wake or reconcile pass that was in flight when the service closed
  apps.watch('svc-b', engine);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(timers(), before, 'no watcher starts after close');
  assert.equal(apps.isWatching('svc-b'), false);
  redis.disconnect();
});
