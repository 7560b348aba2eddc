import { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../core/logger.ts';
import { LIFECYCLE_QUEUE, type LifecycleJob } from '../queue/index.ts';
import type { Lifecycle } from './controller.ts';

/** The consumer side of the lifecycle queue: timers and the reconcile pass call into the controller. */
export function startLifecycleWorker(lifecycle: Lifecycle, connection: Redis, prefix: string, logger: Logger): Worker<LifecycleJob> {
  const worker = new Worker<LifecycleJob>(
    LIFECYCLE_QUEUE,
    async (job) => {
      const data = job.data;
      switch (data.kind) {
        case 'idle-check':
          return lifecycle.timers.onIdleCheck(data.sandbox, data.at);
        case 'deep-sleep':
          return lifecycle.timers.onDeepSleep(data.sandbox, data.at);
        case 'reconcile':
          return lifecycle.reconcile();
      }
    },
    { connection, prefix, concurrency: 8 },
  );
  worker.on('failed', (job, err) => logger.error({ job: job?.id, err }, 'lifecycle job failed'));
  worker.on('error', (err) => logger.error({ err }, 'lifecycle worker error'));
  return worker;
}
