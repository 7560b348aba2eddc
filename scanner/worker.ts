import { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../core/logger.ts';
import { SCAN_QUEUE, type ScanJob } from '../queue/index.ts';
import type { ImageScanner } from './image-scanner.ts';
import type { ServiceMetrics } from '../core/metrics.ts';

/**
 * Scan workers: BullMQ consumers of the scan queue. Scale with `concurrency` here, and with more
 * service processes (`SVC_SCAN_CONCURRENCY` each) sharing one Redis, store and upstream (`SVC_REGISTRY_UPSTREAM`).
 * A job that fails for good (the upstream stayed away through every retry) leaves its version
 * unscannable, so the image stays private, never public by accident.
 */
export function startScanWorkers(scanner: ImageScanner, connection: Redis, prefix: string, logger: Logger, concurrency = 2, metrics?: ServiceMetrics): Worker<ScanJob> {
  const worker = new Worker<ScanJob>(
    SCAN_QUEUE,
    async (job) => {
      const began = Date.now();
      try {
        const version = await scanner.scanVersion(job.data.repo, job.data.digest, job.data.pushed_at);
        if (version) metrics?.scanDone(Date.now() - began, version.state, version.findings.map((f) => f.rule));
      } catch (err) {
        metrics?.scanDone(Date.now() - began, 'failed'); // each failed attempt: the upstream or store away, no zstd here
        throw err;
      }
    },
    { connection, prefix, concurrency, lockDuration: 60_000 },
  );
  worker.on('failed', (job, err) => {
    if (!job) return;
    const final = job.attemptsMade >= (job.opts.attempts ?? 1);
    logger.error({ job: job.id, repo: job.data.repo, digest: job.data.digest, err, final }, 'scan job failed');
    if (final) {
      scanner.giveUp(job.data.repo, job.data.digest, err.message).catch((e) => logger.error({ err: e }, 'scan: could not record the failure'));
    }
  });
  worker.on('error', (err) => logger.error({ err }, 'scan worker error'));
  return worker;
}
