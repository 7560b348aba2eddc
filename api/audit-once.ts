import type { Redis } from 'ioredis';

/**
 * Says whether a repeated audit action is the first of its key within a window, across every
 * service process on one Redis (SET NX PX under the service's prefix): a read that a page polls
 * (the UI asks for a waking sandbox every 2 s) is one row per window, not one per answer.
 */
export class AuditOnce {
  constructor(private readonly redis: Redis, private readonly prefix: string) {}

  /** True for the first call of `key` in `windowMs` (write the row), false for the repeats. */
  async first(key: string, windowMs: number): Promise<boolean> {
    return (await this.redis.set(`${this.prefix}:audit-once:${key}`, '1', 'PX', windowMs, 'NX')) === 'OK';
  }
}
