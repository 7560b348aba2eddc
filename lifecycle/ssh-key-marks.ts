import type { Redis } from 'ioredis';

/**
 * Sandboxes whose root authorized_keys may still hold keys their owner removed: sshKeys.syncOwner could
 * not write them (the engine did not answer). Kept in Redis so whichever process runs the next
 * reconcile pass writes them; a sandbox that wakes gets the keys anyway.
 */
export class SshKeyMarks {
  constructor(private readonly redis: Redis, private readonly prefix: string) {}

  private get key(): string {
    return `${this.prefix}:ssh-keys-pending`;
  }

  async mark(sandbox: string): Promise<void> {
    await this.redis.sadd(this.key, sandbox);
  }

  /** Clears the mark; true when there was one (the caller writes the keys, and marks again if that fails). */
  async take(sandbox: string): Promise<boolean> {
    return (await this.redis.srem(this.key, sandbox)) === 1;
  }
}
