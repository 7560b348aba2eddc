import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Logger } from '../core/logger.ts';

/** The registry the front forwards to: spawned here, or given by the operator. */
export interface Upstream {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  readonly url: string;
  close(): Promise<void>;
}

export const REGISTRY_BINARY = '/usr/bin/docker-registry';

/**
 * An operator's upstream (`SVC_REGISTRY_UPSTREAM`, e.g. a distribution registry on S3 storage with
 * deletes enabled): used as it is; the service only checks that it answers.
 */
export async function externalUpstream(url: string, logger: Logger): Promise<Upstream> {
  const clean = url.replace(/\/+$/, '');
  await waitReady(clean, 10_000).catch((err) => {
    throw new Error(`the registry upstream ${clean} (SVC_REGISTRY_UPSTREAM) does not answer GET /v2/: ${(err as Error).message}`);
  });
  logger.info({ upstream: clean }, 'registry: using the configured upstream');
  return { url: clean, close: async () => undefined };
}

/**
 * Spawns Debian's distribution registry (`docker-registry serve`) on loopback, storage under
 * `<data>/registry`, deletes enabled, no auth of its own (only the front reaches it), and keeps it
 * running: if it exits, it is started again on the same port after a back-off (1 s doubling to 30 s).
 * Its environment is emptied so no `REGISTRY_*` variable of ours changes its configuration.
 */
export async function spawnUpstream(dataDir: string, logger: Logger, opts: { binary?: string; port?: number } = {}): Promise<Upstream> {
  const log = logger.child({ part: 'registry-upstream' });
  const binary = opts.binary ?? REGISTRY_BINARY;
  if (!fs.existsSync(binary)) {
    throw new Error(`the distribution registry is not installed (${binary} missing): run "npm run setup" (Debian package docker-registry) or set SVC_REGISTRY_UPSTREAM`);
  }
  const dir = path.join(dataDir, 'registry');
  fs.mkdirSync(path.join(dir, 'storage'), { recursive: true, mode: 0o700 });
  const port = opts.port ?? (await freeLoopbackPort());
  const secretFile = path.join(dir, 'http.secret');
  if (!fs.existsSync(secretFile)) fs.writeFileSync(secretFile, randomBytes(32).toString('hex'), { mode: 0o600 });
  const config = {
    version: 0.1,
    log: { level: 'warn', formatter: 'json', accesslog: { disabled: true } },
    storage: {
      filesystem: { rootdirectory: path.join(dir, 'storage') },
      delete: { enabled: true },
      cache: { blobdescriptor: 'inmemory' },
      maintenance: { uploadpurging: { enabled: true, age: '168h', interval: '24h', dryrun: false } },
      redirect: { disable: true },
    },
    http: {
      addr: `127.0.0.1:${port}`,
      // Locations relative to the request, so they are right behind the front whatever its host.
      relativeurls: true,
      secret: fs.readFileSync(secretFile, 'utf8').trim(),
      draintimeout: '2s',
      headers: { 'X-Content-Type-Options': ['nosniff'] },
    },
  };
  const configFile = path.join(dir, 'config.yml'); // JSON is YAML
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2), { mode: 0o600 });
  const url = `http://127.0.0.1:${port}`;

  let child: ChildProcess | undefined;
  let closing = false;
  let backoff = 1000;
  let restartTimer: NodeJS.Timeout | undefined;

  const start = () => {
    const proc = spawn(binary, ['serve', configFile], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    child = proc;
    const startedAt = Date.now();
    const relay = (d: Buffer) => {
      for (const line of d.toString().split('\n')) {
        if (!line.trim()) continue;
        let entry: { level?: string; msg?: string } = {};
        try { entry = JSON.parse(line); } catch { entry = { msg: line }; }
        if (entry.level === 'error' || entry.level === 'fatal' || entry.level === 'panic') log.error({ upstream: entry }, 'registry upstream: %s', entry.msg);
        else log.debug({ upstream: entry }, 'registry upstream: %s', entry.msg);
      }
    };
    proc.stdout!.on('data', relay);
    proc.stderr!.on('data', relay);
    proc.on('error', (err) => log.error({ err }, 'registry upstream: cannot start'));
    proc.on('exit', (code, signal) => {
      if (closing) return;
      if (Date.now() - startedAt > 60_000) backoff = 1000;
      log.error({ code, signal, restartInMs: backoff }, 'registry upstream exited; restarting');
      restartTimer = setTimeout(start, backoff);
      backoff = Math.min(backoff * 2, 30_000);
    });
  };
  start();
  try {
    await waitReady(url, 15_000);
  } catch (err) {
    closing = true;
    child?.kill('SIGKILL');
    throw new Error(`the distribution registry did not start on ${url}: ${(err as Error).message}`);
  }
  log.info({ url, storage: config.storage.filesystem.rootdirectory }, 'registry upstream ready');

  return {
    url,
    async close() {
      closing = true;
      if (restartTimer) clearTimeout(restartTimer);
      const proc = child;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      await new Promise<void>((resolve) => {
        const kill = setTimeout(() => proc.kill('SIGKILL'), 5000);
        proc.once('exit', () => {
          clearTimeout(kill);
          resolve();
        });
        proc.kill('SIGTERM');
      });
    },
  };
}

async function waitReady(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200 || res.status === 401) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(last);
}

function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}
