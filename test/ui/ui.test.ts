import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { createToken, createUser } from '../../accounts/index.ts';
import { UI_DIST } from '../../api/plugins/ui.ts';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { clickUntil, navigate } from '../helpers/navigate.ts';

const run = promisify(execFile);
const ARTIFACTS = path.resolve('test-artifacts/ui');
const FIXTURE = path.resolve('fixtures/busybox');
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };
const WAIT = 60_000;

/** The web UI in a real headless Chromium (issue 12), through the edge's TLS port like a user's browser. */
describe('web UI in Chromium', () => {
  let t: TestService;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let site: string;
  let user: { id: string; name: string; password: string };
  let token: string;
  let sandbox: string; // made through the API, with an app that logs
  let made: string | undefined; // made through the UI
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ui-test-'));

  const shot = async (name: string) => {
    for (const [label, size] of [['desktop', DESKTOP], ['phone', PHONE]] as const) {
      await page.setViewportSize(size);
      await page.screenshot({ path: path.join(ARTIFACTS, `${name}-${label}.png`), fullPage: true });
    }
    await page.setViewportSize(DESKTOP);
  };
  const goto = (url: string, p: Page = page) => navigate(p, () => p.goto(url));
  const reload = () => navigate(page, () => page.reload());
  /** A UI test; a failing one leaves a screenshot of the page in test-artifacts/ui/. */
  const uiTest = (name: string, fn: () => Promise<void>) => it(name, async () => {
    try {
      await fn();
    } catch (err) {
      await page?.screenshot({ path: path.join(ARTIFACTS, `failed-${name.replace(/[^a-z0-9]+/gi, '-').slice(0, 60)}.png`), fullPage: true }).catch(() => undefined);
      throw err;
    }
  });
  const panel = async (name: string) => {
    await goto(`${site}/#/sandboxes/${name}`);
    await page.getByRole('heading', { level: 1, name: new RegExp(name) }).waitFor({ timeout: WAIT });
  };
  const noSecrets = async () => {
    const html = await page.content();
    assert.ok(!/svc_[A-Za-z0-9_-]{43}/.test(html), 'no token value on the page');
    assert.ok(!html.includes('PRIVATE KEY'), 'no private key on the page');
    assert.ok(!html.includes(user.password), 'no password on the page');
  };

  before(async () => {
    assert.ok(fs.existsSync(path.join(UI_DIST, 'index.html')), `the web UI is not built in ${UI_DIST}: run npm run setup`);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    t = await startTestService();
    site = `https://localhost:${t.config.httpsPort}`;
    const created = await createUser(t.service.store, { name: `ui-${t.config.redisPrefix}` });
    user = { id: created.user.id, name: created.user.name, password: created.password };
    token = (await createToken(t.service.store, { userId: user.id, name: 'test helper' })).value;
    const res = await t.api('POST', '/api/sandboxes', token, { name: `ui-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    sandbox = res.body.name;
    const cli = new EngineCli(res.body.engine_access.host, (await t.service.lifecycle.status(sandbox)).address!, 2376, res.body);
    try {
      await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
      await cli.docker(['run', '-d', '--name', 'demo-web-1', '-p', '8080:8080', '--label', 'tunnel.subdomain=web', '--label', 'com.docker.compose.project=demo',
        '--label', 'com.docker.compose.service=web', 'busybox-app', 'sh', '-c', 'httpd -p 8080 -h /var/www; i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.5; done']);
    } finally {
      cli.dispose();
    }
    browser = await launchChromium('localhost');
    // The tests share this signed-in page; signing in itself is tested in a context of its own.
    context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: DESKTOP, acceptDownloads: true });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: site });
    const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: user.name, password: user.password }) });
    const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
    assert.ok(cookie, `sign-in failed: ${signIn.status}`);
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    page = await context.newPage();
    page.on('dialog', (d) => void d.accept());
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('serves the page with a strict CSP, no-cache index, immutable compressed assets', async () => {
    const index = await fetch(`${t.url}/`, { headers: { 'accept-encoding': 'br, gzip' } });
    assert.equal(index.status, 200);
    assert.equal(index.headers.get('cache-control'), 'no-cache');
    assert.match(index.headers.get('content-security-policy')!, /default-src 'none'; script-src 'self'; style-src 'self'/);
    const html = await index.text();
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    assert.ok(assets.length >= 2, html);
    for (const asset of assets) {
      const res = await fetch(t.url + asset, { headers: { 'accept-encoding': 'br' } });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
      assert.equal(res.headers.get('content-encoding'), 'br');
    }
    assert.equal((await fetch(`${t.url}/`, { headers: { 'if-none-match': index.headers.get('etag')! } })).status, 304);
    const gone = await fetch(`${t.url}/assets/index-gone.js`);
    assert.equal(gone.status, 404);
    assert.deepEqual(await gone.json(), { error: { code: 'SVC_NOT_FOUND', message: 'no such file of the web UI; reload the page' } });
  });

  uiTest('signs in with the keyboard, and a wrong password says so', async () => {
    const own = await browser.newContext({ ignoreHTTPSErrors: true, viewport: DESKTOP });
    const page = await own.newPage();
    await goto(site, page);
    await page.getByLabel('User name').waitFor();
    await page.keyboard.type(user.name); // the name field has the focus
    await page.keyboard.press('Tab');
    await page.keyboard.type('not-the-password');
    await page.keyboard.press('Enter');
    await page.getByRole('alert').filter({ hasText: 'wrong user name or password' }).waitFor();
    await page.getByLabel('Password').fill(user.password);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Sandboxes' }).waitFor();
    await page.locator(`a:text-is("${sandbox}")`).waitFor();
    const cookies = await own.cookies(site);
    const session = cookies.find((c) => c.name === '__Host-svc_session');
    assert.ok(session && session.httpOnly && session.secure && session.sameSite === 'Strict', JSON.stringify(cookies.map(({ value: _value, ...attributes }) => attributes)));
    await own.close();
  });

  uiTest('lists the sandboxes with their state, schedule and app addresses', async () => {
    await goto(`${site}/#/sandboxes`);
    const row = page.locator('ul.sandboxes > li', { hasText: sandbox });
    await row.locator('.badge', { hasText: 'running' }).waitFor({ timeout: WAIT });
    await row.getByText(/idle timeout 1h · deep sleep after/).waitFor();
    await row.locator('.dot.up').waitFor({ timeout: WAIT }); // the app answers
    await row.getByRole('link', { name: new RegExp(`^https://${sandbox}-web\\.localhost`) }).waitFor();
    await shot('sandboxes');
    await noSecrets();
  });

  uiTest('creates a sandbox and watches it reach running; Start shows progress until running', async () => {
    await goto(`${site}/#/sandboxes`);
    await page.getByRole('button', { name: 'New sandbox' }).click();
    await page.getByLabel('Name').fill(`made-${t.config.redisPrefix}`);
    await page.getByLabel('Idle timeout').fill('1h');
    await page.getByRole('button', { name: 'Create' }).click();
    made = `svc-made-${t.config.redisPrefix}`;
    await page.getByRole('heading', { level: 1, name: new RegExp(made) }).waitFor({ timeout: WAIT });
    await page.locator('h1 .badge', { hasText: 'running' }).waitFor({ timeout: WAIT });

    await t.service.lifecycle.sleep(made, 'test');
    await reload();
    await page.locator('h1 .badge', { hasText: 'asleep' }).waitFor({ timeout: WAIT });
    await page.getByRole('button', { name: 'Start' }).click();
    await page.getByRole('status').filter({ hasText: /Starting… \d+ s/ }).waitFor({ timeout: WAIT });
    await page.locator('h1 .badge', { hasText: 'running' }).waitFor({ timeout: WAIT });
  });

  uiTest("sets the idle timeout to never and reads 'never' back after a reload", async () => {
    await panel(sandbox);
    await page.getByLabel('Idle timeout').fill('never');
    await clickUntil(page, page.locator('form', { has: page.getByLabel('Idle timeout') }).getByRole('button', { name: 'Save' }), page.getByRole('status').filter({ hasText: 'Saved.' }));
    await reload();
    await page.getByLabel('Idle timeout').waitFor();
    assert.equal(await page.getByLabel('Idle timeout').inputValue(), 'never');
    assert.equal((await t.api('GET', `/api/sandboxes/${sandbox}`, token)).body.idle_timeout, '87600h');
    await page.getByLabel('Deep sleep after').fill('2x');
    await page.locator('form', { has: page.getByLabel('Deep sleep after') }).getByRole('button', { name: 'Save' }).click();
    await page.getByRole('alert').filter({ hasText: 'invalid duration "2x"' }).waitFor();
    await goto(`${site}/#/sandboxes`);
    await page.locator('li', { hasText: sandbox }).getByText('idle timeout never').waitFor();
  });

  uiTest('makes a token limited to one sandbox and shows its value once', async () => {
    await goto(`${site}/#/tokens`);
    await page.getByLabel('Name').fill('for the agent');
    await page.getByLabel('Limited to').selectOption(sandbox);
    await page.getByRole('button', { name: 'Create token' }).click();
    const value = (await page.locator('.token-value').textContent())!;
    assert.match(value, /^svc_[A-Za-z0-9_-]{43}$/);
    await page.getByRole('button', { name: 'Copy' }).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), value);
    await shot('tokens');
    assert.equal((await t.api('GET', '/api/me', value)).body.sandbox, sandbox, 'the token works, limited');
    await reload();
    await page.locator('td', { hasText: 'for the agent' }).waitFor();
    assert.ok(!(await page.content()).includes(value), 'never shown again');
    await page.locator('tr', { hasText: 'for the agent' }).getByText(sandbox).waitFor();
    await page.getByRole('button', { name: 'Revoke for the agent' }).click(); // confirmed in the dialog
    await eventually(async () => (await page.getByRole('button', { name: 'Revoke for the agent' }).count()) === 0, 'the revoked token to leave the list', WAIT);
    assert.equal((await t.api('GET', '/api/me', value)).status, 401, 'revoked');
  });

  uiTest('uploads, opens, downloads and deletes a file, and makes a folder', async () => {
    await panel(sandbox);
    const files = page.locator('.files');
    await files.getByRole('button', { name: '/srv' }).click();
    await files.locator('code', { hasText: /^\/srv$/ }).waitFor();
    const text = `hello from the browser ${t.config.redisPrefix}\n`;
    await files.locator('input[type=file]').setInputFiles({ name: 'hello.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
    await files.getByRole('button', { name: 'hello.txt', exact: true }).click();
    await files.locator('pre', { hasText: 'hello from the browser' }).waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), files.getByRole('link', { name: 'Download hello.txt' }).click()]);
    assert.equal(fs.readFileSync((await download.path())!, 'utf8'), text);
    await files.getByLabel('New folder name').fill('made-here');
    await clickUntil(page, files.getByRole('button', { name: 'New folder' }), files.getByRole('button', { name: 'made-here/', exact: true }));
    await files.getByRole('button', { name: 'Delete hello.txt' }).click();
    await eventually(async () => (await files.getByRole('button', { name: 'hello.txt', exact: true }).count()) === 0, 'hello.txt to leave the list', WAIT);
    const listing = (await t.api('GET', `/api/sandboxes/${sandbox}/files?path=/srv`, token)).body.map((e: { name: string }) => e.name);
    assert.deepEqual(listing, ['made-here']);
  });

  uiTest('shows log lines as they arrive', async () => {
    await panel(sandbox);
    const logs = page.locator('pre.logs');
    await logs.getByText(/tick \d+/).first().waitFor({ timeout: WAIT });
    const seen = await logs.getByText(/tick \d+/).count();
    await eventually(async () => (await logs.getByText(/tick \d+/).count()) > seen, 'a new log line', WAIT);
    await shot('sandbox');
    await noSecrets();
  });

  uiTest('downloads the export folder', async () => {
    await panel(sandbox);
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download export folder' }).click()]);
    assert.equal(download.suggestedFilename(), `${sandbox}.zip`);
    const zip = path.join(tmp, 'export.zip');
    await download.saveAs(zip);
    const { stdout } = await run('unzip', ['-Z1', zip]);
    for (const f of ['svc.env', 'docker/ca.pem', 'docker/cert.pem', 'docker/key.pem', 'README.md', '.gitignore']) assert.ok(stdout.includes(`${sandbox}/${f}`), f);
  });

  uiTest('enables engine access of a needs-certs sandbox after warning that it restarts', async () => {
    assert.ok(made, 'the sandbox made through the UI');
    const { certs: _certs, ...legacy } = (await t.service.store.sandboxes.get(made))!;
    await t.service.store.sandboxes.put(legacy);
    await panel(made);
    await page.getByText('restarts the sandbox').waitFor();
    await shot('needs-certs');
    const dialogs: string[] = [];
    page.once('dialog', (d) => dialogs.push(d.message()));
    await page.getByRole('button', { name: 'Enable' }).click();
    await page.getByRole('link', { name: 'Download export folder' }).waitFor({ timeout: WAIT });
    assert.match(dialogs[0] ?? '', /restarts the sandbox/);
    assert.equal((await t.api('GET', `/api/sandboxes/${made}`, token)).body.engine_access.state, 'ready');
  });

  uiTest('deletes a sandbox only after asking', async () => {
    assert.ok(made);
    await panel(made);
    page.removeAllListeners('dialog');
    page.once('dialog', (d) => void d.dismiss());
    await page.getByRole('button', { name: `Delete ${made}` }).click();
    assert.equal((await t.api('GET', `/api/sandboxes/${made}`, token)).status, 200, 'dismissed: nothing happens');
    page.on('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: `Delete ${made}` }).click();
    await page.getByRole('heading', { level: 1, name: 'Sandboxes' }).waitFor({ timeout: WAIT });
    await eventually(async () => (await t.api('GET', `/api/sandboxes/${made}`, token)).status !== 200, 'the sandbox to be archived', WAIT);
  });

  uiTest("reveals the management tool's password only on click", async () => {
    const res = await t.api('POST', '/api/sandboxes', token, { name: `mgr-${t.config.redisPrefix}`, template: 'manager', idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    const { manager_url: url, manager_password: password } = res.body.extras;
    assert.ok(url && password, `extras: ${Object.keys(res.body.extras).join(', ')} (values not shown)`);
    await panel(res.body.name);
    const section = page.locator('section', { has: page.getByRole('heading', { name: 'Management tool' }) });
    await section.getByRole('link', { name: url }).waitFor();
    assert.ok(!(await page.content()).includes(password), 'hidden until asked for');
    await section.getByRole('button', { name: 'Reveal password' }).click();
    await section.getByText(password).waitFor();
    await section.getByRole('button', { name: 'Hide' }).click();
    assert.ok(!(await page.content()).includes(password));
  });

  uiTest('adds, lists and removes an SSH key', async () => {
    const keyFile = path.join(tmp, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'ui-test@laptop', '-f', keyFile]);
    const publicKey = fs.readFileSync(`${keyFile}.pub`, 'utf8').trim();
    await goto(`${site}/#/ssh-keys`);
    await page.getByLabel(/Public key/).fill('ssh-ed25519 not-a-key');
    await page.getByRole('button', { name: 'Add key' }).click();
    await page.getByRole('alert').waitFor();
    await page.getByLabel(/Public key/).fill(publicKey);
    await clickUntil(page, page.getByRole('button', { name: 'Add key' }), page.getByText('ui-test@laptop'));
    await shot('ssh-keys');
    await clickUntil(page, page.getByRole('button', { name: /^Remove key / }), page.getByText('No keys yet.'));
  });

  uiTest('changes the password, then signs out and in with the new one', async () => {
    await goto(`${site}/#/account`);
    const next = `ui-${t.config.redisPrefix}-new-password`;
    await page.getByLabel('Current password').fill(user.password);
    await page.getByLabel('New password (at least 12 characters)').fill(next);
    await page.getByLabel('New password again').fill(`${next}-typo`);
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('alert').filter({ hasText: 'differ' }).waitFor();
    await page.getByLabel('New password again').fill(next);
    await clickUntil(page, page.getByRole('button', { name: 'Change password' }), page.getByRole('status').filter({ hasText: 'Password changed.' }));
    await shot('account');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await reload();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await page.getByLabel('User name').fill(user.name);
    await page.getByLabel('Password').fill(next);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Account' }).waitFor(); // back where the user was
  });
});
