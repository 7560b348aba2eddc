import type { Redis } from 'ioredis';
import { errors } from '../core/errors.ts';

/** Failures allowed before each further try must wait; the wait doubles per failure up to MAX_WAIT_S. */
const FREE_FAILURES = 5;
const MAX_WAIT_S = 60;
/** Failures are forgotten after this long without another. */
const FORGET_MS = 15 * 60_000;
/** scrypt checks at once (each ~100 ms and 32 MiB); more wait in line, beyond the line: 503. */
const CHECKS_AT_ONCE = 2;
const MAX_WAITING = 32;

/**
 * Guards password checks (web sign-in, password change): after repeated failures for a name or
 * from an address, each further try is refused (429, Retry-After) until a growing wait has passed,
 * without looking at the password, so guessing gets slow. Counts live in Redis (every process of
 * the service shares them). At most CHECKS_AT_ONCE hashes are checked at once per process.
 */
export class SignInGuard {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly redis: Redis, private readonly prefix: string) {}

  private keys(name: string, ip: string): string[] {
    return [`${this.prefix}:signin:name:${name.toLowerCase().slice(0, 100)}`, `${this.prefix}:signin:ip:${ip}`];
  }

  /** Runs `check` (true = right password) unless the name or address must wait; counts failures. */
  async attempt<T>(name: string, ip: string, check: () => Promise<T | undefined>): Promise<T | undefined> {
    const keys = this.keys(name, ip);
    const blocked = await Promise.all(keys.map((k) => this.redis.pttl(`${k}:wait`)));
    const waitMs = Math.max(...blocked);
    if (waitMs > 0) {
      const waitS = Math.ceil(waitMs / 1000);
      throw new errors.TooManyRequests(waitS, `too many failed sign-ins; wait ${waitS} s and try again`);
    }
    const result = await this.limited(check);
    if (result !== undefined) {
      await this.redis.del(...keys, ...keys.map((k) => `${k}:wait`));
      return result;
    }
    for (const key of keys) {
      const [[, failures]] = (await this.redis.multi().incr(key).pexpire(key, FORGET_MS).exec()) as [[unknown, number]];
      if (failures >= FREE_FAILURES) {
        const wait = Math.min(2 ** (failures - FREE_FAILURES), MAX_WAIT_S);
        await this.redis.set(`${key}:wait`, '1', 'PX', wait * 1000);
      }
    }
    return undefined;
  }

  private async limited<T>(check: () => Promise<T>): Promise<T> {
    if (this.running >= CHECKS_AT_ONCE) {
      if (this.waiting.length >= MAX_WAITING) {
        throw new errors.Busy(1, 'too many sign-ins at once; try again in a moment');
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running++;
    }
    try {
      return await check();
    } finally {
      const next = this.waiting.shift();
      if (next) next(); // hands its slot on: `running` stays
      else this.running--;
    }
  }
}
