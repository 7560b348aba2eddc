import type { ExecProcess, SandboxExecutor } from '../lifecycle/index.ts';
import { SHELL_SERVER, type Operation } from './scripts.ts';

export interface ScriptRunnerOptions {
  /** How many shells one sandbox may have: a long listing then does not hold up a small read. */
  shellsPerSandbox: number;
  /**
   * How many more shells may start for transfers, which hold one as long as their bytes flow.
   * Other operations keep shellsPerSandbox shells beside those lent to transfers, so slow
   * uploads never hold up a listing.
   */
  transfersPerSandbox: number;
  /** A shell nobody has used for this long is ended. */
  idleMs: number;
}

const DEFAULTS: ScriptRunnerOptions = { shellsPerSandbox: 2, transfersPerSandbox: 4, idleMs: 30_000 };

export interface ScriptResult {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
}

/** A shell that was running an operation when it ended (its sandbox stopped, most likely). */
export class ShellGone extends Error {}

/**
 * Runs the file operations of scripts.ts in a few long-lived shells per sandbox (SHELL_SERVER),
 * so each costs about a millisecond of forks inside the sandbox instead of a `docker exec`.
 * Shells end by themselves when their sandbox stops or after a while unused; the next operation
 * starts a new one. Errors from starting one (the container is gone or stopped) reach the caller
 * with the engine's status code.
 */
export class ScriptRunner {
  private readonly pools = new Map<string, Pool>();
  private readonly opts: ScriptRunnerOptions;

  constructor(
    private readonly exec: Pick<SandboxExecutor, 'start'>,
    opts: Partial<ScriptRunnerOptions> = {},
  ) {
    this.opts = { ...DEFAULTS, ...opts };
  }

  /**
   * Runs `op`; `onNotice` hears the operation's notices (a line of its own each) as they come.
   * A `transfer` (an operation that moves a file's bytes) may use a shell of its own.
   */
  async run(sandbox: string, op: Operation, args: string[], opts: { onNotice?: (notice: string) => void; transfer?: boolean } = {}): Promise<ScriptResult> {
    let pool = this.pools.get(sandbox);
    if (!pool) {
      const created = new Pool(
        this.opts,
        () => this.exec.start(sandbox, ['sh', '-c', SHELL_SERVER, 'svc-files'], { stdin: true }),
        () => { if (this.pools.get(sandbox) === created) this.pools.delete(sandbox); },
      );
      this.pools.set(sandbox, (pool = created));
    }
    const transfer = Boolean(opts.transfer);
    const shell = await pool.acquire(transfer);
    try {
      return await shell.request(op, args, opts.onNotice);
    } finally {
      pool.release(shell, transfer);
    }
  }

  /** Ends every shell (the service is closing). */
  close(): void {
    for (const pool of this.pools.values()) pool.close();
    this.pools.clear();
  }
}

interface Waiter {
  transfer: boolean;
  resolve: (shell: Shell) => void;
  reject: (err: unknown) => void;
}

/**
 * The shells of one sandbox, and the operations waiting for one. A transfer may start a shell
 * while there are fewer than shellsPerSandbox + transfersPerSandbox; another operation while
 * there are fewer than shellsPerSandbox beside those lent to transfers.
 */
class Pool {
  private readonly shells = new Set<Shell>();
  private readonly idle: Shell[] = [];
  private readonly waiting: Waiter[] = [];
  private starting = 0;
  /** Shells lent to transfers right now. */
  private lent = 0;

  constructor(
    private readonly opts: ScriptRunnerOptions,
    private readonly spawn: () => Promise<ExecProcess>,
    private readonly onEmpty: () => void,
  ) {}

  async acquire(transfer: boolean): Promise<Shell> {
    const idle = this.idle.pop();
    if (idle) return this.lend(idle, transfer);
    if (!this.mayStart(transfer)) return new Promise((resolve, reject) => this.waiting.push({ transfer, resolve, reject }));
    return this.lend(await this.start(), transfer);
  }

  release(shell: Shell, transfer: boolean): void {
    if (transfer) this.lent--;
    if (shell.ended) {
      // a waiter gets a fresh shell rather than waiting for one that no longer exists
      const next = this.waiting.shift();
      if (next) this.acquire(next.transfer).then(next.resolve, next.reject);
      return;
    }
    const next = this.waiting.shift();
    if (next) next.resolve(this.lend(shell, next.transfer));
    else this.idle.push(shell);
  }

  close(): void {
    for (const shell of this.shells) shell.end();
  }

  private mayStart(transfer: boolean): boolean {
    const limit = this.opts.shellsPerSandbox + (transfer ? this.opts.transfersPerSandbox : this.lent);
    return this.shells.size + this.starting < limit;
  }

