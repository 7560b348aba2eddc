import { spawn } from 'node:child_process';
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

/** What a shell script run in a sandbox container printed (stdout and stderr together) and its exit code. */
export interface ShellResult { code: number; out: string }

/**
 * Runs shell scripts in the sandbox container `sandbox()` names (where its inner docker CLI and engine
 * live), `input` on stdin. A script that fails rejects with its last output, unless `allowFail`.
 */
export function sandboxShell(sandbox: () => string) {
  return async (script: string, input?: string | Buffer, allowFail = false): Promise<ShellResult> => {
    const child = spawn('docker', [...SANDBOX_CLI, 'exec', '-i', sandbox(), 'sh', '-c', script], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.stdin.end(input ?? '');
    const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? 1)));
    if (code !== 0 && !allowFail) throw new Error(`in the sandbox: ${script}\nexit ${code}\n${out.slice(-2000)}`);
    return { code, out };
  };
}
