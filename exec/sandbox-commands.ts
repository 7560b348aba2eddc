import { PassThrough, type Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { Lifecycle } from '../lifecycle/index.ts';
import type { SandboxExecutor } from '../lifecycle/index.ts';
import { WITH_SECRETS } from './secret-delivery.ts';

export const DEFAULT_TIMEOUT_S = 60;
export const MAX_TIMEOUT_S = 3600;
/** Most of each stream that a one-call exec answers with; the rest is read and dropped. */
export const OUTPUT_LIMIT = 1024 * 1024;
/** A command that ignores SIGTERM at its timeout gets SIGKILL this much later. */
const KILL_AFTER_S = 2;
/**
 * Past its timeout by this much (a process that left its process group and holds the output
 * open), the engine connection is cut: the caller gets its answer whatever the command does.
 */
const GUARD_MS = 5_000;
/** A long command is activity: the idle countdown is renewed while it runs (recordActivity throttles). */
const ACTIVITY_EVERY_MS = 30_000;
/** Exit codes of coreutils `timeout` when it ended the command (TERM, then KILL). */
const TIMEOUT_CODES = new Set([124, 137]);

export interface CommandInput {
  /** argv, or one string run by `sh -c`. */
  command: string | string[];
  /** Text written to the command's stdin, then closed; without it stdin is empty. */
  stdin?: string;
  /** Seconds; 1..MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S when absent. */
  timeout?: number;
}

export interface CommandEnd {
  exit_code: number;
  timed_out: boolean;
  /** The sandbox was asleep (or in deep sleep) and was woken for this command. */
  woke: boolean;
  duration_ms: number;
}

export interface CommandResult extends CommandEnd {
  stdout: string;
  stderr: string;
  /** stdout or stderr was longer than OUTPUT_LIMIT bytes and was cut there. */
  truncated: boolean;
}

/** Puts a sandbox's secrets in place before a session (exec/secret-delivery.ts). */
export interface SessionSecrets {
  ensure(sandbox: string): Promise<void>;
}

export interface RunningCommand {
  stdout: Readable;
  stderr: Readable;
  done: Promise<CommandEnd>;
}

/**
 * A user's command in their sandbox, as root in /root (what `docker exec` and ssh give): the
 * one-call exec of the API and the MCP tool, and its streaming variant. The sandbox is woken
 * first when it sleeps (E2B resumes a paused sandbox on connect the same way). The timeout is
 * coreutils `timeout` inside the sandbox, which signals the command's whole process group.
 */
export class SandboxCommands {
  constructor(
    private readonly exec: SandboxExecutor,
    private readonly lifecycle: Lifecycle,
    /** With it, sessions get the owner's secrets as environment variables (issue 35). */
    private readonly secrets?: SessionSecrets,
  ) {}

  /** Runs to the end and answers with both streams, each cut at OUTPUT_LIMIT. */
  async run(sandbox: string, input: CommandInput): Promise<CommandResult> {
    const cmd = await this.start(sandbox, input);
    const out = { stdout: new BoundedText(OUTPUT_LIMIT), stderr: new BoundedText(OUTPUT_LIMIT) };
    cmd.stdout.on('data', (c: Buffer) => out.stdout.push(c));
    cmd.stderr.on('data', (c: Buffer) => out.stderr.push(c));
    const end = await cmd.done;
    return { ...end, stdout: out.stdout.text(), stderr: out.stderr.text(), truncated: out.stdout.cut || out.stderr.cut };
  }

  /**
   * Starts the command and hands out its streams as they come (stdout with backpressure down
   * to the engine connection). Destroying `stdout` cuts the connection: the command gets
   * SIGPIPE when it next writes, and its timeout ends it otherwise.
   */
  async start(sandbox: string, input: CommandInput): Promise<RunningCommand> {
    const woke = await this.wakeIfAsleep(sandbox);
    const timeoutS = input.timeout ?? DEFAULT_TIMEOUT_S;
    const argv = typeof input.command === 'string' ? ['sh', '-c', input.command] : input.command;
    const stderr = new PassThrough();
    const began = Date.now();
    this.lifecycle.clock.recordActivity(sandbox);
    const withSecrets = await this.secretsFor(sandbox, (line) => stderr.write(line));
    const proc = await this.exec.start(sandbox, [...withSecrets, 'timeout', '-k', String(KILL_AFTER_S), String(timeoutS), ...argv], {
      stdin: input.stdin !== undefined,
      workingDir: '/root',
      onStderr: (chunk) => stderr.write(chunk),
    });
    if (proc.stdin) {
      proc.stdin.on('error', () => undefined); // a command that exits without reading its stdin is no error
      proc.stdin.end(input.stdin);
    }
    let guarded = false;
    const guard = setTimeout(() => { guarded = true; proc.stdout.destroy(); }, timeoutS * 1000 + GUARD_MS);
    const activity = setInterval(() => this.lifecycle.clock.recordActivity(sandbox), ACTIVITY_EVERY_MS);
    const done = proc.done
      .then(({ exitCode }) => {
        const ms = Date.now() - began;
        return { exit_code: exitCode, timed_out: TIMEOUT_CODES.has(exitCode) && ms >= timeoutS * 1000, woke, duration_ms: ms };
      })
      .catch((err) => {
        if (!guarded) throw err;
        return { exit_code: 124, timed_out: true, woke, duration_ms: Date.now() - began };
      })
      .finally(() => {
        clearTimeout(guard);
        clearInterval(activity);
        stderr.end();
        this.lifecycle.clock.recordActivity(sandbox);
      });
    done.catch(() => undefined); // the caller awaits it after reading the streams
    return { stdout: proc.stdout, stderr, done };
  }

  /**
   * A login shell on a terminal as root (the web UI's terminal), bash where the sandbox has it.
   * The sandbox is woken first; what the user types counts as activity (`typed`).
   */
  async terminal(sandbox: string, size: { cols: number; rows: number }) {
    await this.wakeIfAsleep(sandbox);
    const withSecrets = await this.secretsFor(sandbox, () => undefined);
    const term = await this.exec.startTerminal(sandbox, [...withSecrets, 'sh', '-c', 'command -v bash >/dev/null && exec bash -l || exec sh -l'], size);
    return { ...term, typed: () => this.lifecycle.clock.recordActivity(sandbox) };
  }

  /**
   * The sandbox's secrets in place, and the command prefix that puts them in the session's
   * environment. A write that fails is said on the session's stderr: the command runs without them.
   */
  private async secretsFor(sandbox: string, say: (line: string) => void): Promise<string[]> {
    if (!this.secrets) return [];
    try {
      await this.secrets.ensure(sandbox);
    } catch (err) {
      say(`svc: the secrets could not be put in place (${(err as Error).message}); this command runs without the new ones\n`);
    }
    return WITH_SECRETS;
  }

  private async wakeIfAsleep(sandbox: string): Promise<boolean> {
    if ((await this.lifecycle.status(sandbox)).status === 'running') return false;
    await this.lifecycle.start(sandbox);
    return true;
  }
}

/** The first `limit` bytes of a stream as UTF-8 text (a character cut at the limit is dropped). */
class BoundedText {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  cut = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    const room = this.limit - this.size;
    if (chunk.length > room) this.cut = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(kept);
    this.size += kept.length;
  }

  text(): string {
    const bytes = Buffer.concat(this.chunks);
    // write() keeps back a character cut at the end; end() would turn it into U+FFFD
    return this.cut ? new StringDecoder('utf8').write(bytes) : bytes.toString('utf8');
  }
}
