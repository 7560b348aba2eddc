import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import type Docker from 'dockerode';
import { freePort } from '../../harness/ports.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Resolves when `proc` has exited (at once if it already has). */
function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => proc.once('exit', () => resolve()));
}

async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms); });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A Redis of the fault suite's own (never the shared one on 6379): nothing on disk, so a restart
 * comes back empty, like Redis on a typical host.
 */
export class OwnRedis {
  private proc: ChildProcess | undefined;

  private constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(): Promise<OwnRedis> {
    const redis = new OwnRedis(await freePort());
    await redis.up();
    return redis;
  }

  async up(): Promise<void> {
    this.proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'no'], { stdio: 'ignore' });
    const deadline = Date.now() + 20_000;
    for (;;) {
      const client = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      try {
        await client.connect();
        if ((await client.ping()) === 'PONG') return;
      } catch {
        if (Date.now() > deadline) throw new Error(`redis-server did not answer on ${this.port}`);
      } finally {
        client.disconnect();
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** SIGKILL: everything it held is gone. */
  async down(): Promise<void> {
    if (!this.proc) return;
    this.proc.kill('SIGKILL');
    await exited(this.proc);
    this.proc = undefined;
  }
}

export interface ServiceEnv {
  dataDir: string;
  redisUrl: string;
  prefix: string;
  httpsPort: number;
  apiPort: number;
  secretKeyFile: string;
  /** More environment (the shared store and registry of several processes). */
  extraEnv?: Record<string, string>;
}

/**
 * One real service process, `node --import tsx main.ts` as `npm start` runs it (tsx's own CLI would
 * put a second process between the test and the service, and a SIGKILL would miss the service).
 * Its pino lines are kept (the last few hundred) for waits and for failure messages.
 */
export class ServiceProcess {
  private proc: ChildProcess | undefined;
  private readonly lines: string[] = [];
  private readonly waiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();

  constructor(readonly env: ServiceEnv) {}

  get apiUrl(): string {
    return `http://127.0.0.1:${this.env.apiPort}`;
  }

  /** A request to this process's API as a client sends it: its status, and its body parsed when it is JSON. */
  async api(method: string, route: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
    const res = await fetch(this.apiUrl + route, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(120_000),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try { parsed = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, body: parsed };
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  get running(): boolean {
    return !!this.proc && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Starts the process and resolves once it logged "service started" (its API listens). */
  async start(): Promise<void> {
    const proc = spawn(process.execPath, ['--import', 'tsx', 'main.ts'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        NODE_ENV: 'test',
        LOG_LEVEL: 'info',
        SVC_DATA_DIR: this.env.dataDir,
        REDIS_URL: this.env.redisUrl,
        SVC_REDIS_PREFIX: this.env.prefix,
        SVC_HTTPS_PORT: String(this.env.httpsPort),
        SVC_HTTP_PORT: '0',
        SVC_API_PORT: String(this.env.apiPort),
        SVC_SECRET_KEY_FILE: this.env.secretKeyFile,
        ...this.env.extraEnv,
      },
    });
    this.proc = proc;
    let rest = '';
    const take = (d: Buffer) => {
      const text = rest + d.toString();
      const parts = text.split('\n');
      rest = parts.pop()!.slice(-64 * 1024);
      for (const line of parts) this.take(line);
    };
    proc.stdout!.on('data', take);
    proc.stderr!.on('data', take);
    const started = this.waitLog(/service started/, 120_000);
    const died = exited(proc).then(() => { throw new Error(`the service exited while starting:\n${this.tail()}`); });
    await Promise.race([started, died]);
  }

  private take(line: string): void {
    if (!line.trim()) return;
    this.lines.push(line);
    if (this.lines.length > 400) this.lines.shift();
    for (const w of this.waiters) {
      if (w.pattern.test(line)) {
        this.waiters.delete(w);
        w.resolve(line);
      }
    }
  }

  /** The next log line matching `pattern` (lines already logged do not count). */
  waitLog(pattern: RegExp, timeoutMs: number): Promise<string> {
    let entry!: { pattern: RegExp; resolve: (line: string) => void };
    const found = new Promise<string>((resolve) => { entry = { pattern, resolve }; this.waiters.add(entry); });
    return within(timeoutMs, `log line ${pattern}`, found).finally(() => this.waiters.delete(entry));
  }

  /** The last log lines, for a failure message. */
  tail(n = 40): string {
    return this.lines.slice(-n).join('\n');
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.proc) return;
    this.proc.kill(signal);
    await exited(this.proc);
  }

  /** SIGTERM and the time until the process was gone (ms); SIGKILL after `limitMs`. */
  async terminate(limitMs: number): Promise<number> {
    if (!this.proc || !this.running) return 0;
    const began = Date.now();
    this.proc.kill('SIGTERM');
    try {
      await within(limitMs, 'exit after SIGTERM', exited(this.proc));
    } catch {
      this.proc.kill('SIGKILL');
      await exited(this.proc);
    }
    return Date.now() - began;
  }
}

/** Processes of the registry a service in `dataDir` spawned (its config path names the folder). */
export function registryProcesses(dataDir: string): number[] {
  const config = path.join(dataDir, 'registry', 'config.yml');
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes('serve') && argv.includes(config) && !argv[0]!.endsWith('setpriv')) pids.push(Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return pids;
}

/**
 * Subscribes to `container`'s `action` events; resolves once subscribed, with `seen`, the next such
 * event (a kill moment: subscribe, then act).
 */
export async function engineEvent(docker: Docker, container: string, action: string, timeoutMs: number): Promise<{ seen: Promise<void> }> {
  const stream = await docker.getEvents({ filters: { type: ['container'], container: [container], event: [action] } }) as unknown as NodeJS.ReadableStream & { destroy(): void };
  const seen = new Promise<void>((resolve) => stream.once('data', () => resolve()));
  return { seen: within(timeoutMs, `engine event ${action} of ${container}`, seen).finally(() => stream.destroy()) };
}
