import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../core/config.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface CliResult { code: number | null; stdout: string; stderr: string }

type CliConfig = Pick<Config, 'dataDir' | 'secretKeyFile' | 'storeTable'> & { redisPrefix?: string; env?: NodeJS.ProcessEnv };

/** The environment `npx svc` gets: the test service's store and Redis prefix, and `config.env` on top. */
export function svcCliEnv(config: CliConfig): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env, SVC_DATA_DIR: config.dataDir, SVC_SECRET_KEY_FILE: config.secretKeyFile, SVC_STORE_TABLE: config.storeTable,
    ...(config.redisPrefix ? { SVC_REDIS_PREFIX: config.redisPrefix } : {}),
    ...config.env,
  };
  delete env.SVC_STORE_URL;
  return env;
}

/**
 * Runs `npx svc …` from the repository root on a test service's store (and, where given, its Redis
 * prefix: the label of its containers and volumes), as its operator would.
 */
export function svcCli(config: CliConfig, ...args: string[]): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('npx', ['svc', ...args], { cwd: ROOT, env: svcCliEnv(config), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
