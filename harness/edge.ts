import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { pino } from 'pino';
import type { AppRoute, EdgeBackend, ResolvedApp, ResolvedSandbox, SandboxStatus, WakeUnderWay } from '../edge/backend.ts';
import { dataPlaneMode } from '../core/config.ts';
import { RuntimeApi } from '../edge/dataplane/runtime-api.ts';
import { startEdge, type Edge, type StartEdgeOptions } from '../edge/index.ts';

export const logger = pino({ level: process.env.EDGE_TEST_LOG ?? 'silent' });

/**
 * A backend written by hand: the edge's interface is pure, so tests state the world directly.
 * It records every call the edge makes.
 */
export class TestBackend implements EdgeBackend {
  apps = new Map<string, { sandbox: string; target?: Omit<AppRoute, 'sandbox'> }>();
  sandboxes = new Map<string, { status: SandboxStatus; address?: string }>();
  wakeCalls: string[] = [];
  activity: string[] = [];
  /** Set to make requestWake refuse (the owner's wake limit). */
  wakeLimitReached = false;
  /**
   * Answers kept in memory, by label, as the real backend keeps a "running" state for a second:
   * resolveApp returns them unless asked for a fresh answer.
   */
  remembered = new Map<string, ResolvedApp>();

  addApp(label: string, sandbox: string, target?: Omit<AppRoute, 'sandbox'>): void {
    this.apps.set(label, { sandbox, target });
    if (!this.sandboxes.has(sandbox)) this.sandboxes.set(sandbox, { status: 'running', address: '127.0.0.1' });
  }

  private readonly sleepListeners = new Set<(sandbox: string) => void>();
  /** Wakes asked for, told when their sandbox is set running. */
  private readonly woken = new Map<string, Array<() => void>>();

  /**
   * A running sandbox set to another status went to sleep: listeners hear it, as the lifecycle tells
   * its edge backend's; one set running ends the wakes asked for it.
   */
  setStatus(sandbox: string, status: SandboxStatus): void {
    const sb = this.sandboxes.get(sandbox);
    this.sandboxes.set(sandbox, { ...sb, status });
    if (sb?.status === 'running' && status !== 'running') for (const listener of this.sleepListeners) listener(sandbox);
    if (status === 'running') {
      for (const ran of this.woken.get(sandbox) ?? []) ran();
      this.woken.delete(sandbox);
    }
  }

  onSleeping(listener: (sandbox: string) => void): () => void {
    this.sleepListeners.add(listener);
    return () => this.sleepListeners.delete(listener);
  }

  async resolveApp(label: string, opts: { fresh?: boolean } = {}): Promise<ResolvedApp | null> {
    const remembered = this.remembered.get(label);
    if (remembered && !opts.fresh) return remembered;
    this.remembered.delete(label); // a fresh answer replaces the one in memory
    const app = this.apps.get(label);
    if (!app) return null;
    const status = this.sandboxes.get(app.sandbox)?.status ?? 'exited';
    return {
      sandbox: app.sandbox,
      status,
      target: status === 'running' && app.target ? { sandbox: app.sandbox, ...app.target } : undefined,
    };
  }

  async resolveSandbox(name: string): Promise<ResolvedSandbox | null> {
    const sb = this.sandboxes.get(name);
    if (!sb) return null;
    return sb.status === 'running' ? { status: sb.status, address: sb.address } : { status: sb.status };
  }

  /** The wake's `running` settles once a test sets the sandbox running (setStatus). */
  async requestWake(sandbox: string): Promise<WakeUnderWay> {
    if (this.wakeLimitReached) {
      throw Object.assign(new Error('wake limit reached for this account (2 per hour); try again later or start the sandbox through the API'), {
        code: 'SVC_TOO_MANY_WAKES',
        retryAfter: 120,
      });
    }
    this.wakeCalls.push(sandbox);
    if (this.sandboxes.get(sandbox)?.status === 'running') return { running: Promise.resolve() };
    return { running: new Promise<void>((resolve) => this.woken.set(sandbox, [...(this.woken.get(sandbox) ?? []), resolve])) };
  }

  recordActivity(sandbox: string): void {
    this.activity.push(sandbox);
  }
}

export async function tmpDir(prefix = 'edge-test-'): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), prefix));
}

export { freePort } from './ports.ts';

export interface TestEdge {
  edge: Edge;
  port: number;
  dataDir: string;
  caFile: string;
  caPem: string;
  /**
   * Resolves once HAProxy has none of its routes for `name` (at once with the Node edge). A sleep
   * the backend tells reaches HAProxy's maps with one Runtime API call, so a connection made in
   * that call's time still goes to the sandbox, still running then (docs/data-plane.md, the
   * reference edge): a test of what an asleep sandbox's connections get waits for this first.
   */
  outOfDataPlane(name: string): Promise<void>;
  close(): Promise<void>;
}

