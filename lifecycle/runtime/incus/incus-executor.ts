import { posix } from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import { RuntimeUnreachable, type ExecProcess, type ExecResult, type SandboxExecutor } from '../sandbox-runtime.ts';
import { IncusUnreachable, type IncusClient } from './incus-client.ts';
import { incusRun, incusStart, incusTerminal } from './incus-exec.ts';

/** Commands in a running sandbox, over Incus's exec operations (incus-exec.ts). */
export class IncusExecutor implements SandboxExecutor {
  constructor(private readonly incus: IncusClient) {}

  run(sandbox: string, cmd: string[], input?: Buffer | string): Promise<ExecResult & { stdout: Buffer }> {
    return guarded(() => incusRun(this.incus, sandbox, cmd, input));
  }

  start(sandbox: string, cmd: string[], opts: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void } = {}): Promise<ExecProcess> {
    return guarded(() => incusStart(this.incus, sandbox, cmd, opts));
  }

  startTerminal(sandbox: string, cmd: string[], size: { cols: number; rows: number }): Promise<{ stream: Duplex; resize(size: { cols: number; rows: number }): Promise<void> }> {
    return guarded(() => incusTerminal(this.incus, sandbox, cmd, size));
  }

  /** A tar of `path` as `docker cp` gives it: its last component at the top. */
  async getArchive(sandbox: string, path: string): Promise<Readable> {
    const p = await this.start(sandbox, ['tar', '-C', posix.dirname(path), '-cf', '-', posix.basename(path)]);
    p.done.then((r) => { if (r.exitCode !== 0) p.stdout.destroy(new Error(`no archive of ${path}: ${r.stderr.trim().slice(-200)}`)); }, (err) => p.stdout.destroy(err));
    return p.stdout;
  }
}

/** Incus that cannot be asked becomes the runtime's RuntimeUnreachable (a 503 for callers). */
export async function guarded<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof IncusUnreachable) throw new RuntimeUnreachable(err.reason);
    throw err;
  }
}
