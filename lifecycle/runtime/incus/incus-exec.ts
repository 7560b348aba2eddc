import { Duplex, Readable, Writable } from 'node:stream';
import type WebSocket from 'ws';
import type { IncusClient, Operation } from './incus-client.ts';

/** What `incusRun` keeps of a command's output: enough for the service's small commands, never more. */
const MAX_OUTPUT = 1 << 20;
const MAX_STDERR = 64 << 10;

export interface IncusExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
}

export interface IncusProcess {
  /** The command's stdout, with backpressure down to its websocket. */
  stdout: Readable;
  /** Its stdin, when asked for: ending it ends the command's stdin. */
  stdin: Writable | undefined;
  /** Once it has exited and its output was read: the exit code and stderr (cut at 64 KiB). */
  done: Promise<{ exitCode: number; stderr: string }>;
}

/**
 * Starts a command inside a running instance, non-interactive: stdin, stdout and stderr each on a
 * websocket of the exec operation, plus its control socket. Incus's stream protocol: binary messages
 * carry data, an empty text message ends a stream (shared/ws/rwc.go); the exit code is in the
 * finished operation.
 */
export async function incusStart(
  client: IncusClient, instance: string, cmd: string[],
  opts: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void } = {},
): Promise<IncusProcess> {
  const { operation } = await client.call('POST', `/1.0/instances/${encodeURIComponent(instance)}/exec`, {
    command: cmd, environment: {}, interactive: false, 'wait-for-websocket': true, 'record-output': false,
    ...(opts.workingDir ? { cwd: opts.workingDir } : {}),
  });
  if (!operation) throw new Error('Incus started no exec operation');
  const fds = (operation.metadata?.fds ?? {}) as Record<string, string>;
  // Control first: without a terminal Incus starts the command once 0, 1 and 2 are connected, and a
  // quick command's operation (and its sockets) ends before a control socket connected after them.
  // The readers listen from their socket's creation on.
  const control = connect(client, operation, fds.control);
  const sockets: WebSocket[] = [control];
  // a socket closed while it connects errs once more ("closed before the connection was established"):
  // heard here, as every error of a socket whose command is over
  const closeAll = () => { for (const ws of sockets) { ws.on('error', () => undefined); ws.close(); } };
  let stdout: Readable;
  let stderr: Promise<Buffer>;
  let stdinSocket: WebSocket;
  try {
    await opened(control);
    const out = connect(client, operation, fds['1']);
    const err = connect(client, operation, fds['2']);
    sockets.push(out, err);
    stdout = readable(out);
    stderr = collect(err, MAX_STDERR, opts.onStderr);
    await Promise.all([opened(out), opened(err)]);
    stdinSocket = connect(client, operation, fds['0']);
    sockets.push(stdinSocket);
    await opened(stdinSocket);
  } catch (err) {
    closeAll();
    throw err;
  }
  const endStdin = () => { if (stdinSocket.readyState === stdinSocket.OPEN) stdinSocket.send('', { binary: false }); };
  const stdin = opts.stdin
    ? new Writable({
      write(chunk: Buffer, _enc, cb) { stdinSocket.send(chunk, { binary: true }, cb); },
      final(cb) { endStdin(); cb(); },
      destroy(_err, cb) { endStdin(); cb(null); },
    })
    : undefined;
  if (!stdin) endStdin();
  const done = (async () => {
    try {
      const [, e] = await Promise.all([new Promise((resolve) => stdout.once('close', resolve)), stderr]);
      const finished: Operation = await client.wait(operation);
      const code = Number((finished.metadata as { return?: number } | null)?.return);
      return { exitCode: Number.isInteger(code) ? code : -1, stderr: e.toString('utf8') };
    } finally {
      closeAll();
    }
  })();
  return { stdout, stdin, done };
}

/** A command to its end: `input` on its stdin, its output collected (refused beyond 1 MiB). */
export async function incusRun(client: IncusClient, instance: string, cmd: string[], input?: Buffer | string): Promise<IncusExecResult> {
  const p = await incusStart(client, instance, cmd, { stdin: true });
  const chunks: Buffer[] = [];
  let size = 0;
  const read = (async () => {
    for await (const c of p.stdout) {
      size += (c as Buffer).length;
      if (size > MAX_OUTPUT) {
        p.stdout.destroy();
        throw new Error(`the command's output is larger than ${MAX_OUTPUT} bytes`);
      }
      chunks.push(c as Buffer);
    }
  })();
  p.stdin!.end(input === undefined ? undefined : Buffer.from(input));
  await read;
  const { exitCode, stderr } = await p.done;
  return { exitCode, stdout: Buffer.concat(chunks), stderr };
}

