import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Redis } from 'ioredis';
import type { Browser, Page } from 'playwright-core';
import { createToken, createUser } from '../../accounts/index.ts';
import { UNAVAILABLE_HEADER, WAITING_HEADER } from '../../edge/index.ts';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { EngineProxy } from '../../harness/engine-proxy.ts';
import { SANDBOX_DOCKER_HOST } from '../../harness/sandbox-engine.ts';
import { WakeLimits } from '../../lifecycle/wake-limits.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { servedCli } from '../helpers/svc-cli.ts';
import { navigate } from '../helpers/navigate.ts';

const run = promisify(execFile);
const ARTIFACTS = path.resolve('test-artifacts/unavailable');

/**
 * Issue 20 item 4 on one host: the service's engine vanishes or falls silent (a socket in front of
 * the sandbox engine, cut or held; the shared engine itself never stops) and comes back. Real service, edge, curl,
 * MCP client, the served CLI and Chromium.
 */
describe('a sandbox whose engine does not answer is unavailable, then back as it was', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-unavailable-'));
  let proxy: EngineProxy;
  let t: TestService;
  let browser: Browser | undefined;
  let page: Page;
  let owner: { id: string; name: string; password: string; token: string };
  let name: string; // running, with an app and a file
  let asleep: string;
  let ca: string;
  let userCli: Awaited<ReturnType<typeof servedCli>>;
  let mcp: Client;

  const port = () => t.config.httpsPort;
  const appHost = () => `${name}-web.${t.config.domain}`;
  /** curl through the edge, as a user's browser or script reaches the app. */
  const app = async (method = 'GET') => {
    const { stdout } = await run('curl', ['-sS', ...(method === 'HEAD' ? ['-I'] : ['-i', '-X', method]), '--max-time', '30', '--cacert', ca, '--resolve', `${appHost()}:${port()}:127.0.0.1`, `https://${appHost()}:${port()}/`]);
    const [head, ...body] = stdout.split('\r\n\r\n');
    return { status: Number(/^HTTP\/[\d.]+ (\d+)/.exec(head!)?.[1]), head: head!.toLowerCase(), body: body.join('\r\n\r\n') };
  };
  /** A TLS connection to one of the sandbox's tunnel names: 'reset' when the edge drops it unanswered. */
  const tunnel = (serverName: string) => new Promise<'reset' | 'connected'>((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port: port(), servername: serverName, rejectUnauthorized: false });
    socket.once('secureConnect', () => { socket.destroy(); resolve('connected'); });
    socket.once('error', () => resolve('reset'));
    socket.once('close', () => resolve('reset'));
  });
  const svc = (...args: string[]) => userCli({ token: owner.token, sandbox: name }, ...args);
  const tool = async (name: string, args: Record<string, unknown>) => {
    const res = await mcp.callTool({ name, arguments: args });
    const text = (res.content as Array<{ text: string }>)[0]!.text;
    return res.isError ? { error: text, value: undefined } : { error: '', value: JSON.parse(text) };
  };
  /** Wakes app traffic asked for in this hour, as the service counts them (GET /me needs the engine for its running count). */
  const wakesUsed = async () => {
    const redis = new Redis(t.config.redisUrl);
    try {
      return await new WakeLimits(redis, t.config.redisPrefix, () => 0).used(owner.id);
    } finally {
      redis.disconnect();
    }
  };

  before(async () => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    proxy = await EngineProxy.start(path.join(tmp, 'engine.sock'), SANDBOX_DOCKER_HOST);
    t = await startTestService({ sandboxDockerHost: proxy.url, wakeHoldMs: 0 });
    const created = await createUser(t.service.store, { name: `unav-${t.config.redisPrefix}` });
    owner = { id: created.user.id, name: created.user.name, password: created.password, token: (await createToken(t.service.store, { userId: created.user.id })).value };
    ca = path.join(tmp, 'ca.pem');
    fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
    const [one, two] = await Promise.all(['unav', 'unav-asleep'].map((n) => t.api('POST', '/api/sandboxes', owner.token, { name: `${n}-${t.config.redisPrefix}`, idle_timeout: '1h' })));
    assert.equal(one!.status, 201, answerOf(one!));
    assert.equal(two!.status, 201, answerOf(two!));
    name = one!.body.name;
    asleep = two!.body.name;
    await t.service.lifecycle.sleep(asleep, 'the test wants one asleep');
    const cli = new EngineCli(one!.body.engine_access.host, (await t.service.lifecycle.status(name)).address!, 2376, one!.body);
    try {
      await cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
      await cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
        'mkdir -p /www && echo hello-app > /www/index.html && exec httpd -f -p 8080 -h /www']);
    } finally {
      cli.dispose();
    }
    await eventually(async () => (await app()).body.includes('hello-app'), 'the app through the edge', 120_000, 500);
    const transport = new StreamableHTTPClientTransport(new URL(`${t.url}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${owner.token}` } } });
    mcp = new Client({ name: 'test-agent', version: '1.0.0' });
    await mcp.connect(transport);
    const wrote = await tool('write_sandbox_file', { sandbox: name, path: '/root/kept.txt', text: 'still here\n' });
    assert.equal(wrote.error, '');
    userCli = await servedCli(t.url, tmp);

    browser = await launchChromium(t.config.domain);
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: owner.name, password: owner.password }) });
    const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
    assert.ok(cookie, `sign-in failed: ${signIn.status}`);
    const site = `https://${t.config.domain}:${port()}`;
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    page = await context.newPage();
  });
  after(async () => {
    await mcp?.close().catch(() => undefined);
    await browser?.close();
    await proxy?.restore(); // the instance's containers are removed through it
    await t?.close();
    await proxy?.cut();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('with its engine cut: reads answer unavailable, actions 503 with Retry-After, its addresses a page and no wake, its engine and shell reset', async () => {
    const wakes = await wakesUsed();
    await proxy.cut();

    // the API: rows and records answer; nothing fails the list
    const list = await t.api('GET', '/api/sandboxes', owner.token);
    assert.equal(list.status, 200, answerOf(list));
    assert.deepEqual(list.body.map((s: { name: string; status: string }) => [s.name, s.status]).sort(), [[asleep, 'unavailable'], [name, 'unavailable']].sort());
    const record = await t.api('GET', `/api/sandboxes/${name}`, owner.token);
    assert.equal(record.status, 200, answerOf(record));
    assert.equal(record.body.status, 'unavailable');
    assert.equal(record.body.stops_at, null);
    assert.match(record.body.hint, /does not answer/);
    assert.deepEqual(record.body.apps.map((a: { answers: boolean }) => a.answers), [false]);
    for (const [method, route, body] of [
      ['POST', `/api/sandboxes/${name}/start`, undefined],
      ['POST', `/api/sandboxes/${asleep}/start`, undefined],
      ['POST', `/api/sandboxes/${name}/keep-awake`, undefined],
      ['PATCH', `/api/sandboxes/${name}`, { idle_timeout: '5m' }],
      ['DELETE', `/api/sandboxes/${name}`, undefined],
      ['GET', `/api/sandboxes/${name}/files?path=/root`, undefined],
    ] as const) {
      const res = await fetch(`${t.url}${route}`, {
        method, headers: { authorization: `Bearer ${owner.token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body && JSON.stringify(body),
      });
      assert.equal(res.status, 503, `${method} ${route}`);
      assert.equal(res.headers.get('retry-after'), '5', `${method} ${route}`);
      assert.deepEqual(await res.json(), { error: { code: 'SVC_BUSY', message: 'the sandbox is unavailable: the engine that holds it does not answer; nothing was changed, try again shortly' } }, `${method} ${route}`);
    }
    assert.equal((await t.api('GET', `/api/sandboxes/${name}`, owner.token)).body.idle_timeout, '1h', 'the refused PATCH changed nothing');
    const openapi = (await t.api('GET', '/api/swagger/json', undefined)).body;
    // the Sandbox and SandboxSummary schemas (the ones with tunnel_urls)
    const statusValues = Object.values(openapi.components.schemas as Record<string, { properties?: Record<string, { anyOf?: Array<{ enum?: string[] }> }> }>)
      .filter((schema) => schema.properties?.tunnel_urls && schema.properties.status?.anyOf)
      .map((schema) => schema.properties!.status!.anyOf!.flatMap((a) => a.enum ?? []));
    assert.deepEqual(statusValues, [['running', 'exited', 'deep_sleep', 'unavailable'], ['running', 'exited', 'deep_sleep', 'unavailable']], 'the OpenAPI status values');

    // the edge: the running state it keeps for a second runs out, then every request gets the page
    await eventually(async () => (await app()).status === 503, 'the unavailable page', 10_000, 200);
    for (const method of ['GET', 'HEAD']) {
      const res = await app(method);
      assert.equal(res.status, 503, method);
      assert.match(res.head, /^retry-after: 10$/m);
      assert.match(res.head, new RegExp(`^${UNAVAILABLE_HEADER}: 1$`, 'm'));
      assert.doesNotMatch(res.head, new RegExp(`^${WAITING_HEADER}:`, 'm'), 'not the waiting page');
      if (method === 'GET') assert.match(res.body, /host is unavailable/);
    }
    assert.equal(await tunnel(`${name}-engine.${t.config.domain}`), 'reset', 'engine connections are reset');
    assert.equal(await tunnel(`${name}-shell-tcp.${t.config.domain}`), 'reset', 'ssh connections are reset');
    assert.equal(await tunnel(`${name}-web-tcp.${t.config.domain}`), 'reset', 'TCP twins are reset');
    assert.equal(await wakesUsed(), wakes, 'no wake was asked for');

    // the MCP tools and the served CLI
    const status = await tool('get_sandbox_status', { sandbox: name });
    assert.equal(status.value?.status, 'unavailable', status.error);
    assert.deepEqual((await tool('list_sandboxes', {})).value.map((s: { status: string }) => s.status), ['unavailable', 'unavailable']);
    const start = await tool('start_sandbox', { sandbox: asleep });
    assert.match(start.error, /^SVC_BUSY: the sandbox is unavailable: .* \(retry after 5 s\)$/);
    const shown = await svc('status');
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`^${name}  unavailable\\n.*does not answer`));
    assert.match((await svc('ls')).stdout, new RegExp(`^${asleep} +unavailable$`, 'm'));
    const ssh = await svc('ssh');
    assert.equal(ssh.code, 1);
    assert.match(ssh.stderr, /is unavailable: the engine that holds it does not answer .*\(SVC_BUSY\)/);

    // the web UI: the list badge and the panel's words
    const site = `https://${t.config.domain}:${port()}`;
    await navigate(page, () => page.goto(`${site}/#/sandboxes`));
    const row = page.locator('ul.sandboxes > li').filter({ hasText: name });
    await row.locator('.badge.unavailable', { hasText: 'unavailable' }).waitFor({ timeout: 30_000 });
    await row.getByText('its host does not answer').waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, 'list.png'), fullPage: true });
    await navigate(page, () => page.goto(`${site}/#/sandboxes/${name}`));
    await page.getByRole('heading', { level: 1, name: new RegExp(name) }).locator('.badge.unavailable').waitFor({ timeout: 30_000 });
    await page.getByText('Unavailable: the host that holds this sandbox does not answer').waitFor();
    assert.equal(await page.getByRole('button', { name: 'Start' }).count(), 0, 'no Start button: it cannot be started');
    await page.screenshot({ path: path.join(ARTIFACTS, 'panel.png'), fullPage: true });
  });

  it('with its engine back: its real state, its files and its app, nothing kept it unavailable', async () => {
    await proxy.restore();
    // the open panel looks again by itself
    await page.getByRole('heading', { level: 1, name: new RegExp(name) }).locator('.badge.running').waitFor({ timeout: 30_000 });
    await page.screenshot({ path: path.join(ARTIFACTS, 'panel-back.png'), fullPage: true });
    const list = await t.api('GET', '/api/sandboxes', owner.token);
    assert.deepEqual(list.body.map((s: { name: string; status: string }) => [s.name, s.status]).sort(), [[asleep, 'exited'], [name, 'running']].sort(), 'asleep stays asleep: not re-created, not deep sleep');
    const res = await app();
    assert.equal(res.status, 200, res.head);
    assert.match(res.body, /hello-app/);
    const kept = await tool('read_sandbox_file', { sandbox: name, path: '/root/kept.txt' });
    assert.equal(kept.value?.text, 'still here\n', kept.error);
    const record = await t.api('GET', `/api/sandboxes/${name}`, owner.token);
    assert.ok(Date.parse(record.body.stops_at) > Date.now(), 'its idle session is still open');
    const engine = new EngineCli(record.body.engine_access.host, '127.0.0.1', port(), record.body);
    try {
      assert.match((await engine.docker(['ps', '--format', '{{.Names}}'])).stdout, /^web$/m, 'its engine through the edge, its container still there');
    } finally {
      engine.dispose();
    }
    assert.equal((await svc('status')).stdout.split('\n')[0]!.split('  ')[1], 'running');
  });

  it('with its engine silent (connections accepted, never answered): unavailable within the 10-s inspect deadline, then back', async () => {
    await proxy.hang();
    try {
      const began = Date.now();
      const record = await t.api('GET', `/api/sandboxes/${name}`, owner.token);
      assert.equal(record.body.status, 'unavailable', answerOf(record));
      assert.ok(Date.now() - began < 15_000, `answered in ${Date.now() - began} ms`);
      await eventually(async () => (await app()).status === 503, 'the unavailable page', 30_000, 200);
    } finally {
      await proxy.restore();
    }
    // a host that failed an ask is probed every second: seen again within seconds, not at once
    await eventually(async () => (await t.api('GET', `/api/sandboxes/${name}`, owner.token)).body.status === 'running', 'the engine back', 5_000, 100);
    assert.match((await app()).body, /hello-app/);
  });
});
