import { Redis } from 'ioredis';

/**
 * A Redis connection as BullMQ wants it: workers block on Redis, so commands must wait for a
 * reconnect instead of failing after a few retries.
 */
export function createRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false });
}
