import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { createToken, createUser } from '../../accounts/index.ts';
import { UI_DIST } from '../../api/plugins/ui.ts';
import { launchChromium } from '../../harness/browser.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { clickUntil, navigate } from '../helpers/navigate.ts';

const ARTIFACTS = path.resolve('test-artifacts/ui');
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

/** The admin view and the quota display (issue 24) in Debian's Chromium, through the edge's TLS port. */
describe('admin view in Chromium', () => {
  let t: TestService;
  let browser: Browser;
  let site: string;
  let admin: { page: Page; context: BrowserContext };
  let alice: { page: Page; context: BrowserContext; name: string; token: string };
  let sandbox: string;

  const goto = (page: Page, url: string | null) => navigate(page, () => (url === null ? page.reload() : page.goto(url)));
  const signedIn = async (name: string, password: string) => {
    const res = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, password }) });
    const cookie = /^__Host-svc_session=([^;]+)/.exec(res.headers.get('set-cookie') ?? '')?.[1];
    assert.ok(cookie, `sign-in failed: ${res.status}`);
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: DESKTOP });
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    const page = await context.newPage();
    page.on('dialog', (d) => void d.accept());
    return { page, context };
  };
  const row = (selector: string) => admin.page.locator(selector);
  const uiTest = (name: string, fn: () => Promise<void>) => it(name, async () => {
    try {
      await fn();
    } catch (err) {
      await admin?.page.screenshot({ path: path.join(ARTIFACTS, `failed-admin-${name.replace(/[^a-z0-9]+/gi, '-').slice(0, 50)}.png`), fullPage: true }).catch(() => undefined);
      throw err;
    }
  });

  before(async () => {
    assert.ok(fs.existsSync(path.join(UI_DIST, 'index.html')), `the web UI is not built in ${UI_DIST}: run npm run setup`);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    t = await startTestService();
    site = `https://localhost:${t.config.httpsPort}`;
    const boss = await createUser(t.service.store, { name: `boss-${t.config.redisPrefix}`, admin: true });
    const user = await createUser(t.service.store, { name: `alice-${t.config.redisPrefix}` });
    const token = (await createToken(t.service.store, { userId: user.user.id })).value;
    const res = await t.api('POST', '/api/sandboxes', token, { name: `adm-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    sandbox = res.body.name;
    browser = await launchChromium('localhost');
    admin = await signedIn(boss.user.name, boss.password);
    alice = { ...(await signedIn(user.user.name, user.password)), name: user.user.name, token };
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  uiTest('a user sees their quotas and usage on the Account page, and no Admin page', async () => {
    await goto(alice.page, `${site}/#/account`);
    const sandboxes = alice.page.locator('tr[data-quota="Sandboxes"] td');
    await sandboxes.first().waitFor();
    assert.deepEqual(await sandboxes.allTextContents(), ['1', '20']);
    assert.deepEqual(await alice.page.locator('tr[data-quota="Running at once"] td').allTextContents(), ['1', '5']);
    assert.deepEqual(await alice.page.locator('tr[data-quota="Memory per sandbox"] td').allTextContents(), ['', '2048 MB']);
    assert.equal(await alice.page.getByRole('link', { name: 'Admin' }).count(), 0);
    await goto(alice.page, `${site}/#/admin`);
    await alice.page.getByRole('navigation', { name: 'Main' }).waitFor();
    assert.equal(await alice.page.getByRole('heading', { name: 'Admin' }).count(), 0);
  });

  uiTest('the admin sees every user, every sandbox and the audit log', async () => {
    await goto(admin.page, `${site}/#/admin`);
    await admin.page.getByRole('heading', { level: 1, name: 'Admin' }).waitFor();
    const aliceRow = row(`tr[data-user="${alice.name}"] td`);
    await aliceRow.first().waitFor();
    const cells = await aliceRow.allTextContents();
    assert.deepEqual(cells.slice(0, 4), [alice.name, 'active', '1 / 20', '1 / 5']);
    assert.notEqual(cells[4], 'never', 'her sign-in is shown');
    const box = row(`tr[data-sandbox="${sandbox}"] td`);
    await box.first().waitFor(); // the sandboxes come in an answer of their own, after the users' maybe
    const boxCells = await box.allTextContents();
    assert.deepEqual(boxCells.slice(0, 4), [sandbox, alice.name, 'running', '2048 MB, 1.5 CPUs']);
    const memoryNow = /^(\d+) MB$/.exec(boxCells[4]!);
    assert.ok(memoryNow && Number(memoryNow[1]) > 0 && Number(memoryNow[1]) < 2048, `memory now: ${boxCells[4]}`);
    assert.equal(boxCells[5], (await sandboxDocker().info()).Name, 'the host of the engine that runs it');
    await row('table.audit tr[data-action="sandbox.create"]').first().waitFor();
    await admin.page.getByLabel('Action').fill('session.');
    await admin.page.getByRole('button', { name: 'Filter' }).click();
    await eventually(async () => {
      const actions = await row('table.audit tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-action')));
      return actions.length === 2 && actions.every((a) => a === 'session.sign_in');
    }, 'the filtered audit rows', 10_000);
    for (const [label, size] of [['desktop', DESKTOP], ['phone', PHONE]] as const) {
      await admin.page.setViewportSize(size);
      await admin.page.screenshot({ path: path.join(ARTIFACTS, `admin-${label}.png`), fullPage: true });
    }
    await admin.page.setViewportSize(DESKTOP);
  });

  uiTest("the admin opens another user's sandbox from the list and acts on it as its owner would", async () => {
    await row(`tr[data-sandbox="${sandbox}"]`).getByRole('link', { name: sandbox }).click();
    await admin.page.getByRole('heading', { level: 1, name: sandbox }).waitFor();
    const idle = admin.page.locator('form', { has: admin.page.getByLabel('Idle timeout') });
    await idle.getByLabel('Idle timeout').fill('2h');
    await clickUntil(admin.page, idle.getByRole('button', { name: 'Save' }), idle.getByRole('status').filter({ hasText: 'Saved.' }));
    assert.equal((await t.service.store.sandboxes.get(sandbox))?.idle_timeout, '2h');
    const [patch] = (await t.service.store.audit.query({ action: 'sandbox.patch', sandbox })).rows;
    assert.deepEqual([patch?.actor_name, patch?.detail], [`boss-${t.config.redisPrefix}`, '{"idle_timeout":"2h"}'], "the admin's change, in the audit log");
    await goto(admin.page, `${site}/#/admin`);
    await admin.page.getByRole('heading', { level: 1, name: 'Admin' }).waitFor();
  });

  uiTest('the admin creates a user whose password is shown once and works', async () => {
    const name = `carol-${t.config.redisPrefix}`;
    await admin.page.getByLabel('New user').fill(name);
    await admin.page.getByRole('button', { name: 'Create user' }).click();
    const shown = admin.page.locator('code.password-value');
    await shown.waitFor();
    const password = (await shown.textContent())!;
    const res = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, password }) });
    assert.equal(res.status, 200, 'the shown password signs in');
    await admin.page.getByRole('button', { name: 'Done' }).click();
    await row(`tr[data-user="${name}"]`).waitFor();
    assert.ok(!(await admin.page.content()).includes(password), 'gone from the page once done');
  });

  uiTest("the admin sets a user's quota, and a field left empty is the default again", async () => {
    await row(`tr[data-user="${alice.name}"]`).getByRole('button', { name: 'Quotas' }).click();
    const form = admin.page.getByRole('form', { name: `Quotas of ${alice.name}` });
    await form.getByLabel('Running at once').fill('3');
    await form.getByLabel('Memory per sandbox (MB)').fill('32');
    await form.getByRole('button', { name: 'Save quotas' }).click();
    await form.getByRole('alert').filter({ hasText: 'memory_mb must be a whole number from 64' }).waitFor();
    await form.getByLabel('Memory per sandbox (MB)').fill('');
    await form.getByRole('button', { name: 'Save quotas' }).click();
    await eventually(async () => (await row(`tr[data-user="${alice.name}"] td`).nth(3).textContent()) === '1 / 3', 'the new quota in the table', 10_000);
    const me = await t.api('GET', '/api/me', alice.token);
    assert.deepEqual([me.body.quotas.max_running, me.body.quotas.memory_mb], [3, 2048]);
  });

  uiTest('a user over a quota is told which quota and its number when creating a sandbox', async () => {
    const form = admin.page.getByRole('form', { name: `Quotas of ${alice.name}` });
    if (!(await form.isVisible())) await row(`tr[data-user="${alice.name}"]`).getByRole('button', { name: 'Quotas' }).click();
    await form.getByLabel('Sandboxes').fill('1');
    await form.getByRole('button', { name: 'Save quotas' }).click();
    await eventually(async () => (await row(`tr[data-user="${alice.name}"] td`).nth(2).textContent()) === '1 / 1', 'the new quota in the table', 10_000);
    await goto(alice.page, `${site}/#/sandboxes`);
    await alice.page.getByRole('button', { name: 'New sandbox' }).click();
    await alice.page.getByLabel('Name').fill(`over-${t.config.redisPrefix}`);
    await alice.page.getByRole('button', { name: 'Create' }).click();
    await alice.page.getByRole('alert').filter({ hasText: 'quota max_sandboxes (1 sandboxes) reached: you have 1' }).waitFor();
    assert.equal(await t.service.store.sandboxes.get(`svc-over-${t.config.redisPrefix}`), undefined, 'nothing made');
  });

  uiTest('disabling a user ends their session and puts their sandbox to sleep; enabling lets their token in again', async () => {
    await clickUntil(admin.page, row(`tr[data-user="${alice.name}"]`).getByRole('button', { name: 'Disable' }), row(`tr[data-user="${alice.name}"] td`).nth(1).filter({ hasText: /^disabled$/ }));
    assert.equal((await t.service.lifecycle.status(sandbox)).status, 'exited', 'her sandbox sleeps');
    assert.equal((await t.api('GET', '/api/me', alice.token)).status, 401);
    await goto(alice.page, `${site}/#/account`);
    await goto(alice.page, null); // reloaded
    await alice.page.getByLabel('User name').waitFor(); // the sign-in page: her session is gone

    await clickUntil(admin.page, row(`tr[data-user="${alice.name}"]`).getByRole('button', { name: 'Enable' }), row(`tr[data-user="${alice.name}"] td`).nth(1).filter({ hasText: /^active$/ }));
    assert.equal((await t.api('GET', '/api/me', alice.token)).status, 200);
  });
});
