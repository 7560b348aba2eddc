import type { RequestOptions } from 'node:https';
import { Agent, request } from 'undici';
import WebSocket from 'ws';

/**
 * A small client of the Incus REST API (https://linuxcontainers.org/incus/docs/main/rest-api/): the
 * unix socket of this machine's daemon, or a member's HTTPS address with a client certificate and the
 * cluster's certificate pinned (Incus certificates name no address, so the name is not checked; the
 * certificate itself is the trust anchor). No maintained npm client speaks Incus (docs/incus.md).
 */
export interface IncusEndpoint {
  /** The daemon's unix socket (/var/lib/incus/unix.socket). */
  socketPath?: string;
  /** https://address:8443 of a member, with the three PEM texts below. */
  url?: string;
  clientCert?: string;
  clientKey?: string;
  serverCert?: string;
}

/** Incus answered with an error (`status` is its HTTP status: 404 for what does not exist). */
export class IncusError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** Incus cannot be asked: refused, no socket, no answer in time. */
export class IncusUnreachable extends Error {
  constructor(readonly reason: string) {
    super(`Incus does not answer: ${reason}`);
  }
}

export interface Operation {
  id: string;
  status: string;
  status_code: number;
  err: string;
  metadata: Record<string, unknown> | null;
}

interface Envelope {
  type: 'sync' | 'async' | 'error';
  status_code: number;
  error?: string;
  error_code?: number;
  metadata: unknown;
  operation?: string;
}

/** Bounded: whatever Incus (or anything at its address) sends is read at most this far. */
const MAX_BODY = 32 << 20;
const REQUEST_TIMEOUT_MS = 30_000;

export class IncusClient {
  private readonly dispatcher: Agent;
  private readonly origin: string;

  constructor(readonly endpoint: IncusEndpoint, private readonly project = 'default') {
    if (endpoint.socketPath) {
      this.dispatcher = new Agent({ connect: { socketPath: endpoint.socketPath } });
      this.origin = 'http://incus';
    } else if (endpoint.url && endpoint.clientCert && endpoint.clientKey && endpoint.serverCert) {
      this.dispatcher = new Agent({ connect: { cert: endpoint.clientCert, key: endpoint.clientKey, ca: endpoint.serverCert, checkServerIdentity: () => undefined } });
      this.origin = endpoint.url.replace(/\/+$/, '');
    } else {
      throw new Error('an Incus endpoint is a unix socket, or an https URL with a client certificate, its key and the server certificate');
    }
  }

  /** Where this client goes, for logs (never a key). */
  get where(): string {
    return this.endpoint.socketPath ?? this.origin;
  }

