import path from 'node:path';
import Docker from 'dockerode';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../store/index.ts';
import { DockerRuntime } from './docker-runtime.ts';
import { engineClient } from './engine-client.ts';
import type { HostOperations } from './host-operations.ts';
import { incusRuntime } from './incus/open-incus-runtime.ts';
import { runtimeOptions } from './open-docker-runtime.ts';

/**
 * The hosts as the service reaches them, for a process that is not the service (the operator's
 * `svc hosts …`): an Incus cluster's members, or the one machine of the sandbox engine (asked for its
 * name and figures only). Built here so that nothing outside lifecycle/
 * builds a runtime.
 */
export function operatorHosts(store: Pick<Store, 'addresses'>, config: Config, logger: Logger): HostOperations {
  // an Incus cluster's members (IncusHosts): Incus is asked, nothing of this machine's engine
  if (config.runtime === 'incus') return incusRuntime(config, logger, store.addresses).hosts;
  // the sandbox engine as the service picks it; the main one in unisolated mode
  const docker = config.sandboxRuntime === 'unisolated' ? new Docker() : engineClient(config.sandboxDockerHost);
  return new DockerRuntime(docker, { ...runtimeOptions(config, logger), transferRoot: path.join(config.dataDir, 'transfer') }).hosts;
}
