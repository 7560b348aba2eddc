import type { Redis } from 'ioredis';

/** An idle session: the sandbox sleeps at `expiresAt` unless renewed; `timerAt` is the pending idle-check job. */
export interface IdleSession {
  expiresAt: number;
  timerAt: number;
}

/**
 * Idle sessions persisted in Redis (spec 3, rule 4): a restarted controller finds them as they
 * were and never puts a running sandbox to sleep early.
 */
export class IdleSessions {
  constructor(private readonly redis: Redis, private readonly prefix: string) {}

  private key(sandbox: string): string {
    return `${this.prefix}:session:${sandbox}`;
  }

  async get(sandbox: string): Promise<IdleSession | null> {
    const raw = await this.redis.hgetall(this.key(sandbox));
    if (!raw.expiresAt) return null;
    return { expiresAt: Number(raw.expiresAt), timerAt: Number(raw.timerAt ?? 0) };
  }

  async set(sandbox: string, session: IdleSession): Promise<void> {
    await this.redis.hset(this.key(sandbox), { expiresAt: session.expiresAt, timerAt: session.timerAt });
  }

  async close(sandbox: string): Promise<void> {
    await this.redis.del(this.key(sandbox));
  }
}
