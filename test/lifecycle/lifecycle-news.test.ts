import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { eventually } from '../../harness/service.ts';
import { LifecycleNews, tellNewsOnce } from '../../lifecycle/index.ts';

/**
 * The lifecycle news over the service's Redis (lifecycle/lifecycle-news.ts): what a command-line
 * process tells (a user disabled, a sandbox moved) reaches a listening service process's handlers as
 * sent; anything else on the channel is dropped. The whole way, service and CLI, is in
 * test/lifecycle/owner-disabled.test.ts and the Incus cluster suite's move case.
 */
describe('lifecycle news', () => {
  const { redisUrl } = loadConfig();
  const prefix = `news-${randomBytes(3).toString('hex')}`;
  let redis: Redis;
  let news: LifecycleNews;
  const heard: string[] = [];

  before(async () => {
    redis = new Redis(redisUrl);
    news = new LifecycleNews(redis, prefix, pino({ level: 'silent' }));
    await news.listen({
      ownerDisabled: (owner) => heard.push(`disabled ${owner}`),
      sandboxMoved: (sandbox, host) => heard.push(`moved ${sandbox} ${host}`),
    });
  });
  after(async () => {
    await news.close();
    redis.disconnect();
  });

  it('hands a sandbox-moved and an owner-disabled message to their handlers, in order; garbage and unknown messages are dropped', async () => {
    await redis.publish(`${prefix}:lifecycle:news`, 'not json');
    await redis.publish(`${prefix}:lifecycle:news`, JSON.stringify({ op: 'sandbox-moved', sandbox: 'svc-a' })); // no host
    await redis.publish(`${prefix}:lifecycle:news`, JSON.stringify({ op: 'something-else', sandbox: 'svc-a', host: 'm1' }));
    await tellNewsOnce(redisUrl, prefix, { op: 'sandbox-moved', sandbox: 'svc-a', host: 'm2' });
    await tellNewsOnce(redisUrl, prefix, { op: 'owner-disabled', owner: 'u-1' });
    await eventually(async () => heard.length >= 2, 'two messages heard', 10_000, 50);
    assert.deepEqual(heard, ['moved svc-a m2', 'disabled u-1']);
  });
});
