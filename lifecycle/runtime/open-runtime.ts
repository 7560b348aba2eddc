import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import type { AddressStore, HostStore } from '../../store/index.ts';
import { openIncusRuntime } from './incus/open-incus-runtime.ts';
import { applyRunnerPools, openDockerRuntime, openHostSet } from './open-docker-runtime.ts';
import type { SandboxRuntime } from './sandbox-runtime.ts';

/**
 * The runtime SVC_RUNTIME names: `docker` (this machine's engine and the runner hosts, docs/scale-out.md)
 * or `incus` (a daemon or cluster, docs/incus.md). Its engine is checked first, before the store is
 * opened; `withStore` makes the runtime once the store is (runner hosts, the address table).
 */
export async function openSandboxRuntime(config: Config, logger: Logger, transferRoot: string): Promise<{
  withStore(store: { hosts: HostStore; addresses: AddressStore }): Promise<SandboxRuntime>;
  /** Lets sandboxes reach the service's public port (registry pushes from inside); returns its closer. */
  openServicePort(port: number): Promise<() => Promise<void>>;
}> {
  if (config.runtime === 'incus') {
    const incus = await openIncusRuntime(config, logger);
    return { withStore: async (store) => incus.runtime(store.addresses), openServicePort: incus.openServicePort };
  }
  const { runtime: local, openServicePort } = await openDockerRuntime(config, logger, transferRoot);
  return {
    async withStore(store) {
      const runtime = openHostSet(local, store.hosts, config, logger, transferRoot);
      await applyRunnerPools(store.hosts, config, logger);
      return runtime;
    },
    openServicePort,
  };
}