export async function startTestEdge(
  backend: EdgeBackend,
  opts: Partial<Omit<StartEdgeOptions, 'config'>> & { config?: Partial<StartEdgeOptions['config']> } = {},
): Promise<TestEdge> {
  const dataDir = opts.config?.dataDir ?? (await tmpDir());
  const edge = await startEdge({
    // HAProxy owns the port, as in the service; SVC_DATA_PLANE=node runs the edge tests against the reference edge
    dataPlane: dataPlaneMode(process.env.SVC_DATA_PLANE),
    ...opts,
    config: { domain: 'localhost', httpsPort: 0, httpPort: 0, dataDir, tlsCertFile: undefined, tlsKeyFile: undefined, ...opts.config },
    backend,
    logger: opts.logger ?? logger,
    host: '127.0.0.1',
  });
  const caPem = edge.certificates.caPem ?? '';
  const caFile = path.join(dataDir, 'ca', 'ca.pem');
  return {
    edge,
    port: edge.httpsPort,
    dataDir,
    caFile,
    caPem,
    outOfDataPlane: async (name) => {
      const dp = edge.dataPlane;
      if (!dp) return;
      const api = new RuntimeApi(dp.files.adminSocket);
      const maps = [dp.files.appsMap, dp.files.engineMap, dp.files.tunnelsMap];
      for (let tries = 0; ; tries++) {
        const shown = await Promise.all(maps.map((m) => api.run(`show map ${m}`)));
        if (!shown.some((s) => s.includes(` ${name} `))) return;
        if (tries === 200) throw new Error(`${name} still in HAProxy's maps after 200 readings`);
        await sleep(10);
      }
    },
    close: async () => {
      await edge.close();
    },
  };
}

/** An upstream app on loopback. */
export async function startApp(handler: http.RequestListener): Promise<{ server: http.Server; port: number; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    server,
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface CurlResult {
  code: number;
  stdout: string;
  stderr: string;
  status: number;
  headers: Record<string, string>;
}

/**
 * Runs curl against the edge, resolving `host` to loopback (--resolve), trusting the test CA.
 * `-D -` puts the response head on stdout before the body; it is split off here.
 */
export function curl(port: number, host: string, urlPath: string, caFile: string | null, extra: string[] = []): Promise<CurlResult> {
  const args = ['-sS', '-D', '-', '--max-time', '20', '--resolve', `${host}:${port}:127.0.0.1`, ...(caFile ? ['--cacert', caFile] : ['-k']), ...extra, `https://${host}:${port}${urlPath}`];
  return new Promise((resolve) => {
    execFile('curl', args, { encoding: 'latin1', maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      const end = stdout.indexOf('\r\n\r\n');
      const head = end >= 0 ? stdout.slice(0, end) : '';
      const lines = head.split('\r\n');
      const status = Number(/^HTTP\/[\d.]+ (\d+)/.exec(lines[0] ?? '')?.[1] ?? 0);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ code, stdout: end >= 0 ? stdout.slice(end + 4) : stdout, stderr, status, headers });
    });
  });
}

/** Node's https client, with `host` resolved to loopback by a custom lookup. */
export function lookupLoopback(
  _hostname: string,
  options: unknown,
  cb: (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void,
): void {
  if (typeof options === 'object' && options && (options as { all?: boolean }).all) cb(null, [{ address: '127.0.0.1', family: 4 }]);
  else cb(null, '127.0.0.1', 4);
}

export function httpsRequest(
  port: number,
  host: string,
  options: https.RequestOptions & { ca: string; body?: string | Buffer },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; socket: tls.TLSSocket }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host, port, lookup: lookupLoopback as never, agent: false, ...options }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString(), socket: res.socket as tls.TLSSocket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A raw TLS connection to the edge for hand-written requests. */
export function tlsConnect(port: number, servername: string | undefined, opts: tls.ConnectionOptions = {}): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false, ...opts }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Reads from a socket until it closes (or `ms` pass); returns everything read and whether it closed. */
/** A real ClientHello for `servername` (Node's TLS client's first bytes), for clients that stall after it. */
export function clientHello(servername: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const catcher = net.createServer((s) => s.once('data', (d) => {
      resolve(d);
      s.destroy();
      catcher.close();
    }));
    catcher.listen(0, '127.0.0.1', () => {
      tls.connect({ host: '127.0.0.1', port: (catcher.address() as net.AddressInfo).port, servername, rejectUnauthorized: false }).on('error', () => undefined);
    });
    catcher.on('error', reject);
  });
}

export function readUntilClose(socket: net.Socket, ms = 5000): Promise<{ data: string; closed: boolean; error?: NodeJS.ErrnoException }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let error: NodeJS.ErrnoException | undefined;
    const timer = setTimeout(() => done(false), ms);
    const done = (closed: boolean) => {
      clearTimeout(timer);
      resolve({ data: Buffer.concat(chunks).toString('latin1'), closed, error });
    };
    if (socket.closed) return done(true); // closed before we looked (a data plane that stopped at once)
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', (e) => (error = e));
    socket.once('close', () => done(true));
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
