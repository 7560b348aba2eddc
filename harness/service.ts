import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { createToken, createUser } from '../accounts/index.ts';
import { loadConfig, type Config } from '../core/config.ts';
import { logger } from '../core/logger.ts';
import { LABEL_INSTANCE } from '../lifecycle/runtime/docker-runtime.ts';
import { startService, type Service } from '../service.ts';
import { TEST_SECRET_KEY_FILE } from './secret-key.ts';
import { freePort } from './ports.ts';
import { sandboxDocker } from './sandbox-engine.ts';

/**
 * A whole service for one test file: its own data folder, SQLite store and Redis key prefix,
 * and its own label on every container, network and volume, so parallel or leftover runs never
 * meet. The API listens on a loopback port for real HTTP clients.
 */
export interface TestService {
  config: Config;
  service: Service;
  url: string;
  /** Opens the service again on the same data and Redis prefix (a controller restart); `meanwhile` runs while it is down. */
  restart(meanwhile?: () => Promise<void>): Promise<void>;
  user(name: string, opts?: { admin?: boolean }): Promise<{ id: string; token: string }>;
  limitedToken(userId: string, sandbox: string): Promise<string>;
  api(method: string, url: string, token: string | undefined, body?: unknown): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

export async function startTestService(overrides: Partial<Config> = {}): Promise<TestService> {
  const id = `svct${randomBytes(3).toString('hex')}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `${id}-`));
  // the sandbox engine as the environment names it (as harness/sandbox-engine.ts reads it), and the
  // sandbox image (a build under test before it becomes svc-sandbox:latest); nothing else
  const { SVC_SANDBOX_RUNTIME, SVC_SANDBOX_DOCKER_HOST, SVC_DATA_PLANE, SVC_SANDBOX_IMAGE } = process.env;
  const base = loadConfig({ SVC_DATA_DIR: overrides.dataDir ?? dataDir, SVC_SANDBOX_RUNTIME, SVC_SANDBOX_DOCKER_HOST, SVC_DATA_PLANE, SVC_SANDBOX_IMAGE });
  const config: Config = { ...base, secretKeyFile: TEST_SECRET_KEY_FILE, redisPrefix: id, httpsPort: await freePort(), httpPort: 0, ...overrides };
  let service = await startService(config, logger);
  // a suite run with HAProxy (the default) must really have it own the port, not Node silently
  if (config.dataPlane === 'haproxy' && !service.edge.dataPlane?.pid) throw new Error('the data plane is haproxy but HAProxy does not run');
  let url = await listen(service);

  const t: TestService = {
    config,
    get service() { return service; },
    get url() { return url; },
    async restart(meanwhile) {
      await service.close();
      await meanwhile?.();
      service = await startService(config, logger);
      url = await listen(service);
    },
    async user(name, opts = {}) {
      const { user } = await createUser(service.store, { name: `${name}-${id}`, admin: opts.admin });
      const { value } = await createToken(service.store, { userId: user.id });
      return { id: user.id, token: value };
    },
    async limitedToken(userId, sandbox) {
      return (await createToken(service.store, { userId, sandbox })).value;
    },
    async api(method, route, token, body) {
      const res = await fetch(url + route, {
        method,
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await res.text();
      let parsed: unknown = text;
      try { parsed = JSON.parse(text); } catch { /* not JSON */ }
      return { status: res.status, body: parsed };
    },
    async close() {
      await service.close();
      await removeInstance(id);
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return t;
}

/**
 * The assertion message for an unexpected answer: its status and error body only. A body that is
 * not an error may be a sandbox record (engine client key, management tool password): never printed.
 */
export function answerOf(res: { status: number; body: any }): string {
  const error = res.body && typeof res.body === 'object' ? res.body.error : undefined;
  return `${res.status} ${error === undefined ? '(not an error: body not shown)' : JSON.stringify(error)}`;
}

async function listen(service: Service): Promise<string> {
  await service.api.listen({ host: '127.0.0.1', port: 0 });
  const address = service.api.server.address();
  if (!address || typeof address === 'string') throw new Error('API did not bind');
  return `http://127.0.0.1:${address.port}`;
}

/** Removes everything a test instance left: containers, networks, volumes, Redis keys. */
export async function removeInstance(id: string): Promise<void> {
  const docker = sandboxDocker();
  const filters = { label: [`${LABEL_INSTANCE}=${id}`] };
  for (const c of await docker.listContainers({ all: true, filters })) await docker.getContainer(c.Id).remove({ force: true, v: false });
  for (const n of await docker.listNetworks({ filters })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
  const { Volumes } = await docker.listVolumes({ filters });
  for (const v of Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => undefined);
  const redis = new Redis(loadConfig().redisUrl);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${id}:*`, 'COUNT', 500);
      if (keys.length) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/** Polls `check` until it returns a truthy value or the time runs out. */
export async function eventually<T>(check: () => Promise<T>, what: string, timeoutMs = 60_000, everyMs = 250): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
