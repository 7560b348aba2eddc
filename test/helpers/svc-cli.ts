import { spawn, type ChildProcess } from 'node:child_process';
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

export interface BackgroundCli {
  child: ChildProcess;
  /** Its exit code, once it has ended. */
  closed: Promise<number | null>;
  /** Its stdout and stderr so far, interleaved. */
  output(): string;
  /** Resolves once its output matches `pattern`, or once it has ended. */
  when(pattern: RegExp): Promise<void>;
  /** A signal to its whole process group (npx, tsx and node at once, as a crash or a pause would take them). */
  signal(sig: NodeJS.Signals): void;
}

/** `npx svc …` as svcCli runs it, but in its own process group and left running: for kills and pauses mid-command. */
export function svcCliBackground(config: CliConfig, ...args: string[]): BackgroundCli {
  const child = spawn('npx', ['svc', ...args], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: svcCliEnv(config) });
  let output = '';
  const waiting: Array<{ pattern: RegExp; resolve: () => void }> = [];
  const seen = () => {
    for (const w of waiting.filter((x) => x.pattern.test(output))) {
      waiting.splice(waiting.indexOf(w), 1);
      w.resolve();
    }
  };
  child.stdout!.on('data', (d) => { output += d; seen(); });
  child.stderr!.on('data', (d) => { output += d; seen(); });
  const closed = new Promise<number | null>((resolve) => child.on('close', (code) => {
    for (const w of waiting.splice(0)) w.resolve();
    resolve(code);
  }));
  return {
    child,
    closed,
    output: () => output,
    when: (pattern) => new Promise<void>((resolve) => {
      if (pattern.test(output) || child.exitCode !== null) resolve();
      else waiting.push({ pattern, resolve });
    }),
    signal: (sig) => { process.kill(-child.pid!, sig); },
  };
}
