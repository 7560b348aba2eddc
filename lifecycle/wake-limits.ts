import type { Redis } from 'ioredis';
import { errors } from '../core/errors.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import type { UserRecord } from '../store/index.ts';

const HOUR_MS = 3_600_000;

/**
 * The owner's wake limit (spec 3: app traffic wakes a sandbox "within the owner's wake limits"):
 * at most the owner's `wakes_per_hour` quota of wakes by app traffic per clock hour, counted in
 * Redis so every process of the service shares the count. Explicit starts through the API are not limited.
 */
export class WakeLimits {
  /** `perHour`: the owner's wakes_per_hour quota (accounts/quotas.ts), from the record the caller read. */
  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly perHour: (owner: UserRecord) => number, private readonly metrics?: ServiceMetrics) {}

  private key(ownerId: string, hour: number): string {
    return `${this.prefix}:wakes:${ownerId}:${hour}`;
  }

  async take(owner: UserRecord): Promise<void> {
    const hour = Math.floor(Date.now() / HOUR_MS);
    const key = this.key(owner.id, hour);
    const [[, count]] = (await this.redis.multi().incr(key).pexpire(key, HOUR_MS).exec()) as [[unknown, number]];
    const limit = this.perHour(owner);
    if (count > limit) {
      this.metrics?.wakeLimitHit();
      throw new errors.TooManyWakes(((hour + 1) * HOUR_MS - Date.now()) / 1000, limit);
    }
  }

  /** Wakes by app traffic in this clock hour. */
  async used(ownerId: string): Promise<number> {
    return Number(await this.redis.get(this.key(ownerId, Math.floor(Date.now() / HOUR_MS)))) || 0;
  }
}
