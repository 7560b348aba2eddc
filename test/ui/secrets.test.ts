import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { createToken, createUser } from '../../accounts/index.ts';
import { UI_DIST } from '../../api/plugins/ui.ts';
import { launchChromium } from '../../harness/browser.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { clickUntil, navigate } from '../helpers/navigate.ts';

const ARTIFACTS = path.resolve('test-artifacts/ui');
const VALUE = 'saffron window pebble 5521';

/** The secrets panel (issue 35) in Debian's Chromium, through the edge's TLS port: set, list without values, remove. */
describe('secrets panel in Chromium', () => {
  let t: TestService;
  let browser: Browser;
  let page: Page;
  let token: string;
  let sandbox: string;

  before(async () => {
    assert.ok(fs.existsSync(path.join(UI_DIST, 'index.html')), `the web UI is not built in ${UI_DIST}: run npm run setup`);
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    t = await startTestService();
    const site = `https://localhost:${t.config.httpsPort}`;
    const user = await createUser(t.service.store, { name: `alice-${t.config.redisPrefix}` });
    token = (await createToken(t.service.store, { userId: user.user.id })).value;
    const res = await t.api('POST', '/api/sandboxes', token, { name: `uis-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    sandbox = res.body.name;
    browser = await launchChromium('localhost');
    const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: user.user.name, password: user.password }) });
    const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
    assert.ok(cookie, `sign-in failed: ${signIn.status}`);
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
    page = await context.newPage();
    page.on('dialog', (d) => void d.accept());
    await navigate(page, () => page.goto(`${site}/#/secrets`));
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  it('sets a secret for one sandbox, lists it without its value, the sandbox has it; removes it', async () => {
    try {
      await page.getByLabel('Name (an environment variable name').fill('API_KEY');
      await page.getByLabel('Value').fill(VALUE);
      await page.getByLabel('Only these sandboxes').fill(sandbox);
      await clickUntil(page, page.getByRole('button', { name: 'Set secret' }), page.getByRole('status').filter({ hasText: 'API_KEY is set' }));
      const row = page.locator('[data-secret="API_KEY"]');
      await row.waitFor();
      assert.match(await row.innerText(), new RegExp(`API_KEY\\s+${sandbox}`));
      assert.ok(!(await page.content()).includes('saffron'), 'the page never shows the value');
      await page.screenshot({ path: path.join(ARTIFACTS, 'secrets.png'), fullPage: true });
      const ran = await t.api('POST', `/api/sandboxes/${sandbox}/exec`, token, { command: ['printenv', 'API_KEY'] });
      assert.equal(ran.body.stdout, `${VALUE}\n`, answerOf(ran));

      await clickUntil(page, page.getByRole('button', { name: 'Remove secret API_KEY' }), page.getByText('No secrets yet.'));
      assert.deepEqual((await t.api('GET', '/api/me/secrets', token)).body, []);
    } catch (err) {
      await page?.screenshot({ path: path.join(ARTIFACTS, 'failed-secrets.png'), fullPage: true }).catch(() => undefined);
      throw err;
    }
  });
});
