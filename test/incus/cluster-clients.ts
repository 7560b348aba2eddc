import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { EventSource } from 'eventsource';
import type { Browser, Page } from 'playwright-core';
import { createToken, createUser } from '../../accounts/index.ts';
import { launchChromium } from '../../harness/browser.ts';
import type { EngineCli } from '../../harness/engine-cli.ts';
import type { TestService } from '../../harness/service.ts';
import { sshThroughEdge } from '../helpers/ssh-through-edge.ts';
import { servedCli, type BackgroundCli, type CliResult } from '../helpers/svc-cli.ts';

const run = promisify(execFile);

export const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The service's slice of the rig's pool (cluster-runtime.ts holds another in a store of its own). */
export const SERVICE_POOL = '100.64.249.0/24';

/** One of the user's sandboxes, made on `member`, with the clients that reach it. */
export interface MemberSandbox {
  name: string;
  member: string;
  cli: EngineCli;
  /** a file of random bytes put through the files API: its sha256 must survive loss and moves */
  file: Buffer;
}

/** What the cases of the service on the cluster share (cluster-loss.ts). */
export interface OnCluster {
  t: TestService;
  user: UserClients;
  /** one sandbox on each of m1, m2, m3, in that order */
  sandboxes: MemberSandbox[];
  /** `npx svc …` as the operator runs it, on the service's store, Redis and cluster */
  operator(...args: string[]): Promise<CliResult>;
  /** the same, left running in its own process group */
  operatorBackground(...args: string[]): BackgroundCli;
}

/**
 * One user of a test service with every client a user has (issue 34 §4: API, the served CLI, MCP, the
 * web UI in Chromium, curl at app addresses, ssh over the TLS port), each opened once and closed by
 * `close`. Everything goes through the service's TLS port or its API, as from a user's machine.
 */
export interface UserClients {
  name: string;
  token: string;
  ca: string;
  api(method: string, route: string, body?: unknown): Promise<{ status: number; body: any }>;
  /** status, headers (lower case) and body of GET (or HEAD) https://<label>.<domain>/ through the edge; `ms` it took; curl's --max-time */
  app(label: string, method?: 'GET' | 'HEAD', maxTimeS?: number): Promise<{ status: number; head: string; body: string; ms: number }>;
  /** a command over ssh through the TLS port (test/helpers/ssh-through-edge.ts) */
  ssh(sandbox: string, command: string): Promise<string>;
  upload(sandbox: string, file: string, bytes: Buffer): Promise<void>;
  download(sandbox: string, file: string): Promise<Buffer>;
  /** the first `count` log lines of `container` (SSE), as the panel's log view gets them */
  logLines(sandbox: string, container: string, count: number): Promise<string[]>;
  /** the served user CLI (`/cli/svc.mjs`) with SVC_SANDBOX=sandbox */
  svc(sandbox: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** an MCP tool call: its JSON answer, or its error text */
  tool(name: string, args: Record<string, unknown>): Promise<{ error: string; value: any }>;
  /** the web UI signed in (Chromium via playwright-core) */
  page(): Promise<Page>;
  site: string;
  close(): Promise<void>;
}

export async function userClients(t: TestService, dir: string, who: string): Promise<UserClients> {
  const created = await createUser(t.service.store, { name: `${who}-${t.config.redisPrefix}` });
  const token = (await createToken(t.service.store, { userId: created.user.id })).value;
  const port = t.config.httpsPort;
  const ca = path.join(dir, 'ca.pem');
  fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
  const ssh = await sshThroughEdge(t, token, dir);
  const userCli = await servedCli(t.url, dir);
  const transport = new StreamableHTTPClientTransport(new URL(`${t.url}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  const mcp = new Client({ name: 'cluster-test', version: '1.0.0' });
  await mcp.connect(transport);
  const site = `https://${t.config.domain}:${port}`;
  let browser: Browser | undefined;
  let page: Page | undefined;
  const auth = { authorization: `Bearer ${token}` };
  const files = (sandbox: string, file: string) => `${t.url}/api/sandboxes/${sandbox}/files/content?path=${encodeURIComponent(file)}`;

  return {
    name: created.user.name,
    token,
    ca,
    site,
    api: (method, route, body) => t.api(method, route, token, body),
    async app(label, method = 'GET', maxTimeS = 30) {
      const host = `${label}.${t.config.domain}`;
      const t0 = Date.now();
      const { stdout } = await run('curl', ['-sS', method === 'HEAD' ? '-I' : '-i', '--max-time', String(maxTimeS), '--cacert', ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
      const [head, ...body] = stdout.split('\r\n\r\n');
      return { status: Number(/^HTTP\/[\d.]+ (\d+)/.exec(head!)?.[1]), head: head!.toLowerCase(), body: body.join('\r\n\r\n'), ms: Date.now() - t0 };
    },
    ssh: async (sandbox, command) => (await ssh(sandbox, command)).stdout,
    async upload(sandbox, file, bytes) {
      const res = await fetch(files(sandbox, file), { method: 'PUT', body: new Uint8Array(bytes), headers: auth });
      assert.equal(res.status, 200, `PUT ${file} of ${sandbox}: ${res.status} ${await res.text()}`);
    },
    async download(sandbox, file) {
      const res = await fetch(files(sandbox, file), { headers: auth });
      if (res.status !== 200) assert.fail(`GET ${file} of ${sandbox}: ${res.status} ${await res.text()}`);
      return Buffer.from(await res.arrayBuffer());
    },
    logLines(sandbox, container, count) {
      const lines: string[] = [];
      const es = new EventSource(`${t.url}/api/sandboxes/${sandbox}/logs/stream?tail=100`, {
        fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), ...auth } }),
      });
      return new Promise<string[]>((resolve, reject) => {
        const timer = setTimeout(() => { es.close(); reject(new Error(`${sandbox}: ${lines.length} of ${count} log lines of ${container} in 60 s`)); }, 60_000);
        es.addEventListener('log', (e) => {
          const l = JSON.parse(e.data) as { container: string; line: string };
          if (l.container === container) lines.push(l.line);
          if (lines.length >= count) { clearTimeout(timer); es.close(); resolve(lines); }
        });
      });
    },
    svc: (sandbox, ...args) => userCli({ token, sandbox }, ...args),
    async tool(name, args) {
      const res = await mcp.callTool({ name, arguments: args });
      const text = (res.content as Array<{ text: string }>)[0]!.text;
      return res.isError ? { error: text, value: undefined } : { error: '', value: JSON.parse(text) };
    },
    async page() {
      if (page) return page;
      browser = await launchChromium(t.config.domain);
      const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
      const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: created.user.name, password: created.password }) });
      const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
      assert.ok(cookie, `sign-in failed: ${signIn.status}`);
      await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
      page = await context.newPage();
      return page;
    },
    async close() {
      await mcp.close().catch(() => undefined);
      await browser?.close();
    },
  };
}