  private lend(shell: Shell, transfer: boolean): Shell {
    if (transfer) {
      this.lent++;
      // one more lent to a transfer: one more shell may start for those waiting
      const at = this.waiting.findIndex((w) => this.mayStart(w.transfer));
      if (at >= 0) {
        const [next] = this.waiting.splice(at, 1);
        this.acquire(next!.transfer).then(next!.resolve, next!.reject);
      }
    }
    return shell;
  }

  private async start(): Promise<Shell> {
    this.starting++;
    try {
      const shell: Shell = new Shell(await this.spawn(), this.opts.idleMs, () => this.forget(shell));
      this.shells.add(shell);
      return shell;
    } catch (err) {
      // those waiting would meet the same stopped sandbox
      for (const waiter of this.waiting.splice(0)) waiter.reject(err);
      throw err;
    } finally {
      this.starting--;
      this.checkEmpty();
    }
  }

  private forget(shell: Shell): void {
    this.shells.delete(shell);
    const at = this.idle.indexOf(shell);
    if (at >= 0) this.idle.splice(at, 1);
    this.checkEmpty();
  }

  private checkEmpty(): void {
    if (this.shells.size === 0 && this.starting === 0 && this.waiting.length === 0) this.onEmpty();
  }
}

/**
 * Bounds of the shell protocol: the sandbox's root can replace the shell's commands, so its
 * answers are hostile bytes. A longer header line or a larger declared answer breaks the shell.
 */
const MAX_HEADER_LINE = 4 * 1024;
const MAX_ANSWER = 16 * 1024 * 1024;

/** One shell running SHELL_SERVER: one request at a time, its reply read off the demuxed stdout. */
class Shell {
  ended = false;
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  private reply: { code: number; out: number; err: number } | undefined;
  private pending: { resolve: (r: ScriptResult) => void; reject: (e: Error) => void; onNotice?: (notice: string) => void } | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly proc: ExecProcess,
    private readonly idleMs: number,
    private readonly onEnd: () => void,
  ) {
    proc.stdout.on('data', (chunk: Buffer) => this.receive(chunk));
    proc.stdout.on('close', () => this.finish());
    proc.stdout.on('error', () => this.finish());
    proc.stdin!.on('error', () => this.finish());
    proc.done.then(() => this.finish(), () => this.finish());
    this.armIdle();
  }

  request(op: Operation, args: string[], onNotice?: (notice: string) => void): Promise<ScriptResult> {
    if (this.ended) return Promise.reject(new ShellGone('the file shell ended'));
    clearTimeout(this.idleTimer);
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject, onNotice };
      this.proc.stdin!.write(`${op} ${args.length}\n${args.map((a) => `${a}\n`).join('')}`);
    });
  }

  /** Ends the shell; from now on its pool no longer hands it out (the exit itself takes a moment). */
  end(): void {
    this.finish();
    this.proc.stdin!.end();
  }

  private armIdle(): void {
    this.idleTimer = setTimeout(() => this.end(), this.idleMs);
    this.idleTimer.unref();
  }

  private receive(chunk: Buffer): void {
    if (this.ended) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    while (!this.reply) {
      const head = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
      const nl = head.subarray(0, MAX_HEADER_LINE + 1).indexOf(0x0a);
      if (nl < 0) return head.length > MAX_HEADER_LINE ? this.broken('a header line longer than 4 KiB') : undefined;
      const line = head.toString('utf8', 0, nl);
      this.chunks.length = 0;
      this.chunks.push(head.subarray(nl + 1));
      this.buffered = head.length - nl - 1;
      if (line.startsWith('+')) {
        this.pending?.onNotice?.(line.slice(1));
        continue;
      }
      const [code, out, err] = line.split(' ').map((n) => (/^\d{1,9}$/.test(n) ? Number(n) : NaN));
      if (!Number.isInteger(code) || !Number.isInteger(out) || !Number.isInteger(err)) return this.broken(`a header line that is not "<code> <out> <err>"`);
      if (out! + err! > MAX_ANSWER) return this.broken('an answer of more than 16 MiB');
      this.reply = { code: code!, out: out!, err: err! };
    }
    const { code, out, err } = this.reply;
    if (this.buffered < out + err) return;
    const body = Buffer.concat(this.chunks);
    const pending = this.pending;
    this.reply = undefined;
    this.pending = undefined;
    this.chunks.length = 0;
    this.buffered = 0;
    this.armIdle();
    pending?.resolve({ exitCode: code, stdout: body.subarray(0, out), stderr: body.toString('utf8', out, out + err) });
  }

  /** The shell broke its protocol: its operation fails and the shell is dropped (its command cut). */
  private broken(what: string): void {
    this.pending?.reject(new ShellGone(`the file shell broke its protocol (${what}); it was ended`));
    this.pending = undefined;
    this.chunks.length = 0;
    this.buffered = 0;
    this.finish();
    this.proc.stdout.destroy();
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.idleTimer);
    this.onEnd();
    this.pending?.reject(new ShellGone('the file shell ended during the operation'));
    this.pending = undefined;
  }
}
