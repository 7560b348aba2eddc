import type Docker from 'dockerode';
import { loadConfig } from '../core/config.ts';
import { engineClient } from '../lifecycle/runtime/engine-client.ts';

/**
 * The engine that runs sandbox containers in tests, as the service picks it: the service's own
 * user-namespaced engine (scripts/sandbox-engine.sh), or the main one in `unisolated` mode.
 */
const config = loadConfig();
export const SANDBOX_DOCKER_HOST = config.sandboxRuntime === 'unisolated' ? (process.env.DOCKER_HOST || 'unix:///var/run/docker.sock') : config.sandboxDockerHost;

/** A dockerode client for the sandbox engine. */
export function sandboxDocker(): Docker {
  return engineClient(SANDBOX_DOCKER_HOST);
}

/** Arguments that point the docker CLI at the sandbox engine: `docker ...SANDBOX_CLI exec …`. */
export const SANDBOX_CLI = ['-H', SANDBOX_DOCKER_HOST];
