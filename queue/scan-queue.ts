import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';

export const SCAN_QUEUE = 'registry-scan';
/** Tries of one scan job: the first and two retries, 1 s and 2 s later. */
export const SCAN_ATTEMPTS = 3;

/** One pushed manifest to scan: an image manifest, or an index (whose children it scans too). */
export interface ScanJob {
  repo: string;
  digest: string;
  /** When the push that asked for this scan happened (ms), for the push-to-report time. */
  pushed_at: number;
}

/** BullMQ job ids may not contain `:`. */
export function scanJobId(repo: string, digest: string, pushedAt: number): string {
  return `scan@${repo}@${digest.replace(':', '-')}@${pushedAt}`;
}

/**
 * The producer side of the scan queue: the registry front adds a job per manifest push; scan
 * workers (scanner/worker.ts) take them, in this process or in other service processes on the same Redis.
 * The job id names the repository, digest and push time, so a second push of the same manifest
 * (after a delete) is scanned again. Failures are retried (the upstream may restart); after the
 * last attempt the version is unscannable, hence private.
 */
export class ScanQueue {
  readonly queue: Queue<ScanJob>;

  constructor(connection: Redis, prefix: string) {
    this.queue = new Queue<ScanJob>(SCAN_QUEUE, {
      connection,
      prefix,
      defaultJobOptions: { removeOnComplete: true, removeOnFail: 500, attempts: SCAN_ATTEMPTS, backoff: { type: 'exponential', delay: 1_000 } },
    });
  }

  async enqueue(job: ScanJob): Promise<void> {
    await this.queue.add('scan', job, { jobId: scanJobId(job.repo, job.digest, job.pushed_at) });
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}