/**
 * An interactive command on a terminal (`interactive: true`: one pty, its bytes both ways on the
 * operation's socket `0`); `resize` is a `window-resize` message on its control socket. The stream
 * ends when the command has exited (Incus says so with an empty text message); destroying it closes
 * both sockets.
 */
export async function incusTerminal(
  client: IncusClient, instance: string, cmd: string[], size: { cols: number; rows: number },
): Promise<{ stream: Duplex; resize(size: { cols: number; rows: number }): Promise<void> }> {
  const { operation } = await client.call('POST', `/1.0/instances/${encodeURIComponent(instance)}/exec`, {
    command: cmd, environment: { TERM: 'xterm-256color', HOME: '/root' }, cwd: '/root', interactive: true,
    'wait-for-websocket': true, 'record-output': false, width: size.cols, height: size.rows,
  });
  if (!operation) throw new Error('Incus started no exec operation');
  const fds = (operation.metadata?.fds ?? {}) as Record<string, string>;
  const control = connect(client, operation, fds.control);
  const data = connect(client, operation, fds['0']);
  const stream = new Duplex({
    read() { data.resume(); },
    write(chunk: Buffer, _enc, cb) {
      if (data.readyState !== data.OPEN) return cb(new Error('the terminal has ended'));
      data.send(chunk, { binary: true }, cb);
    },
    final(cb) { data.close(); cb(); },
    destroy(err, cb) { data.close(); control.close(); cb(err); },
  });
  data.on('message', (chunk: Buffer, isBinary: boolean) => {
    // an empty text message: the pty's end (the command exited). Incus ends the operation only once
    // this side closes the socket, so it is closed here
    if (!isBinary) {
      stream.push(null);
      return void data.close();
    }
    if (!stream.push(chunk)) data.pause();
  });
  data.once('close', () => { stream.push(null); control.close(); });
  data.once('error', (err) => stream.destroy(err));
  control.on('error', () => undefined); // the data socket says what matters
  try {
    await Promise.all([opened(control), opened(data)]);
  } catch (err) {
    stream.destroy();
    throw err;
  }
  const resize = async ({ cols, rows }: { cols: number; rows: number }) => {
    if (control.readyState !== control.OPEN) return;
    await new Promise<void>((resolve, reject) => control.send(
      JSON.stringify({ command: 'window-resize', args: { width: String(cols), height: String(rows) } }),
      (err) => (err ? reject(err) : resolve()),
    ));
  };
  return { stream, resize };
}

function connect(client: IncusClient, op: Operation, secret: string | undefined): WebSocket {
  if (!secret) throw new Error('Incus gave the exec operation no websocket secret');
  return client.websocket(op, secret);
}

function opened(ws: WebSocket): Promise<void> {
  if (ws.readyState === ws.OPEN) return Promise.resolve();
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
}

/**
 * A stream's data as a Readable that pauses the socket while its reader is behind. Its error (the
 * socket refused: a 500 while a member goes away) reaches whoever reads it; with nobody reading yet it
 * must not become the whole process's uncaught exception, as it did in the cluster test.
 */
function readable(ws: WebSocket): Readable {
  const out = new Readable({ read() { ws.resume(); }, destroy(err, cb) { ws.close(); cb(err); } });
  out.on('error', () => undefined);
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (!isBinary) return void out.push(null);
    if (!out.push(data)) ws.pause();
  });
  ws.once('close', () => out.push(null));
  ws.once('error', (err) => out.destroy(err));
  return out;
}

/** A stream's bytes until its end, kept up to `max` (the rest only goes to `each`); its failure is the caller's, also when heard late. */
function collect(ws: WebSocket, max: number, each?: (chunk: Buffer) => void): Promise<Buffer> {
  const bytes = new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return resolve(Buffer.concat(chunks));
      each?.(data);
      if (size < max) chunks.push(data.subarray(0, max - size));
      size += data.length;
    });
    ws.once('close', () => resolve(Buffer.concat(chunks)));
    ws.once('error', reject);
  });
  bytes.catch(() => undefined);
  return bytes;
}
