import path from 'node:path';
import Docker from 'dockerode';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import { DockerRuntime, type DockerRuntimeOptions } from './docker-runtime.ts';
import { blockPrivateNetworks, installEgressRules, openPort } from './egress-firewall.ts';
import { engineClient } from './engine-client.ts';

/** The Docker runtime's options from the configuration (sandbox image, isolation, default limits, labels). */
export function runtimeOptions(config: Config, logger: Logger): Pick<DockerRuntimeOptions, 'image' | 'runtime' | 'limits' | 'instance' | 'logger'> {
  return {
    image: config.sandboxImage,
    runtime: config.sandboxRuntime,
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
    instance: config.redisPrefix,
    logger,
  };
}

/**
 * The Docker runtime as the configuration asks for it: its engine checked (and, in userns mode,
 * its egress rules installed) before anything else starts.
 */
export async function openDockerRuntime(config: Config, logger: Logger, transferRoot: string): Promise<{
  runtime: DockerRuntime;
  /** Lets sandboxes reach the service's public port (registry pushes from inside); returns its closer. */
  openServicePort(port: number): Promise<() => Promise<void>>;
}> {
  const docker = await sandboxEngine(config, logger);
  const runtime = new DockerRuntime(docker, {
    ...runtimeOptions(config, logger),
    transferRoot,
    move: await mainEngineMove(config, docker, logger),
  });
  return {
    runtime,
    openServicePort: async (port) => (config.sandboxRuntime === 'userns' ? openPort(port) : async () => undefined),
  };
}

/**
 * The engine that runs sandbox containers. `userns`: the service's own (scripts/sandbox-engine.sh), which
 * must remap root; its egress rules are installed here. `unisolated`: the main engine, with a warning.
 */
async function sandboxEngine(config: Config, logger: Logger): Promise<Docker> {
  const unisolated = config.sandboxRuntime === 'unisolated';
  // DOCKER_HOST or the local socket for the main engine, as the docker CLI does
  const docker = unisolated ? new Docker() : engineClient(config.sandboxDockerHost);
  let security: string[];
  try {
    security = (await docker.info()).SecurityOptions ?? [];
  } catch (err) {
    throw new Error(unisolated
      ? `no container engine answers (${(err as Error).message}); run "npm run setup" or set DOCKER_HOST`
      : `the sandbox engine at ${config.sandboxDockerHost} does not answer (${(err as Error).message}); run "npm run setup" (it starts it with scripts/sandbox-engine.sh)`);
  }
  if (unisolated) {
    logger.warn('SVC_SANDBOX_RUNTIME=unisolated: root in every sandbox is root on this host; use it only on a machine of your own');
  } else if (config.sandboxRuntime === 'userns') {
    if (!security.some((o) => o.includes('name=userns'))) {
      throw new Error(`the sandbox engine at ${config.sandboxDockerHost} does not remap root (no --userns-remap): refusing to run sandboxes as host root; start it with scripts/sandbox-engine.sh`);
    }
    await installEgressRules(logger);
    await blockPrivateNetworks(config.sandboxPrivateNetworks, config.sandboxDns);
    // one chain for the machine: the last process started sets it (docs/isolation.md), so say what it set
    logger.info({ privateNetworks: config.sandboxPrivateNetworks, nameservers: config.sandboxDns }, 'sandboxes kept off the private network but for these nameservers (SVC_SANDBOX_PRIVATE_NETWORKS)');
    if (config.sandboxPrivateNetworks.length === 0) logger.warn('SVC_SANDBOX_PRIVATE_NETWORKS=none: sandboxes of this machine reach every machine of its private network');
  }
  return docker;
}

/**
 * In userns mode, sandboxes made on the main engine (before isolation) move to the sandbox engine at
 * their next creation (engine-move.ts). Nothing to move from where no main engine runs.
 */
async function mainEngineMove(config: Config, sandboxEngine: Docker, logger: Logger): Promise<DockerRuntimeOptions['move']> {
  if (config.sandboxRuntime !== 'userns') return undefined;
  const main = new Docker();
  if (!(await main.ping().then(() => true, () => false))) {
    logger.info('no main engine answers: no sandboxes to move from it');
    return undefined;
  }
  // the remapped root's uid names the data root: /var/lib/svc-sandbox-docker/100000.100000
  const root = /\/(\d+)\.\d+$/.exec((await sandboxEngine.info()).DockerRootDir ?? '');
  if (!root) throw new Error('the sandbox engine does not say which uid its root maps to (DockerRootDir without <uid>.<gid>)');
  return { from: main, rootId: Number(root[1]), stateDir: path.join(config.dataDir, 'moved') };
}
