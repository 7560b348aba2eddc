import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../core/config.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * What `npx svc` runs: package.json's bin, by the interpreter its first line names (`node --import
 * tsx`), this Node. Run directly, without npm's resolution of the bin (a second Node process and
 * about 1.5 s of CPU per command); test/operator/doctor.test.ts and backup.test.ts run `npx svc`
 * itself. (`env -S` splits the line as the shell would; its words hold no quotes.)
 */
const SVC = (() => {
  const bin = path.join(ROOT, (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { bin: { svc: string } }).bin.svc);
  const shebang = /^#!\/usr\/bin\/env -S node (.*)$/m.exec(fs.readFileSync(bin, 'utf8').split('\n', 1)[0]!);
  if (!shebang) throw new Error(`${bin}: its first line is not "#!/usr/bin/env -S node …", which svc-cli.ts runs it by`);
  return { command: process.execPath, args: [...shebang[1]!.trim().split(/\s+/), bin] };
})();

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
  return collected(spawn(SVC.command, [...SVC.args, ...args], { cwd: ROOT, env: svcCliEnv(config), stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** A command's exit code and its whole stdout and stderr, once it has ended. */
function collected(child: ChildProcess): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => { stdout += d; });
    child.stderr!.on('data', (d) => { stderr += d; });
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
  /** A signal to its whole process group (all of the command at once, as a crash or a pause would take it). */
  signal(sig: NodeJS.Signals): void;
}

/** `npx svc …` as svcCli runs it, but in its own process group and left running: for kills and pauses mid-command. */
export function svcCliBackground(config: CliConfig, ...args: string[]): BackgroundCli {
  const child = spawn(SVC.command, [...SVC.args, ...args], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: svcCliEnv(config) });
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

/**
 * The user's `svc` as a user has it: the file the service serves at /cli/svc.mjs, downloaded into
 * `dir` once, run with this Node against the service's API with `token` (and `sandbox` as its default).
 */
export async function servedCli(url: string, dir: string): Promise<(env: { token: string; sandbox: string }, ...args: string[]) => Promise<CliResult>> {
  const file = path.join(dir, 'svc.mjs');
  fs.writeFileSync(file, Buffer.from(await (await fetch(`${url}/cli/svc.mjs`)).arrayBuffer()));
  return (env, ...args) => collected(spawn(process.execPath, [file, ...args], {
    env: { PATH: process.env.PATH, HOME: dir, SVC_URL: `${url}/api/`, SVC_TOKEN: env.token, SVC_SANDBOX: env.sandbox },
    stdio: ['ignore', 'pipe', 'pipe'],
  }));
}
