import { Redis } from 'ioredis';
import type { Logger } from '../core/logger.ts';

/**
 * What one process (a service process, or `svc` on the command line) tells every service process of
 * a change it made in the store that they act on or keep a copy of, on `<prefix>:lifecycle:news`.
 * Pub/sub is best-effort: a process that missed a message learns the change at its next reconcile
 * pass (a disabled owner's running sandboxes), as before the news.
 */
export type LifecycleNewsItem =
  /** The account was disabled: its running sandboxes go to sleep. */
  | { op: 'owner-disabled'; owner: string }
  /**
   * The sandbox was moved to another host by another process (`svc hosts move`, `evacuate`): the
   * runtime learns where it is now (what it last saw of it would otherwise name the old host, taken
   * for the sandbox's when that host is lost).
   */
  | { op: 'sandbox-moved'; sandbox: string; host: string };

export interface LifecycleNewsHandlers {
  ownerDisabled(ownerId: string): void;
  sandboxMoved(sandbox: string, host: string): void;
}

const channel = (prefix: string) => `${prefix}:lifecycle:news`;

/** Tells every service process over `redis`. */
async function tellNews(redis: Redis, prefix: string, news: LifecycleNewsItem): Promise<void> {
  await redis.publish(channel(prefix), JSON.stringify(news));
}

/** The same from a short-lived process without a connection of its own (the command line): one connection for one message. */
export async function tellNewsOnce(redisUrl: string, prefix: string, news: LifecycleNewsItem): Promise<void> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  redis.on('error', () => undefined); // the publish below rejects with the reason
  try {
    await redis.connect();
    await tellNews(redis, prefix, news);
  } finally {
    redis.disconnect();
  }
}

/** A message as sent: anything else on the channel (another version, garbage) is dropped. */
function parse(message: string): LifecycleNewsItem | undefined {
  try {
    const news = JSON.parse(message) as Partial<LifecycleNewsItem> & Record<string, unknown>;
    if (news.op === 'owner-disabled' && typeof news.owner === 'string') return { op: 'owner-disabled', owner: news.owner };
    if (news.op === 'sandbox-moved' && typeof news.sandbox === 'string' && typeof news.host === 'string') return { op: 'sandbox-moved', sandbox: news.sandbox, host: news.host };
  } catch {
    // not JSON
  }
  return undefined;
}

/** A service process's ear on the channel: each message goes to its handler as it comes. */
export class LifecycleNews {
  private subscriber?: Redis;

  constructor(private readonly redis: Redis, private readonly prefix: string, private readonly log: Logger) {}

  async listen(handlers: LifecycleNewsHandlers): Promise<void> {
    const subscriber = this.redis.duplicate();
    this.subscriber = subscriber;
    subscriber.on('error', () => undefined); // ioredis reconnects by itself
    subscriber.on('message', (_channel: string, message: string) => {
      const news = parse(message);
      if (!news) return;
      this.log.debug({ news }, 'lifecycle news');
      if (news.op === 'owner-disabled') handlers.ownerDisabled(news.owner);
      else handlers.sandboxMoved(news.sandbox, news.host);
    });
    await subscriber.subscribe(channel(this.prefix));
  }

  async close(): Promise<void> {
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    if (subscriber) await subscriber.quit().catch(() => subscriber.disconnect());
  }
}