  /** One request; the response's metadata (sync) or its operation (async). */
  async call<T = unknown>(method: string, path: string, body?: unknown, opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<{ metadata: T; operation?: Operation }> {
    const url = new URL(path, this.origin);
    if (!url.searchParams.has('project') && path.startsWith('/1.0/instances')) url.searchParams.set('project', this.project);
    let res;
    try {
      res = await request(url, {
        method: method as 'GET',
        dispatcher: this.dispatcher,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        headersTimeout: opts.timeoutMs ?? REQUEST_TIMEOUT_MS,
        bodyTimeout: opts.timeoutMs ?? REQUEST_TIMEOUT_MS,
        // a deadline given is the whole request's: the two above start once connected, and a connect to
        // a member whose link is gone waits undici's own 10 s (MemberHealth's pings would take that long)
        ...(opts.timeoutMs !== undefined || opts.signal
          ? { signal: AbortSignal.any([...(opts.timeoutMs !== undefined ? [AbortSignal.timeout(opts.timeoutMs)] : []), ...(opts.signal ? [opts.signal] : [])]) }
          : {}),
      });
    } catch (err) {
      throw new IncusUnreachable(`${this.where}: ${(err as Error).message}`);
    }
    const text = await readBounded(res.body);
    let env: Envelope;
    try {
      env = JSON.parse(text) as Envelope;
    } catch {
      throw new IncusError(res.statusCode, `Incus sent no JSON (HTTP ${res.statusCode})`);
    }
    if (env.type === 'error' || res.statusCode >= 400) throw new IncusError(env.error_code ?? res.statusCode, String(env.error ?? `HTTP ${res.statusCode}`).slice(0, 500));
    if (env.type === 'async') return { metadata: env.metadata as T, operation: env.metadata as Operation };
    return { metadata: env.metadata as T };
  }

  /**
   * A file of an instance as Incus serves it (`/1.0/instances/{name}/files`): its type, owner and mode
   * from the headers, and its body (a file's bytes, a symlink's target; a folder's entries are JSON).
   */
  async file(instance: string, path: string): Promise<{ type: string; uid: number; gid: number; mode: number; body: AsyncIterable<Buffer> }> {
    const url = new URL(`/1.0/instances/${encodeURIComponent(instance)}/files`, this.origin);
    url.searchParams.set('path', path);
    url.searchParams.set('project', this.project);
    let res;
    try {
      res = await request(url, { dispatcher: this.dispatcher, headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
    } catch (err) {
      throw new IncusUnreachable(`${this.where}: ${(err as Error).message}`);
    }
    if (res.statusCode >= 400) {
      const text = await readBounded(res.body);
      let message = `HTTP ${res.statusCode}`;
      try { message = String((JSON.parse(text) as Envelope).error ?? message); } catch { /* not JSON: the status says it */ }
      throw new IncusError(res.statusCode, message.slice(0, 500));
    }
    const header = (h: string) => String(res.headers[h] ?? '');
    return { type: header('x-incus-type'), uid: Number(header('x-incus-uid')), gid: Number(header('x-incus-gid')), mode: Number(header('x-incus-mode')), body: res.body };
  }

  /**
   * Writes a file (or makes a folder: `content` undefined) of an instance, running or not, through the
   * file API; `mode` in octal as Incus takes it. An existing file is replaced.
   */
  async putFile(instance: string, path: string, content: Buffer | string | undefined, owner: { uid: number; gid: number; mode: number }): Promise<void> {
    await this.fileRequest('POST', instance, path, content ?? '', {
      'x-incus-uid': String(owner.uid), 'x-incus-gid': String(owner.gid), 'x-incus-mode': owner.mode.toString(8).padStart(4, '0'),
      'x-incus-type': content === undefined ? 'directory' : 'file', 'x-incus-write': 'overwrite',
    });
  }

  /** Removes a file of an instance; one that is not there is no error. */
  async deleteFile(instance: string, path: string): Promise<void> {
    await this.fileRequest('DELETE', instance, path).catch((err) => {
      if (!(err instanceof IncusError && err.status === 404)) throw err;
    });
  }

  private async fileRequest(method: 'POST' | 'DELETE', instance: string, path: string, body?: Buffer | string, headers: Record<string, string> = {}): Promise<void> {
    const url = new URL(`/1.0/instances/${encodeURIComponent(instance)}/files`, this.origin);
    url.searchParams.set('path', path);
    url.searchParams.set('project', this.project);
    let res;
    try {
      res = await request(url, { method, dispatcher: this.dispatcher, headers, body, headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
    } catch (err) {
      throw new IncusUnreachable(`${this.where}: ${(err as Error).message}`);
    }
    const text = await readBounded(res.body);
    if (res.statusCode >= 400) {
      let message = `HTTP ${res.statusCode}`;
      try { message = String((JSON.parse(text) as Envelope).error ?? message); } catch { /* not JSON: the status says it */ }
      throw new IncusError(res.statusCode, message.slice(0, 500));
    }
  }

  async get<T>(path: string, opts?: { timeoutMs?: number; signal?: AbortSignal }): Promise<T> {
    return (await this.call<T>('GET', path, undefined, opts)).metadata;
  }

  /** Waits for an operation to end; rejects with its error when it failed. */
  async wait(op: Operation, timeoutS = 120): Promise<Operation> {
    const done = await this.get<Operation>(`/1.0/operations/${encodeURIComponent(op.id)}/wait?timeout=${timeoutS}`, { timeoutMs: (timeoutS + 10) * 1000 });
    if (done.status_code >= 400) throw new IncusError(done.status_code, done.err || done.status);
    return done;
  }

  /** A request that may start an operation, to its end. */
  async act(method: string, path: string, body?: unknown, timeoutS = 120): Promise<Operation | undefined> {
    const { operation } = await this.call(method, path, body);
    return operation ? this.wait(operation, timeoutS) : undefined;
  }

  /** A websocket of an operation (exec's stdin, stdout, stderr, control). */
  websocket(op: Operation, secret: string): WebSocket {
    return this.socket(`/1.0/operations/${encodeURIComponent(op.id)}/websocket?secret=${encodeURIComponent(secret)}`);
  }

  /** The events websocket of this client's project (`lifecycle`, `operation`, `logging`). */
  eventsSocket(type: string): WebSocket {
    return this.socket(`/1.0/events?type=${encodeURIComponent(type)}&project=${encodeURIComponent(this.project)}`);
  }

  private socket(path: string): WebSocket {
    if (this.endpoint.socketPath) return new WebSocket(`ws+unix://${this.endpoint.socketPath}:${path}`, { maxPayload: MAX_BODY });
    // the TLS options of https.request, which ws passes on (its own typing of checkServerIdentity differs)
    const tls: RequestOptions = {
      cert: this.endpoint.clientCert, key: this.endpoint.clientKey, ca: this.endpoint.serverCert, checkServerIdentity: () => undefined,
    };
    return new WebSocket(`${this.origin.replace(/^https/, 'wss')}${path}`, { ...(tls as WebSocket.ClientOptions), maxPayload: MAX_BODY });
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}

export async function readBounded(body: AsyncIterable<Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of body) {
    size += c.length;
    if (size > MAX_BODY) throw new IncusError(502, `Incus's answer is larger than ${MAX_BODY} bytes`);
    chunks.push(c);
  }
  return Buffer.concat(chunks).toString('utf8');
}
