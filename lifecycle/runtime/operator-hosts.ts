import path from 'node:path';
import Docker from 'dockerode';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../store/index.ts';
import { DockerRuntime } from './docker-runtime.ts';
import { engineClient } from './engine-client.ts';
import type { HostOperations } from './host-operations.ts';
import { incusRuntime } from './incus/open-incus-runtime.ts';
import { openHostSet, runtimeOptions } from './open-docker-runtime.ts';

/**
 * The hosts as the service reaches them, for a process that is not the service (the operator's
 * `svc hosts …`): this machine's sandbox engine without its host duties (the service keeps those),
 * and every registered runner host. Built here so that nothing outside lifecycle/ builds a runtime.
 */
export function operatorHosts(store: Pick<Store, 'hosts' | 'addresses'>, config: Config, logger: Logger): HostOperations {
  // an Incus cluster's members (IncusHosts): Incus is asked, nothing of this machine's engine
  if (config.runtime === 'incus') return incusRuntime(config, logger, store.addresses).hosts;
  // the sandbox engine as the service picks it; the main one in unisolated mode
  const docker = config.sandboxRuntime === 'unisolated' ? new Docker() : engineClient(config.sandboxDockerHost);
  const transferRoot = path.join(config.dataDir, 'transfer');
  const local = new DockerRuntime(docker, { ...runtimeOptions(config, logger), hostDuties: false, transferRoot });
  return openHostSet(local, store.hosts, config, logger, transferRoot).hosts;
}
