import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';

/** A lease lives this long unless renewed: a killed holder blocks the sandbox at most this long. */
const LEASE_TTL_MS = 10_000;
const RENEW_EVERY_MS = 2_500;
const RETRY_EVERY_MS = 50;
/** A transition waits this long for another process's; longer means that process is stuck. */
const ACQUIRE_TIMEOUT_MS = 120_000;
/** One Redis answer; a Redis that does not answer fails the transition rather than hanging it. */
const REDIS_ANSWER_MS = 5_000;

/** Deletes the lease only if this holder still owns it (it may have expired and gone to another). */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;
const RENEW = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;

/**
 * One transition of a sandbox at a time across every service process on one Redis (two processes
 * waking the same sandbox from deep sleep would both create its container). The in-process
 * KeyedLock orders waiters inside a process; this lease orders the processes. Renewed while held;
 * a holder that dies leaves it to expire.
 */
export class SandboxLeases {
  constructor(private readonly redis: Redis, private readonly prefix: string) {}

  async hold<T>(sandbox: string, work: () => Promise<T>): Promise<T> {
    const key = `${this.prefix}:lease:${sandbox}`;
    const token = randomBytes(12).toString('hex');
    const deadline = Date.now() + ACQUIRE_TIMEOUT_MS;
    while ((await answer(this.redis.set(key, token, 'PX', LEASE_TTL_MS, 'NX'))) !== 'OK') {
      if (Date.now() > deadline) throw new Error(`sandbox "${sandbox}" is busy in another service process; try again`);
      await new Promise((r) => setTimeout(r, RETRY_EVERY_MS));
    }
    const renew = setInterval(() => void this.redis.eval(RENEW, 1, key, token, LEASE_TTL_MS).catch(() => undefined), RENEW_EVERY_MS);
    try {
      return await work();
    } finally {
      clearInterval(renew);
      await answer(this.redis.eval(RELEASE, 1, key, token)).catch(() => undefined); // else it expires
    }
  }
}

function answer<T>(command: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Redis did not answer within ${REDIS_ANSWER_MS} ms`)), REDIS_ANSWER_MS);
  });
  return Promise.race([command, timeout]).finally(() => clearTimeout(timer));
}
