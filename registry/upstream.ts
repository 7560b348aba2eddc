import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Agent, fetch as undiciFetch, type RequestInit } from 'undici';
import type { Logger } from '../core/logger.ts';
import { pollUntil } from '../core/poll.ts';
import { superviseProcess } from '../core/supervised-process.ts';

/** The registry the front forwards to: spawned here, or given by the operator. */
export interface Upstream {
  /**
   * Base of request URLs, no trailing slash: the operator's URL, or `http://localhost` for the
   * spawned registry, which is reached over its unix socket whatever the URL says.
   */
  readonly url: string;
  /** The spawned registry's unix socket; undefined for an operator's upstream. */
  readonly socketPath: string | undefined;
  /** The connections to the upstream (over the socket for the spawned one): the front's proxy uses it. */
  readonly dispatcher: Agent;
  /** A request to the upstream, `path` from `/v2/` on. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

export const REGISTRY_BINARY = '/usr/bin/docker-registry';
/** Longest unix socket path Linux takes (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH = 107;

function upstreamOver(url: string, socketPath: string | undefined, close: () => Promise<void>): Upstream {
  const dispatcher = new Agent({
    connections: 64,
    pipelining: 1,
    headersTimeout: 300_000,
    bodyTimeout: 300_000,
    ...(socketPath ? { connect: { socketPath } } : {}),
  });
  return {
    url,
    socketPath,
    dispatcher,
    // undici's own fetch with its own Agent (Node's built-in fetch bundles another undici); its
    // Response is the standard one the callers use.
    fetch: (p, init) => undiciFetch(`${url}${p}`, { ...init, dispatcher }) as unknown as Promise<Response>,
    async close() {
      await close();
      await dispatcher.close();
    },
  };
}

/**
 * An operator's upstream (`SVC_REGISTRY_UPSTREAM`, e.g. a distribution registry on S3 storage with
 * deletes enabled): used as it is; the service only checks that it answers.
 */
export async function externalUpstream(url: string, logger: Logger): Promise<Upstream> {
  // the URL goes into logs and errors; and fetch refuses a URL with credentials anyway
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (parsed?.username || parsed?.password) {
    throw new Error('SVC_REGISTRY_UPSTREAM carries a user name or password: give the URL without them (the upstream has no auth of its own; only the service may reach it)');
  }
  const upstream = upstreamOver(url.replace(/\/+$/, ''), undefined, async () => undefined);
  await waitReady(upstream, 10_000).catch(async (err) => {
    await upstream.close();
    throw new Error(`the registry upstream ${upstream.url} (SVC_REGISTRY_UPSTREAM) does not answer GET /v2/: ${(err as Error).message}`);
  });
  logger.info({ upstream: upstream.url }, 'registry: using the configured upstream');
  return upstream;
}

/**
 * Spawns Debian's distribution registry (`docker-registry serve`), storage under `<data>/registry`,
 * deletes enabled, and keeps it running: if it exits, it is started again after a back-off (1 s
 * doubling to 30 s). Its environment is emptied so no `REGISTRY_*` variable of ours changes its
 * configuration.
 *
 * It has no auth of its own, so only the front may reach it: it listens on a unix socket in a folder
 * of mode 0700 (`<data>/registry/socket/`), never on TCP, where any local process (or a sandbox
 * reaching the host's loopback) could push or delete behind the front's checks.
 */
export async function spawnUpstream(dataDir: string, logger: Logger, opts: { binary?: string } = {}): Promise<Upstream> {
  const log = logger.child({ part: 'registry-upstream' });
  const binary = opts.binary ?? REGISTRY_BINARY;
  if (!fs.existsSync(binary)) {
    throw new Error(`the distribution registry is not installed (${binary} missing): run "npm run setup" (Debian package docker-registry) or set SVC_REGISTRY_UPSTREAM`);
  }
  const dir = path.join(dataDir, 'registry');
  fs.mkdirSync(path.join(dir, 'storage'), { recursive: true, mode: 0o700 });
  const socketDir = path.join(dir, 'socket');
  fs.mkdirSync(socketDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(socketDir, 0o700);
  const socketPath = path.join(socketDir, 'registry.sock');
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH) {
    throw new Error(`the registry's socket path ${socketPath} is longer than ${MAX_SOCKET_PATH} bytes: use a shorter SVC_DATA_DIR`);
  }
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
      net: 'unix',
      addr: socketPath,
      // Locations relative to the request, so they are right behind the front whatever its host.
      relativeurls: true,
      secret: fs.readFileSync(secretFile, 'utf8').trim(),
      draintimeout: '2s',
      headers: { 'X-Content-Type-Options': ['nosniff'] },
    },
  };
  const configFile = path.join(dir, 'config.yml'); // JSON is YAML
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2), { mode: 0o600 });

  const supervised = superviseProcess({
    name: 'registry upstream',
    binary,
    args: ['serve', configFile],
    logger: log,
    onLine(_stream, line) {
      let entry: { level?: string; msg?: string } = {};
      try { entry = JSON.parse(line); } catch { entry = { msg: line }; }
      if (entry.level === 'error' || entry.level === 'fatal' || entry.level === 'panic') log.error({ upstream: entry }, 'registry upstream: %s', entry.msg);
      else log.debug({ upstream: entry }, 'registry upstream: %s', entry.msg);
    },
    beforeStart: () => fs.rmSync(socketPath, { force: true }), // left by a registry that was killed: it would refuse to listen
    firstBackoffMs: 1000,
    maxBackoffMs: 30_000,
  });
  const upstream = upstreamOver('http://localhost', socketPath, () => supervised.stop());
  try {
    await waitReady(upstream, 15_000);
  } catch (err) {
    await upstream.close();
    throw new Error(`the distribution registry did not start on ${socketPath}: ${(err as Error).message}`);
  }
  log.info({ socketPath, storage: config.storage.filesystem.rootdirectory }, 'registry upstream ready');
  return upstream;
}

async function waitReady(upstream: Upstream, timeoutMs: number): Promise<void> {
  await pollUntil('no answer', async () => {
    const res = await upstream.fetch('/v2/', { signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.status === 200 || res.status === 401 || `HTTP ${res.status}`;
  }, { timeoutMs });
}
