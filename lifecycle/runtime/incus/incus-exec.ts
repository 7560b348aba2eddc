import type WebSocket from 'ws';
import type { IncusClient, Operation } from './incus-client.ts';

/** What `run` keeps of a command's output: enough for the service's small commands, never more. */
const MAX_OUTPUT = 1 << 20;
const MAX_STDERR = 64 << 10;

export interface IncusExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
}

/**
 * Runs a command to its end inside a running instance (non-interactive: stdin, stdout and stderr each
 * on a websocket of the exec operation, plus its control socket), feeds `input` to its stdin and
 * collects its output. Incus's stream protocol: binary messages carry data, an empty text message
 * ends a stream (shared/ws/rwc.go); the exit code is in the finished operation.
 */
export async function incusRun(client: IncusClient, instance: string, cmd: string[], input?: Buffer | string): Promise<IncusExecResult> {
  const { operation } = await client.call('POST', `/1.0/instances/${encodeURIComponent(instance)}/exec`, {
    command: cmd, environment: {}, interactive: false, 'wait-for-websocket': true, 'record-output': false,
  });
  if (!operation) throw new Error('Incus started no exec operation');
  const fds = (operation.metadata?.fds ?? {}) as Record<string, string>;
  const [stdin, stdout, stderr, control] = await Promise.all(['0', '1', '2', 'control'].map((fd) => open(client, operation, fds[fd])));
  try {
    const out = collect(stdout!, MAX_OUTPUT, 'stdout');
    const err = collect(stderr!, MAX_STDERR, 'stderr');
    if (input !== undefined && input.length > 0) stdin!.send(Buffer.from(input), { binary: true });
    stdin!.send('', { binary: false });
    const [o, e] = await Promise.all([out, err]);
    const done: Operation = await client.wait(operation);
    const code = Number((done.metadata as { return?: number } | null)?.return);
    return { exitCode: Number.isInteger(code) ? code : -1, stdout: o, stderr: e.toString('utf8') };
  } finally {
    for (const ws of [stdin, stdout, stderr, control]) ws?.close();
  }
}

function open(client: IncusClient, op: Operation, secret: string | undefined): Promise<WebSocket> {
  if (!secret) return Promise.reject(new Error('Incus gave the exec operation no websocket secret'));
  const ws = client.websocket(op, secret);
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

/** The stream's bytes until its end (an empty text message, or the socket closing). */
function collect(ws: WebSocket, max: number, what: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return resolve(Buffer.concat(chunks));
      size += data.length;
      if (size > max) {
        ws.close();
        return reject(new Error(`the command's ${what} is larger than ${max} bytes`));
      }
      chunks.push(data);
    });
    ws.once('close', () => resolve(Buffer.concat(chunks)));
    ws.once('error', reject);
  });
}
