import { spawn } from 'node:child_process';

/** The end of compose's output kept for an error message. */
const KEEP_OUTPUT = 16 * 1024;
const COMPOSE_TIMEOUT_MS = 15 * 60_000;

export interface ComposeFiles {
  project: string;
  /** The stack's folder: compose file, env file, relative paths. */
  dir: string;
  file: string;
  envFile: string;
}

export class ComposeFailed extends Error {
  constructor(readonly output: string) {
    super(lastLines(output));
  }
}

/** The last meaningful line of compose's output, for a one-line message. */
function lastLines(output: string): string {
  const lines = output.split('\n').map((l) => l.trim()).filter(Boolean);
  return lines.at(-1)?.slice(0, 500) ?? 'docker compose failed';
}

/**
 * Runs the compose v2 CLI as Portainer does (`-p <name> -f <file> --env-file <env>`), against the
 * engine the tool manages. The binary may be the CLI plugin run on its own (it then acts as
 * `docker-compose`).
 */
export class Compose {
  constructor(private readonly opts: { bin: string; dockerHost: string }) {}

  async up(files: ComposeFiles, opts: { pull: boolean; removeOrphans: boolean }): Promise<void> {
    if (opts.pull) await this.run(files, ['pull']);
    await this.run(files, ['up', '-d', ...(opts.removeOrphans ? ['--remove-orphans'] : [])]);
  }

  stop(files: ComposeFiles): Promise<string> {
    return this.run(files, ['stop']);
  }

  down(files: ComposeFiles): Promise<string> {
    return this.run(files, ['down', '--remove-orphans']);
  }

  run(files: ComposeFiles, args: string[]): Promise<string> {
    const argv = ['-p', files.project, '-f', files.file, '--env-file', files.envFile, '--project-directory', files.dir, ...args];
    return new Promise((resolve, reject) => {
      const child = spawn(this.opts.bin, argv, {
        cwd: files.dir,
        // only what compose needs: the engine address, a home for its config, no ambient secrets
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', DOCKER_HOST: this.opts.dockerHost, COMPOSE_PROGRESS: 'plain', NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: COMPOSE_TIMEOUT_MS,
      });
      let output = '';
      const keep = (chunk: Buffer) => {
        output = (output + chunk.toString('utf8')).slice(-KEEP_OUTPUT);
      };
      child.stdout.on('data', keep);
      child.stderr.on('data', keep);
      child.once('error', (err) => reject(new ComposeFailed(`cannot run ${this.opts.bin}: ${err.message}`)));
      child.once('close', (code, signal) => {
        if (code === 0) resolve(output);
        else reject(new ComposeFailed(output || `docker compose ended with ${signal ?? `exit code ${code}`}`));
      });
    });
  }
}
