import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import WebSocket from 'ws';
import { createToken, createUser } from '../../accounts/index.ts';
import path from 'node:path';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { shortName } from '../../lifecycle/names.ts';
import { navigate } from '../helpers/navigate.ts';

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
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: site });
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    page = await context.newPage();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  it('runs a command typed into it and shows its output; follows the terminal size', async () => {
    await navigate(page, () => page.goto(`${site}/#/sandboxes/${name}`));
    await page.locator('.terminal-screen[data-state="open"]').waitFor({ timeout: 30_000 });
    await page.locator('.xterm').click();
    await eventually(async () => /[#$] *$/m.test(await screen()), 'the prompt', 20_000, 100);
    await page.keyboard.type('echo "hi-$((6*7))"; stty size\n');
    const first = await eventually(async () => /hi-42\n(\d+) (\d+)/.exec(await screen()), 'the echo and the size', 20_000, 100);
    // paste as a user does (the clipboard, then Ctrl+V): two lines, run by Enter (bash takes pasted text as typed, bracketed)
    await page.evaluate((text) => navigator.clipboard.writeText(text), 'echo "pasted-$((2+3))"\necho "second-$((3*3))"');
    await page.keyboard.press('Control+V');
    await page.keyboard.press('Enter');
    await eventually(async () => { const text = await screen(); return /^pasted-5$/m.test(text) && /^second-9$/m.test(text); }, 'both pasted lines run', 20_000, 100);
    await page.setViewportSize({ width: 700, height: 900 });
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

  it('lists the containers as docker ps inside does, ports with their app addresses; restart from the panel restarts that one', async () => {
    const view = (await t.api('GET', `/api/sandboxes/${name}`, token)).body;
    const cli = new EngineCli(view.engine_access.host, (await t.service.lifecycle.status(name)).address!, 2376, view);
    try {
      await cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
      const serve = (text: string, port: number) => ['sh', '-c', `mkdir -p /www && echo ${text} > /www/index.html && exec httpd -f -p ${port} -h /www`];
      await cli.docker(['run', '-d', '--name', 'demo-web-1', '--label', 'com.docker.compose.project=demo', '-p', '8080:8080', 'busybox-app', ...serve('hello-from-demo', 8080)]);
      await cli.docker(['run', '-d', '--name', 'local-only', '-p', '127.0.0.1:9090:9090', 'busybox-app', ...serve('not-public', 9090)]);
      await cli.docker(['create', '--name', 'idle', 'busybox-app', 'true']);
      const inside = async (format: string) => (await t.api('POST', `/api/sandboxes/${name}/exec`, token, { command: `docker ps -a --format '${format}'` })).body.stdout as string;
      const started = async () => (await cli.docker(['inspect', '-f', '{{.State.StartedAt}}', 'demo-web-1'])).stdout.trim();
      await navigate(page, () => page.goto(`${site}/#/sandboxes/${name}`));
      const table = page.locator('table.containers');
      await table.locator('tr[data-container="idle"]').waitFor({ timeout: 20_000 });
      const shown = (await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => `${tr.getAttribute('data-container')} ${tr.querySelector('.state')!.textContent}`))).sort();
      assert.deepEqual(shown, (await inside('{{.Names}} {{.State}}')).trim().split('\n').sort());
      assert.match(await table.locator('tr[data-container="demo-web-1"]').innerText(), /demo\s+demo-web-1\s+busybox-app\s+running/);

      // the ports of each container as docker ps says them ("0.0.0.0:8080->8080/tcp, :::8080->8080/tcp")
      const psPorts = Object.fromEntries((await inside('{{.Names}}|{{.Ports}}')).trim().split('\n').map((line) => {
        const [container, ports = ''] = line.split('|');
        return [container, [...new Set([...ports.matchAll(/:(\d+)->(\d+)\/(\w+)/g)].map((m) => `${m[1]}→${m[2]}/${m[3]}`))].sort()];
      }));
      const panelPorts = async () => Object.fromEntries(await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [
        tr.getAttribute('data-container'), [...tr.querySelectorAll('.port')].map((p) => /^\d+→\d+\/\w+/.exec(p.textContent ?? '')?.[0]).sort(),
      ])));
      assert.deepEqual(await panelPorts(), psPorts);
      assert.deepEqual(psPorts['demo-web-1'], ['8080→8080/tcp']);
      assert.deepEqual(psPorts['local-only'], ['9090→9090/tcp']);
      // a port on all interfaces has its address, one on 127.0.0.1 has none; the address answers with the app
      const expected = `https://${shortName(name)}-demo-demo-web-1-port8080.${t.config.domain}:${t.config.httpsPort}`;
      const link = table.locator('tr[data-container="demo-web-1"] .port a');
      await eventually(async () => (await link.count()) === 1, 'the app address in the panel', 30_000, 250);
      assert.equal(await link.getAttribute('href'), expected);
      assert.equal(await table.locator('tr[data-container="local-only"] .port a').count(), 0, 'a loopback port has no public address');
      const [app] = await Promise.all([context.waitForEvent('page'), link.click()]);
      await app.locator('text=hello-from-demo').waitFor({ timeout: 30_000 });
      assert.equal(app.url(), `${expected}/`);
      await app.close();

      // httpd is the container's PID 1 and ignores SIGTERM: each restart and stop waits out the engine's
      // 10-s grace before its kill, and the panel says nothing went wrong (no alert) when it ends
      const actionEnded = async (button: string) => {
        await eventually(async () => page.getByRole('button', { name: button, exact: true }).isEnabled(), `the panel's ${button} done`, 60_000, 250);
        assert.deepEqual(await page.getByRole('alert').allInnerTexts(), [], 'the panel shows no error');
      };
      const before = await started();
      await page.getByRole('button', { name: 'Restart demo-web-1' }).click();
      await eventually(async () => (await started()) !== before, 'a new start of demo-web-1', 30_000, 250);
      await actionEnded('Stop demo-web-1');
      await page.getByRole('button', { name: 'Stop demo-web-1' }).click();
      await eventually(async () => (await inside('{{.Names}} {{.State}}')).includes('demo-web-1 exited'), 'demo-web-1 stopped', 30_000, 250);
      await actionEnded('Start demo-web-1');
      await page.getByRole('button', { name: 'Start demo-web-1', exact: true }).click();
      await eventually(async () => (await inside('{{.Names}} {{.State}}')).includes('demo-web-1 running'), 'demo-web-1 running again', 30_000, 250);
      await actionEnded('Stop demo-web-1');
    } finally {
      cli.dispose();
    }
  });

  it('shows what the sandbox uses now and a graph of it, in real numbers; a limited token reads its own only', async () => {
    const run = async (command: string) => assert.equal((await t.api('POST', `/api/sandboxes/${name}/exec`, token, { command })).body.exit_code, 0);
    // 64 MB more on disk: the figure is measured once a minute, so it shows in a minute at most
    const diskBefore = await eventually(async () => (await t.api('GET', `/api/sandboxes/${name}/usage`, token)).body.disk as { used_bytes: number } | null, 'a disk figure', 30_000, 500);
    await run('head -c 64M /dev/urandom > /root/usage-test.bin');
    await navigate(page, () => page.goto('about:blank'));
    await navigate(page, () => page.goto(`${site}/#/sandboxes/${name}`));
    const cpu = page.locator('.meter.cpu dd');
    const memory = page.locator('.meter.memory dd');
    await cpu.waitFor({ timeout: 20_000 });
    // the limits are the sandbox container's own, as the host engine set them
    const { HostConfig } = await sandboxDocker().getContainer(name).inspect();
    assert.match(await cpu.innerText(), new RegExp(` of ${HostConfig.NanoCpus! / 1e9} cores `));
    const api = (await t.api('GET', `/api/sandboxes/${name}/usage`, token)).body;
    assert.equal(api.memory.limit_bytes, HostConfig.Memory);
    assert.equal(api.cpu.limit_cores, HostConfig.NanoCpus! / 1e9);
    const idleBytes = Number(await memory.getAttribute('data-bytes'));
    assert.ok(idleBytes > 10e6, `${idleBytes} bytes in use: the inner engine alone takes more than 10 MB`);

    // a busy loop and a process holding 256 MB inside show in the figures and in the graph
    // (timeout passes a signal on to its whole process group: killing it ends what it runs)
    await run(`nohup sh -c 'echo $$ > /tmp/busy.pid; exec timeout 60 sh -c "while :; do :; done"' >/dev/null 2>&1 &`);
    await run(`nohup sh -c 'echo $$ > /tmp/hold.pid; exec timeout 60 sh -c "dd if=/dev/zero bs=256M count=1 2>/dev/null | sleep 60"' >/dev/null 2>&1 &`);
    await eventually(async () => Number(await cpu.getAttribute('data-cores')) >= 0.3, 'the busy loop in the CPU figure', 30_000, 250);
    await eventually(async () => Number(await memory.getAttribute('data-bytes')) >= idleBytes + 200e6, 'the 256 MB in the memory figure', 30_000, 250);
    const graph = page.locator('.usage-graph svg');
    await eventually(async () => Number(await graph.getAttribute('data-points')) >= 3, 'three points in the graph', 30_000, 250);
    const line = (await graph.locator('polyline.cpu').getAttribute('points'))!.trim().split(' ').map((xy) => xy.split(',').map(Number));
    assert.ok(line.length >= 3, `${line.length} points drawn`);
    const height = Number((await graph.getAttribute('viewBox'))!.split(' ')[3]);
    assert.ok(line.at(-1)![1]! < height, 'the last CPU point is above the baseline');
    const disk = page.locator('.meter.disk dd[data-bytes]');
    await eventually(async () => Number(await disk.getAttribute('data-bytes')) >= diskBefore.used_bytes + 60e6 || null, 'the 64 MB file in the disk figure', 90_000, 500);
    assert.ok(Number(await disk.getAttribute('data-bytes')) >= 64 * 2 ** 20, 'the disk figure counts the file');
    assert.match(await disk.innerText(), /^[\d.]+ [KMG]B used, [\d.]+ [KMGT]B free$/);
    await run('kill $(cat /tmp/busy.pid /tmp/hold.pid)');

    const limited = (await createToken(t.service.store, { userId: (await t.service.store.sandboxes.get(name))!.owner_id, sandbox: name })).value;
    const own = await t.api('GET', `/api/sandboxes/${name}/usage`, limited);
    assert.equal(own.status, 200, answerOf(own));
    assert.ok(own.body.history.length >= 3, 'the history sampled for the panel');
    const { user: stranger } = await createUser(t.service.store, { name: `stranger-${t.config.redisPrefix}` });
    const foreign = await t.api('GET', `/api/sandboxes/${name}/usage`, (await createToken(t.service.store, { userId: stranger.id })).value);
    assert.equal(foreign.status, 404);
  });
});
