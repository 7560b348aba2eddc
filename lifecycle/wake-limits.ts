import type { Redis } from 'ioredis';
import { errors } from '../core/errors.ts';

const HOUR_MS = 3_600_000;

/**
 * The owner's wake limit (spec 3: app traffic wakes a sandbox "within the owner's wake limits"):
 * at most `perHour` wakes by app traffic per owner per clock hour, counted in Redis so every
 * process of the service shares the count. Explicit starts through the API are not limited.
 */
export class WakeLimits {
  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly perHour: number) {}

  async take(ownerId: string): Promise<void> {
    const hour = Math.floor(Date.now() / HOUR_MS);
    const key = `${this.prefix}:wakes:${ownerId}:${hour}`;
    const [[, count]] = (await this.redis.multi().incr(key).pexpire(key, HOUR_MS).exec()) as [[unknown, number]];
    if (count > this.perHour) {
      const err = new errors.TooManyWakes(String(this.perHour)) as Error & { retryAfter?: number };
      err.retryAfter = Math.ceil(((hour + 1) * HOUR_MS - Date.now()) / 1000);
      throw err;
    }
  }
}
