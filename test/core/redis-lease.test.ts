import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { loadConfig } from '../../core/config.ts';
import { RedisLeases } from '../../core/redis-lease.ts';
import { createRedis } from '../../queue/connection.ts';
import { freePort } from '../../harness/ports.ts';

/**
 * The lease on a real Redis: two service processes are two RedisLeases on two
 * connections. Order is checked, never timing.
 */
describe('sandbox lease (one transition at a time across processes)', () => {
  const prefix = `lease${randomBytes(3).toString('hex')}`;
  const connections: Redis[] = [];
  const leases = () => {
    const redis = createRedis(loadConfig().redisUrl);
    connections.push(redis);
    return new RedisLeases(redis, `${prefix}:lease`);
  };
  after(async () => {
    const [redis] = connections;
    const keys = await redis!.keys(`${prefix}:*`);
    if (keys.length) await redis!.del(...keys);
    for (const c of connections) c.disconnect();
  });

  it('runs the second process\'s transition only after the first one\'s ended', async () => {
    const [a, b] = [leases(), leases()];
    const log: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => { entered = resolve; });
    const first = a.hold('sb', async () => {
      log.push('a in');
      entered();
      await held;
      log.push('a out');
    });
    await inside;
    const second = b.hold('sb', async () => { log.push('b in'); });
    const other = b.hold('another', async () => { log.push('another sandbox in'); });
    await other; // a different sandbox is not held up
    assert.deepEqual(log, ['a in', 'another sandbox in']);
    release();
    await Promise.all([first, second]);
    assert.deepEqual(log, ['a in', 'another sandbox in', 'a out', 'b in']);
  });

  it('a holder that died (never released) holds the sandbox only until its lease expires', async () => {
    const redis = connections[0] ?? createRedis(loadConfig().redisUrl);
    await redis.set(`${prefix}:lease:orphan`, 'a killed process', 'PX', 1_000);
    let ran = false;
    await leases().hold('orphan', async () => { ran = true; });
    assert.ok(ran);
    assert.equal(await redis.get(`${prefix}:lease:orphan`), null, 'released after the work');
  });

  it('a Redis that does not answer fails the transition instead of hanging it', async () => {
    const port = await freePort(); // nothing listens: the client keeps reconnecting, commands wait
    const redis = createRedis(`redis://127.0.0.1:${port}`);
    redis.on('error', () => undefined);
    try {
      await assert.rejects(new RedisLeases(redis, `${prefix}:lease`).hold('sb', async () => undefined), /Redis did not answer/);
    } finally {
      redis.disconnect();
    }
  });
});
