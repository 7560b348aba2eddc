import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { hashPassword } from '../../core/passwords.ts';
import { logger } from '../../core/logger.ts';
import { buildManager } from '../../manager/server.ts';

const run = promisify(execFile);

/** The compose v2 binary on this machine (the CLI plugin setup installs). */
export const COMPOSE_BIN = process.env.MANAGER_COMPOSE_BIN || '/usr/libexec/docker/cli-plugins/docker-compose';

export interface Reply {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

/** A client of one tool as a script would use it: fetch, JSON in and out. */
export async function call(base: string, method: string, route: string, opts: { jwt?: string; key?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.jwt) headers.authorization = `Bearer ${opts.jwt}`;
  if (opts.key) headers['x-api-key'] = opts.key;
  let body: BodyInit | undefined;
  if (opts.body instanceof FormData || typeof opts.body === 'string' || opts.body instanceof Uint8Array) body = opts.body as BodyInit;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + route, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try { parsed = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/**
 * The management tool served in this process against the host engine, with its own data folder
 * and admin password. Stacks it makes are named with `prefix`, so `close` finds and removes them.
 */
export interface Tool {
  url: string;
  password: string;
  dataDir: string;
  /** A unique stack name prefix for this tool. */
  prefix: string;
  signIn(): Promise<string>;
  call(method: string, route: string, opts?: Parameters<typeof call>[3]): Promise<Reply>;
  close(): Promise<void>;
}

export async function startTool(): Promise<Tool> {
  const prefix = `mgrt${randomBytes(3).toString('hex')}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  const password = randomBytes(12).toString('base64url');
  const app = await buildManager({
    dataDir,
    dockerSocket: '/var/run/docker.sock',
    composeBin: COMPOSE_BIN,
    adminPasswordHash: await hashPassword(password),
    logger: logger.child({ part: 'manager' }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    password,
    dataDir,
    prefix,
    async signIn() {
      const r = await call(url, 'POST', '/api/auth', { body: { username: 'admin', password } });
      if (r.status !== 200) throw new Error(`sign-in answered ${r.status}: ${r.text}`);
      return r.body.jwt as string;
    },
    call: (method, route, opts) => call(url, method, route, opts),
    async close() {
      await app.close();
      await removeProjects(prefix);
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export async function docker(args: string[]): Promise<string> {
  return (await run('docker', args, { maxBuffer: 16 * 1024 * 1024 })).stdout.trim();
}

/** Containers of compose project `project` on the host engine, as `name id state` lines. */
export async function projectContainers(project: string): Promise<Array<{ name: string; id: string; state: string }>> {
  const out = await docker(['ps', '-a', '--filter', `label=com.docker.compose.project=${project}`, '--format', '{{.Names}} {{.ID}} {{.State}}']);
  return out ? out.split('\n').map((l) => { const [name, id, state] = l.split(' '); return { name: name!, id: id!, state: state! }; }).sort((a, b) => a.name.localeCompare(b.name)) : [];
}

/** Every compose project whose name starts with `prefix`: containers, networks, images tagged so. */
export async function removeProjects(prefix: string): Promise<void> {
  const ids = await docker(['ps', '-aq', '--filter', 'label=com.docker.compose.project']);
  for (const id of ids.split('\n').filter(Boolean)) {
    const project = await docker(['inspect', '-f', '{{ index .Config.Labels "com.docker.compose.project" }}', id]).catch(() => '');
    if (project.startsWith(prefix)) await docker(['rm', '-f', id]).catch(() => undefined);
  }
  for (const net of (await docker(['network', 'ls', '--format', '{{.Name}}'])).split('\n')) {
    if (net.startsWith(prefix)) await docker(['network', 'rm', net]).catch(() => undefined);
  }
  for (const image of (await docker(['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}'])).split('\n')) {
    if (image.startsWith(prefix)) await docker(['rmi', '-f', image]).catch(() => undefined);
  }
}

/**
 * A compose text of busybox services that sleep (the fixture image: nothing is pulled); `init`
 * so that they stop at once instead of after compose's 10-second grace period.
 */
export function sleepers(...services: string[]): string {
  return 'services:\n' + services.map((s) => `  ${s}:\n    image: svc-fixture-busybox\n    init: true\n    command: ["sleep", "3600"]\n    environment:\n      TAG: "\${TAG:-none}"\n`).join('');
}

/**
 * Resolves once GET <url>/api/status answers JSON (spec 4.5: an HTML answer is the waiting page).
 * Each try has its own timeout: a port the engine publishes accepts before the tool listens and
 * may then hold the connection without an answer.
 */
export async function waitForStatus(url: string, timeoutMs = 60_000): Promise<{ Version: string; InstanceID: string }> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  // a ref'd timer: undici's pending sockets do not keep the process alive on their own
  const keep = setInterval(() => undefined, 1000);
  try {
    while (Date.now() < deadline) {
      try {
        const res = await fetch(`${url}/api/status`, { signal: AbortSignal.timeout(3000) });
        const text = await res.text();
        if (res.status === 200 && (res.headers.get('content-type') ?? '').includes('application/json')) return JSON.parse(text);
        last = `${res.status} ${text.slice(0, 80)}`;
      } catch (err) {
        last = String((err as Error).message);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    clearInterval(keep);
  }
  throw new Error(`${url}/api/status did not answer JSON within ${timeoutMs} ms (last: ${last})`);
}
