import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';

export const LIFECYCLE_QUEUE = 'lifecycle';

/** Jobs of the lifecycle queue. Timers carry the time they were set for, so a stale one can tell. */
export type LifecycleJob =
  | { kind: 'idle-check'; sandbox: string; at: number }
  | { kind: 'deep-sleep'; sandbox: string; at: number }
  | { kind: 'reconcile' };

/** How often running and stopped sandboxes are compared with sessions and timers (spec 3, rule 3: within two minutes). */
export const RECONCILE_EVERY_MS = 30_000;

/**
 * The producer side of the lifecycle queue: idle and deep-sleep timers are delayed jobs whose id
 * names the sandbox and the due time, so scheduling the same timer twice is a no-op.
 */
export class LifecycleQueue {
  readonly queue: Queue<LifecycleJob>;

  constructor(connection: Redis, prefix: string) {
    this.queue = new Queue<LifecycleJob>(LIFECYCLE_QUEUE, {
      connection,
      prefix,
      defaultJobOptions: { removeOnComplete: true, removeOnFail: 200, attempts: 3, backoff: { type: 'exponential', delay: 1_000 } },
    });
  }

  async scheduleIdleCheck(sandbox: string, at: number): Promise<void> {
    await this.queue.add('idle-check', { kind: 'idle-check', sandbox, at }, { jobId: `idle@${sandbox}@${at}`, delay: Math.max(0, at - Date.now()) });
  }

  async scheduleDeepSleep(sandbox: string, at: number): Promise<void> {
    await this.queue.add('deep-sleep', { kind: 'deep-sleep', sandbox, at }, { jobId: `deep@${sandbox}@${at}`, delay: Math.max(0, at - Date.now()) });
  }

  async startReconciling(everyMs = RECONCILE_EVERY_MS): Promise<void> {
    await this.queue.upsertJobScheduler('reconcile', { every: everyMs }, { name: 'reconcile', data: { kind: 'reconcile' } });
  }

  /**
   * The reconcile schedule lives in Redis, which may restart empty (it keeps nothing on disk on a
   * typical host): puts it back if it is gone. True when it was gone, so the caller reconciles at
   * once (sessions and timers went with it).
   */
  async ensureReconciling(everyMs = RECONCILE_EVERY_MS): Promise<boolean> {
    if (await this.queue.getJobScheduler('reconcile')) return false;
    await this.startReconciling(everyMs);
    return true;
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
