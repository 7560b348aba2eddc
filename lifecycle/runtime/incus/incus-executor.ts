import { posix } from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import type { ExecProcess, ExecResult, SandboxExecutor } from '../sandbox-runtime.ts';
import type { IncusClient } from './incus-client.ts';
import { incusRun, incusStart, incusTerminal } from './incus-exec.ts';
import { guarded, unreachable } from './incus-unreachable.ts';

/**
 * Commands in a running sandbox, over Incus's exec operations (incus-exec.ts). Their failures that
 * mean the sandbox's member cannot be reached are RuntimeUnreachable (incus-unreachable.ts), also a
 * command's end (`done`) that failed after it started; `lostOn` names a sandbox's member known lost.
 */
export class IncusExecutor implements SandboxExecutor {
  constructor(private readonly incus: IncusClient, private readonly lostOn: (sandbox: string) => string | undefined = () => undefined) {}

  run(sandbox: string, cmd: string[], input?: Buffer | string): Promise<ExecResult & { stdout: Buffer }> {
    return guarded(() => incusRun(this.incus, sandbox, cmd, input), () => this.lostOn(sandbox));
  }

  async start(sandbox: string, cmd: string[], opts: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void } = {}): Promise<ExecProcess> {
    const p = await guarded(() => incusStart(this.incus, sandbox, cmd, opts), () => this.lostOn(sandbox));
    const done = p.done.catch((err) => { throw unreachable(err, () => this.lostOn(sandbox)); });
    done.catch(() => undefined); // heard by whoever awaits it, as before
    return { ...p, done };
  }

  startTerminal(sandbox: string, cmd: string[], size: { cols: number; rows: number }): Promise<{ stream: Duplex; resize(size: { cols: number; rows: number }): Promise<void> }> {
    return guarded(() => incusTerminal(this.incus, sandbox, cmd, size), () => this.lostOn(sandbox));
  }

  /** A tar of `path` as `docker cp` gives it: its last component at the top. */
  async getArchive(sandbox: string, path: string): Promise<Readable> {
    const p = await this.start(sandbox, ['tar', '-C', posix.dirname(path), '-cf', '-', posix.basename(path)]);
    p.done.then((r) => { if (r.exitCode !== 0) p.stdout.destroy(new Error(`no archive of ${path}: ${r.stderr.trim().slice(-200)}`)); }, (err) => p.stdout.destroy(err));
    return p.stdout;
  }
}
