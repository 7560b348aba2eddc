import type { FastifyInstance } from 'fastify';
import type { Worker } from 'bullmq';
import type { Config } from '../core/config.ts';
import type { Logger } from '../core/logger.ts';
import { RedisLeases } from '../core/redis-lease.ts';
import { createRedis } from '../queue/connection.ts';
import { ScanQueue, type ScanJob } from '../queue/scan-queue.ts';
import { ImageScanner } from '../scanner/image-scanner.ts';
import type { RuleSet } from '../scanner/rule-set.ts';
import { startScanWorkers } from '../scanner/worker.ts';
import type { Store } from '../store/index.ts';
import { RegistryAuth } from './auth.ts';
import { Catalog } from './catalog.ts';
import { buildRegistryFront } from './front.ts';
import { externalUpstream, spawnUpstream, type Upstream } from './upstream.ts';
import type { ServiceMetrics } from '../ops/metrics.ts';

export { buildRegistryFront, parseV2Path } from './front.ts';
export { Catalog, decide } from './catalog.ts';
export { RegistryAuth } from './auth.ts';
export { spawnUpstream, externalUpstream, type Upstream } from './upstream.ts';
export * from './manifests.ts';

export interface Registry {
  /** The front: give `front.server` to the edge as `registry`. */
  front: FastifyInstance;
  upstream: Upstream;
  catalog: Catalog;
  queue: ScanQueue;
  scanner: ImageScanner;
  worker: Worker<ScanJob> | null;
  close(): Promise<void>;
}

/**
 * The registry part of the service: the upstream (spawned or configured), the front, the scan
 * queue and this process's scan workers.
 */
export async function startRegistry(opts: { config: Config; store: Store; logger: Logger; scanRules?: RuleSet; metrics?: ServiceMetrics }): Promise<Registry> {
  const { config, store, logger, scanRules: rules, metrics } = opts;
  const upstream = config.registryUpstream ? await externalUpstream(config.registryUpstream, logger) : await spawnUpstream(config.dataDir, logger);
  const redis = createRedis(config.redisUrl);
  const workerRedis = config.scanConcurrency > 0 ? createRedis(config.redisUrl) : null;
  const queue = new ScanQueue(redis, config.redisPrefix);
  const catalog = new Catalog(store, logger.child({ part: 'registry' }), new RedisLeases(redis, `${config.redisPrefix}:repo-lease`));
  const scanner = new ImageScanner({ store, catalog, upstream, logger, ...(rules ? { rules } : {}) });
  const worker = workerRedis ? startScanWorkers(scanner, workerRedis, config.redisPrefix, logger, config.scanConcurrency, metrics) : null;
  const front = await buildRegistryFront({ store, upstream, auth: await RegistryAuth.open(store, config.dataDir), catalog, queue, logger, metrics });
  await front.ready();
  return {
    front, upstream, catalog, queue, scanner, worker,
    async close() {
      await front.close();
      await worker?.close();
      await queue.close();
      redis.disconnect();
      workerRedis?.disconnect();
      await upstream.close();
    },
  };
}
