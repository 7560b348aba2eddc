import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';

/** Sessions end this long after sign-in, whatever the activity (a browser tab left open overnight is signed out). */
export const SESSION_TTL_MS = 12 * 3_600_000;
const ID_FORMAT = /^[A-Za-z0-9_-]{43}$/;

export interface WebSession {
  userId: string;
  /** Sent back by the page in X-CSRF-Token on every change; never in a cookie. */
  csrf: string;
  createdAt: number;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * Web UI sessions in Redis, shared by every process. The cookie carries 32 random bytes; Redis
 * keeps only their sha256 (a read of Redis does not give away live sessions), and a set per user
 * so a password change can end the user's other sessions.
 */
export class WebSessions {
  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly ttlMs = SESSION_TTL_MS) {}

  private key(idHash: string): string { return `${this.prefix}:websession:${idHash}`; }
  private userKey(userId: string): string { return `${this.prefix}:websessions:${userId}`; }

  /** A new session; `id` goes into the cookie and nowhere else. */
  async create(userId: string): Promise<{ id: string; session: WebSession }> {
    const id = randomBytes(32).toString('base64url');
    const session: WebSession = { userId, csrf: randomBytes(32).toString('base64url'), createdAt: Date.now() };
    const idHash = sha256(id);
    await this.redis.multi()
      .set(this.key(idHash), JSON.stringify(session), 'PX', this.ttlMs)
      .sadd(this.userKey(userId), idHash)
      .pexpire(this.userKey(userId), this.ttlMs)
      .exec();
    return { id, session };
  }

  /** The live session behind a cookie value, or null (unknown, expired, ended, malformed). */
  async get(id: string): Promise<WebSession | null> {
    if (!ID_FORMAT.test(id)) return null;
    const raw = await this.redis.get(this.key(sha256(id)));
    return raw ? (JSON.parse(raw) as WebSession) : null;
  }

  async end(id: string): Promise<void> {
    if (!ID_FORMAT.test(id)) return;
    const idHash = sha256(id);
    const raw = await this.redis.get(this.key(idHash));
    await this.redis.del(this.key(idHash));
    if (raw) await this.redis.srem(this.userKey((JSON.parse(raw) as WebSession).userId), idHash);
  }

  /** Ends every session of the user except `keepId` (a password change keeps the one that made it). */
  async endOthers(userId: string, keepId?: string): Promise<number> {
    const keep = keepId ? sha256(keepId) : undefined;
    const hashes = (await this.redis.smembers(this.userKey(userId))).filter((h) => h !== keep);
    if (hashes.length === 0) return 0;
    await this.redis.multi().del(...hashes.map((h) => this.key(h))).srem(this.userKey(userId), ...hashes).exec();
    return hashes.length;
  }
}

/** Constant-time comparison of the page's CSRF header with the session's token. */
export function csrfMatches(session: WebSession, header: string | undefined): boolean {
  if (typeof header !== 'string') return false;
  const a = Buffer.from(session.csrf);
  const b = Buffer.from(header);
  return a.length === b.length && timingSafeEqual(a, b);
}
