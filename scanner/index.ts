import os from 'node:os';
import type { Worker } from 'bullmq';
import type { Config } from '../core/config.ts';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { createRedis, type ScanJob } from '../queue/index.ts';
import type { Store } from '../store/index.ts';
import { ImageScanner, type BlobSource, type VersionSink } from './image-scanner.ts';
import type { OwnerSecretHashes } from './owner-secrets.ts';
import { LayerThreads } from './layer-threads.ts';
import type { RuleSet } from './rule-set.ts';
import { startScanWorkers } from './worker.ts';

export { ImageScanner, type BlobSource, type VersionSink } from './image-scanner.ts';
export { builtInRuleList, type RuleSet } from './rule-set.ts';
export { PATH_RULES } from './rules.ts';
export { loadRulesFile } from './operator-rules.ts';
export { findSecrets, type OwnerSecretHashes, type SecretLookup } from './owner-secrets.ts';

export interface Scanning {
  scanner: ImageScanner;
  /** This process's scan workers; null with `SVC_SCAN_CONCURRENCY=0` (other processes scan). */
  worker: Worker<ScanJob> | null;
  close(): Promise<void>;
}

/**
 * The scanner part of the service: an image scanner that reads from `blobs` and records into
 * `versions`, and this process's workers on the scan queue the registry front fills.
 */
export function startScanning(opts: { config: Config; store: Store; versions: VersionSink; blobs: BlobSource; ownerSecrets?: OwnerSecretHashes; logger: Logger; rules?: RuleSet; metrics?: ServiceMetrics }): Scanning {
  const { config, store, versions, blobs, ownerSecrets, logger, rules, metrics } = opts;
  // One thread per concurrent scan, no more threads than cores: the API and the edge keep this one.
  const threads = config.scanConcurrency > 0 ? new LayerThreads(Math.min(os.availableParallelism(), config.scanConcurrency), rules?.source) : null;
  const scanner = new ImageScanner({
    store, versions, blobs, logger, ...(rules ? { rules } : {}), ...(ownerSecrets ? { ownerSecrets } : {}),
    ...(threads ? { layerScan: (source, o) => threads.scan(source, o) } : {}),
  });
  const redis = config.scanConcurrency > 0 ? createRedis(config.redisUrl) : null;
  const worker = redis ? startScanWorkers(scanner, redis, config.redisPrefix, logger, config.scanConcurrency, metrics) : null;
  return {
    scanner,
    worker,
    async close() {
      await worker?.close();
      await threads?.close();
      redis?.disconnect();
    },
  };
}
