import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { CrossProcessLock } from './keyed-lock.ts';

/** A lease lives this long unless renewed: a killed holder blocks its keys at most this long. */
const LEASE_TTL_MS = 10_000;
const RENEW_EVERY_MS = 2_500;
const RETRY_EVERY_MS = 50;
/** A holder waits this long for another process's; longer means that process is stuck. */
const ACQUIRE_TIMEOUT_MS = 120_000;
/** One Redis answer; a Redis that does not answer fails the work rather than hanging it. */
const REDIS_ANSWER_MS = 5_000;

/** Deletes the lease only if this holder still owns it (it may have expired and gone to another). */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;
const RENEW = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;

/** A lease this process took without waiting (`RedisLeases.tryTake`), renewed until released or lost. */
export interface HeldLease {
  release(): Promise<void>;
}

/**
 * Leases in Redis under `<namespace>:<key>`, one holder across every service process on one Redis:
 * SET NX PX, renewed while held; a holder that dies leaves it to expire. `hold` waits for its keys
 * (one transition of a sandbox at a time; one change of a registry repository at a time);
 * `tryTake` takes one or says no (one engine watcher per sandbox).
 */
export class RedisLeases implements CrossProcessLock {
  constructor(private readonly redis: Redis, readonly namespace: string) {}

  async hold<T>(keys: string | readonly string[], work: () => Promise<T>): Promise<T> {
    const sorted = [...new Set(typeof keys === 'string' ? [keys] : keys)].sort();
    const token = randomBytes(12).toString('hex');
    const taken: string[] = [];
    const deadline = Date.now() + ACQUIRE_TIMEOUT_MS;
    let renew: NodeJS.Timeout | undefined;
    try {
      for (const key of sorted) {
        const full = `${this.namespace}:${key}`;
        while ((await answer(this.redis.set(full, token, 'PX', LEASE_TTL_MS, 'NX'))) !== 'OK') {
          if (Date.now() > deadline) throw new Error(`"${key}" is busy in another service process; try again`);
          await new Promise((r) => setTimeout(r, RETRY_EVERY_MS));
        }
        taken.push(full);
      }
      renew = setInterval(() => {
        for (const full of taken) void this.redis.eval(RENEW, 1, full, token, LEASE_TTL_MS).catch(() => undefined);
      }, RENEW_EVERY_MS);
      return await work();
    } finally {
      clearInterval(renew);
      // else they expire
      await Promise.all(taken.map((full) => answer(this.redis.eval(RELEASE, 1, full, token)).catch(() => undefined)));
    }
  }

  /**
   * Takes the lease on `key` if nobody holds it, and keeps renewing it. `onLost` runs once if a
   * renewal finds it gone (Redis lost it, or this process stalled past the TTL and another took it).
   */
  async tryTake(key: string, onLost: () => void): Promise<HeldLease | undefined> {
    const full = `${this.namespace}:${key}`;
    const token = randomBytes(12).toString('hex');
    if ((await answer(this.redis.set(full, token, 'PX', LEASE_TTL_MS, 'NX'))) !== 'OK') return undefined;
    let released = false;
    const renew = setInterval(() => {
      void answer(this.redis.eval(RENEW, 1, full, token, LEASE_TTL_MS)).then(
        (kept) => {
          if (kept === 1 || released) return;
          released = true;
          clearInterval(renew);
          onLost();
        },
        () => undefined, // Redis away: try again; the lease outlives a few missed renewals
      );
    }, RENEW_EVERY_MS);
    return {
      // No answer timer: a release at shutdown leaves nothing armed behind (if Redis is away, the lease expires).
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(renew);
        await this.redis.eval(RELEASE, 1, full, token).catch(() => undefined);
      },
    };
  }
}

function answer<T>(command: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Redis did not answer within ${REDIS_ANSWER_MS} ms`)), REDIS_ANSWER_MS);
  });
  return Promise.race([command, timeout]).finally(() => clearTimeout(timer));
}
