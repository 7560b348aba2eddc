import type { Config } from '../core/config.ts';
import type { Logger } from '../core/logger.ts';
import { RedisLeases } from '../core/redis-lease.ts';
import { createRedis, ScanQueue } from '../queue/index.ts';
import type { Store } from '../store/index.ts';
import { RegistryAuth } from './auth.ts';
import { Catalog } from './catalog.ts';
import { buildRegistryFront, type RegistryFront } from './front.ts';
import { externalUpstream, spawnUpstream, type Upstream } from './upstream.ts';
import type { ServiceMetrics } from '../core/metrics.ts';

export { buildRegistryFront, parseV2Path, type RegistryFront } from './front.ts';
export { Catalog, decide } from './catalog.ts';
export { RegistryAuth } from './auth.ts';
export { spawnUpstream, externalUpstream, type Upstream } from './upstream.ts';

export interface Registry {
  /** The front: give `front.app.server` to the edge as `registry`, and `front.mayBypass` to a data plane. */
  front: RegistryFront;
  upstream: Upstream;
  catalog: Catalog;
  queue: ScanQueue;
  close(): Promise<void>;
}

/**
 * The registry part of the service: the upstream (spawned or configured), the front and the scan
 * queue it fills. The scanner that empties the queue is wired beside it in `service.ts`.
 */
export async function startRegistry(opts: { config: Config; store: Store; logger: Logger; metrics?: ServiceMetrics }): Promise<Registry> {
  const { config, store, logger, metrics } = opts;
  const upstream = config.registryUpstream ? await externalUpstream(config.registryUpstream, logger) : await spawnUpstream(config.dataDir, logger);
  const redis = createRedis(config.redisUrl);
  const queue = new ScanQueue(redis, config.redisPrefix);
  const catalog = new Catalog(store, logger.child({ part: 'registry' }), new RedisLeases(redis, `${config.redisPrefix}:repo-lease`));
  const front = await buildRegistryFront({ store, upstream, auth: await RegistryAuth.open(store, config.dataDir), catalog, queue, logger, metrics });
  await front.app.ready();
  return {
    front, upstream, catalog, queue,
    async close() {
      await front.app.close();
      await queue.close();
      redis.disconnect();
      await upstream.close();
    },
  };
}
