import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import type { AddressStore, RunnerLeftoverStore } from '../../store/index.ts';
import { openIncusRuntime } from './incus/open-incus-runtime.ts';
import { openDockerRuntime } from './open-docker-runtime.ts';
import { keepingStranded } from './stranded-sandboxes.ts';
import type { SandboxRuntime } from './sandbox-runtime.ts';

/**
 * The runtime SVC_RUNTIME names: `docker` (this machine's engine, docs/scale-out.md) or `incus` (a
 * daemon or cluster, docs/incus.md). Its engine is checked first, before the store is opened;
 * `withStore` makes the runtime once the store is (the address table; what runner hosts of an earlier
 * release left, whose sandboxes stay unavailable: stranded-sandboxes.ts).
 */
export async function openSandboxRuntime(config: Config, logger: Logger, transferRoot: string): Promise<{
  withStore(store: { addresses: AddressStore; runnerLeftovers: RunnerLeftoverStore }): Promise<SandboxRuntime>;
  /** Lets sandboxes reach the service's public port (registry pushes from inside); returns its closer. */
  openServicePort(port: number): Promise<() => Promise<void>>;
}> {
  if (config.runtime === 'incus') {
    const incus = await openIncusRuntime(config, logger);
    return { withStore: async (store) => keepingStranded(incus.runtime(store.addresses), store.runnerLeftovers, logger), openServicePort: incus.openServicePort };
  }
  const { runtime, openServicePort } = await openDockerRuntime(config, logger, transferRoot);
  return { withStore: (store) => keepingStranded(runtime, store.runnerLeftovers, logger), openServicePort };
}
