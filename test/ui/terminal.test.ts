import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import WebSocket from 'ws';
import { createToken, createUser } from '../../accounts/index.ts';
import path from 'node:path';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

/** The sandbox panel's terminal and containers in Chromium, through the edge, signed in with the session cookie. */
describe('terminal and containers in the sandbox panel', () => {
  let t: TestService;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let site: string;
  let name: string;
  let cookie: string;
  let token: string;

  const screen = () => page.locator('.xterm-rows').innerText();

  before(async () => {
    t = await startTestService();
    site = `https://localhost:${t.config.httpsPort}`;
    const { user, password } = await createUser(t.service.store, { name: `term-${t.config.redisPrefix}` });
    token = (await createToken(t.service.store, { userId: user.id })).value;
    const res = await t.api('POST', '/api/sandboxes', token, { name: `term-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: user.name, password }) });
    cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1] ?? '';
    assert.ok(cookie, `sign-in failed: ${signIn.status}`);
    browser = await launchChromium('localhost');
    context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: site });
    page = await context.newPage();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  it('runs a command typed into it and shows its output; follows the terminal size', async () => {
    await page.goto(`${site}/#/sandboxes/${name}`);
    await page.locator('.terminal-screen[data-state="open"]').waitFor({ timeout: 30_000 });
    await page.locator('.xterm').click();
    await eventually(async () => /[#$] *$/m.test(await screen()), 'the prompt', 20_000, 100);
    await page.keyboard.type('echo "hi-$((6*7))"; stty size\n');
    const first = await eventually(async () => /hi-42\n(\d+) (\d+)/.exec(await screen()), 'the echo and the size', 20_000, 100);
    await page.setViewportSize({ width: 700, height: 900 });
    // paste as a user does (the clipboard, then Ctrl+V): two lines, run by Enter (bash takes pasted text as typed, bracketed)
    await page.evaluate((text) => navigator.clipboard.writeText(text), 'echo "pasted-$((2+3))"\necho "second-$((3*3))"');
    await page.keyboard.press('Control+V');
    await page.keyboard.press('Enter');
    await eventually(async () => { const text = await screen(); return /^pasted-5$/m.test(text) && /^second-9$/m.test(text); }, 'both pasted lines run', 20_000, 100);
    await page.keyboard.type('clear; stty size\n');
    const second = await eventually(async () => { const m = /^(\d+) (\d+)$/m.exec(await screen()); return m && Number(m[2]) < Number(first[2]) ? m : null; }, 'a narrower terminal', 20_000, 100);
    assert.equal(second[1], first[1], 'same number of rows');
  });

  it('refuses a websocket from another origin, and one without a session', async () => {
    const url = `wss://localhost:${t.config.httpsPort}/api/sandboxes/${name}/terminal`;
    const refused = (headers: Record<string, string>) => new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(url, { headers, rejectUnauthorized: false });
      ws.on('unexpected-response', (_req, res) => { resolve(res.statusCode ?? 0); ws.terminate(); });
      ws.on('open', () => { ws.close(); reject(new Error('the websocket was accepted')); });
      ws.on('error', () => undefined);
    });
    assert.equal(await refused({ cookie: `__Host-svc_session=${cookie}`, origin: 'https://evil.example' }), 403);
    assert.equal(await refused({ origin: site }), 401);
  });

  it('lists the containers as docker ps inside does; restart from the panel restarts that one', async () => {
    const view = (await t.api('GET', `/api/sandboxes/${name}`, token)).body;
    const cli = new EngineCli(view.engine_access.host, (await t.service.lifecycle.status(name)).address!, 2376, view);
    try {
      await cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
      await cli.docker(['run', '-d', '--name', 'demo-web-1', '--label', 'com.docker.compose.project=demo', '-p', '8080:8080', 'busybox-app', 'sh', '-c', 'exec httpd -f -p 8080']);
      await cli.docker(['create', '--name', 'idle', 'busybox-app', 'true']);
      const inside = async (format: string) => (await t.api('POST', `/api/sandboxes/${name}/exec`, token, { command: `docker ps -a --format '${format}'` })).body.stdout as string;
      const started = async () => (await cli.docker(['inspect', '-f', '{{.State.StartedAt}}', 'demo-web-1'])).stdout.trim();
      await page.goto(`${site}/#/sandboxes/${name}`);
      const table = page.locator('table.containers');
      await table.locator('tr[data-container="idle"]').waitFor({ timeout: 20_000 });
      const shown = (await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => `${tr.getAttribute('data-container')} ${tr.querySelector('.state')!.textContent}`))).sort();
      assert.deepEqual(shown, (await inside('{{.Names}} {{.State}}')).trim().split('\n').sort());
      assert.match(await table.locator('tr[data-container="demo-web-1"]').innerText(), /demo\s+demo-web-1\s+busybox-app\s+running\s+8080→8080\/tcp/);
      const before = await started();
      await page.getByRole('button', { name: 'Restart demo-web-1' }).click();
      await eventually(async () => (await started()) !== before, 'a new start of demo-web-1', 30_000, 250);
      await page.getByRole('button', { name: 'Stop demo-web-1' }).click();
      await eventually(async () => (await inside('{{.Names}} {{.State}}')).includes('demo-web-1 exited'), 'demo-web-1 stopped', 30_000, 250);
      await page.getByRole('button', { name: 'Start demo-web-1' }).click();
      await eventually(async () => (await inside('{{.Names}} {{.State}}')).includes('demo-web-1 running'), 'demo-web-1 running again', 30_000, 250);
    } finally {
      cli.dispose();
    }
  });
});
