import { PassThrough, Writable, type Duplex, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import { FrameReader } from '../../core/engine-frames.ts';
import { resourceNames } from '../names.ts';
import { guarded } from './engine-client.ts';
import type { ExecProcess, ExecResult, SandboxExecutor } from './sandbox-runtime.ts';

/** Most of a failed command's stderr that is kept for its error message. */
const STDERR_LIMIT = 64 * 1024;
const MB = 1024 * 1024;
/** Most stdout that `run` collects (its callers read small things: /proc files, a size). */
export const RUN_OUTPUT_LIMIT = 4 * MB;

/**
 * Commands inside a sandbox container, through the host engine (beside DockerRuntime: the only
 * other code that touches sandbox containers). Output is streamed, never collected whole, so the
 * file routes can move any amount of data in flat memory.
 */
export class SandboxExec implements SandboxExecutor {
  constructor(private readonly docker: Docker) {}

  /**
   * `onStderr` receives every stderr chunk as it comes (a user's command: both streams whole);
   * `workingDir` defaults to /.
   */
  async start(sandbox: string, cmd: string[], opts: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void } = {}): Promise<ExecProcess> {
    const exec = await guarded(() => this.docker.getContainer(resourceNames(sandbox).container).exec({
      Cmd: cmd,
      AttachStdin: Boolean(opts.stdin),
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      User: '0:0',
      WorkingDir: opts.workingDir ?? '/',
    }));
    const socket = (await exec.start({ hijack: true, stdin: Boolean(opts.stdin) })) as unknown as Duplex;
    const stdout = new PassThrough({ highWaterMark: 256 * 1024 });
    let stderr = '';
    const read = demux(socket, stdout, (chunk) => {
      opts.onStderr?.(chunk);
      if (stderr.length < STDERR_LIMIT) stderr += chunk.toString('utf8');
    });
    const done = read.then(async () => ({ exitCode: await exitCode(exec), stderr: stderr.slice(0, STDERR_LIMIT) }));
    done.catch(() => undefined); // the caller may only look at stdout
    return { stdout, stdin: opts.stdin ? halfCloser(socket) : undefined, done };
  }

  /**
   * An interactive command on a terminal (the web UI's): one raw stream both ways (a TTY has no
   * frames), `resize` for the terminal's size. Ending the stream hangs the terminal up.
   */
  async startTerminal(sandbox: string, cmd: string[], size: { cols: number; rows: number }): Promise<{ stream: Duplex; resize(size: { cols: number; rows: number }): Promise<void> }> {
    const exec = await guarded(() => this.docker.getContainer(resourceNames(sandbox).container).exec({
      Cmd: cmd, AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: true, User: '0:0', WorkingDir: '/root',
      Env: ['TERM=xterm-256color'],
    }));
    const stream = (await exec.start({ hijack: true, stdin: true, Tty: true })) as unknown as Duplex;
    const resize = async ({ cols, rows }: { cols: number; rows: number }) => { await exec.resize({ w: cols, h: rows }); };
    await resize(size).catch(() => undefined); // the first resize may come before the engine has started it
    return { stream, resize };
  }

  /**
   * A tar stream of `path` from the engine's archive API (what `docker cp` reads): the engine
   * resolves the path inside the container, never on the host. Callers check the path first.
   */
  async getArchive(sandbox: string, path: string): Promise<Readable> {
    return (await guarded(() => this.docker.getContainer(resourceNames(sandbox).container).getArchive({ path }))) as unknown as Readable;
  }

  /**
   * Runs a command to its end and collects its (small) stdout. The sandbox's root can make any
   * command print without end: beyond RUN_OUTPUT_LIMIT the command is cut off and this rejects.
   */
  async run(sandbox: string, cmd: string[], input?: Buffer | string): Promise<ExecResult & { stdout: Buffer }> {
    const proc = await this.start(sandbox, cmd, { stdin: input !== undefined });
    if (proc.stdin) proc.stdin.end(input);
    const chunks: Buffer[] = [];
    let size = 0;
    proc.stdout.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= RUN_OUTPUT_LIMIT) chunks.push(c);
      else proc.stdout.destroy(); // ends the engine connection: the command gets SIGPIPE
    });
    const result = await proc.done.catch((err) => {
      if (size <= RUN_OUTPUT_LIMIT) throw err;
      return undefined;
    });
    if (!result || size > RUN_OUTPUT_LIMIT) throw new Error(`"${cmd[0]}" in sandbox "${sandbox}" wrote more than ${RUN_OUTPUT_LIMIT / MB} MiB; it was cut off`);
    return { ...result, stdout: Buffer.concat(chunks) };
  }
}

/**
 * Splits the engine's multiplexed stream (8-byte headers: stream id, 3 zero bytes, big-endian
 * length) into stdout, with backpressure, and stderr. Resolves when the stream ends.
 */
function demux(source: Duplex, stdout: PassThrough, onStderr: (chunk: Buffer) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    // payloads are slices of the chunks, never copied: a download costs no more than its bytes
    let blocked = false;
    const frames = new FrameReader((kind, payload) => {
      if (kind === 2) onStderr(payload);
      else if (kind === 1 && !stdout.write(payload)) blocked = true;
    });
    let settled = false;
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      if (err) {
        if (!stdout.destroyed) stdout.destroy(err);
        reject(err);
      } else {
        if (!stdout.destroyed) stdout.end();
        resolve();
      }
    };
    source.on('data', (chunk: Buffer) => {
      blocked = false;
      frames.push(chunk);
      if (blocked) {
        source.pause();
        stdout.once('drain', () => source.resume());
      }
    });
    source.on('end', () => finish());
    source.on('close', () => finish());
    source.on('error', (err) => finish(err));
    stdout.on('close', () => {
      // the reader went away (client closed the download): stop reading, let the command get SIGPIPE
      if (!settled) source.destroy();
    });
  });
}

/** A stdin that half-closes the connection when it ends or is destroyed. */
function halfCloser(socket: Duplex): Writable {
  return new Writable({
    highWaterMark: 256 * 1024,
    write(chunk, _enc, cb) {
      if (socket.destroyed) return cb(new Error('the command is gone'));
      if (socket.write(chunk)) return cb();
      // a connection that breaks while full (its engine killed) never drains: the write fails instead of waiting for ever
      const settle = (err?: Error) => {
        socket.off('drain', drained);
        socket.off('close', closed);
        cb(err);
      };
      const drained = () => settle();
      const closed = () => settle(new Error('the command is gone'));
      socket.once('drain', drained);
      socket.once('close', closed);
    },
    final(cb) {
      socket.end();
      cb();
    },
    destroy(err, cb) {
      if (!socket.destroyed && !socket.writableEnded) socket.end();
      cb(err);
    },
  });
}

async function exitCode(exec: Docker.Exec): Promise<number> {
  for (let i = 0; ; i++) {
    const info = await exec.inspect();
    if (!info.Running && info.ExitCode !== null) return info.ExitCode;
    if (i >= 50) throw new Error('the command did not report an exit code');
    await new Promise((r) => setTimeout(r, 20));
  }
}
