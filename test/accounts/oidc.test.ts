import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import Provider from 'oidc-provider';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from '../../harness/browser.ts';
import { freePort } from '../../harness/ports.ts';
import { startTestService, type TestService } from '../../harness/service.ts';

const GROUPS: Record<string, string[]> = {
  'alice@example.com': ['dev', 'svc-admins'],
  'bob@example.com': ['dev'],
  'eve@elsewhere.org': ['dev', 'svc-admins'],
};

/**
 * Single sign-on (issue 24) against a real OpenID provider (oidc-provider, certified) that the
 * test runs, signed into with Debian's Chromium through the service's edge, as a user would.
 */
describe('OpenID Connect sign-in', () => {
  let idp: http.Server;
  let issuer: string;
  let t: TestService;
  let browser: Browser;
  let site: string;
  const callbacks: string[] = [];

  /** Signs in through the provider's own login and consent pages; resolves on the page the service lands on. */
  async function signIn(login: string): Promise<Page> {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    page.on('request', (r) => { if (r.url().startsWith(`${site}/api/auth/oidc/callback`)) callbacks.push(r.url()); });
    await page.goto(site);
    await page.getByRole('link', { name: 'Sign in with Test IdP' }).click();
    await page.locator('input[name=login]').fill(login);
    await page.locator('input[name=password]').fill('any password: the test provider takes any');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.waitForURL((url) => url.origin === site || url.pathname.includes('/interaction/'));
    if (new URL(page.url()).pathname.includes('/interaction/')) await page.getByRole('button', { name: 'Continue' }).click();
    await page.waitForURL((url) => url.origin === site, { timeout: 30_000 });
    return page;
  }
  const me = (page: Page) => page.evaluate(async () => (await fetch('/api/session')).json());

  /**
   * Goes through the provider's pages as signIn does, but holds the provider's redirect back: the
   * callback's query and the browser's state cookie, to be sent when the test chooses. Chromium
   * routes only the first request of a redirect chain, so the provider's requests are fetched here
   * (in the context's cookie jar) and their redirects followed, until one points at the callback.
   */
  async function heldCallback(login: string): Promise<{ query: string; state: string }> {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    let hold!: (url: string) => void;
    const callback = new Promise<string>((resolve) => { hold = resolve; });
    await page.route(`${issuer}/**`, async (route) => {
      let url = route.request().url();
      let res = await route.fetch({ maxRedirects: 0 });
      for (let location = res.headers().location; location; location = res.headers().location) {
        url = new URL(location, url).href;
        if (url.startsWith(`${site}/api/auth/oidc/callback`)) {
          hold(url);
          return route.fulfill({ status: 200, contentType: 'text/plain', body: 'the callback is held by the test' });
        }
        res = await context.request.get(url, { maxRedirects: 0 });
      }
      return route.fulfill({ response: res });
    });
    await page.goto(site);
    await page.getByRole('link', { name: 'Sign in with Test IdP' }).click();
    await page.locator('input[name=login]').fill(login);
    await page.locator('input[name=password]').fill('any password: the test provider takes any');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    const consent = page.getByRole('button', { name: 'Continue' });
    if (await Promise.race([callback.then(() => false), consent.waitFor().then(() => true)])) await consent.click();
    const url = await callback;
    const state = (await context.cookies(site)).find((c) => c.name === '__Host-svc_oidc')?.value;
    await context.close();
    assert.ok(state, 'the sign-in set its state cookie');
    return { query: new URL(url).search, state };
  }

  before(async () => {
    const httpsPort = await freePort();
    site = `https://localhost:${httpsPort}`;
    idp = http.createServer();
    await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
    issuer = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
    const provider = new Provider(issuer, {
      clients: [{ client_id: 'svc', client_secret: 'a-client-secret-for-the-test', redirect_uris: [`${site}/api/auth/oidc/callback`], grant_types: ['authorization_code'], response_types: ['code'] }],
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['preferred_username'], groups: ['groups'] },
      scopes: ['openid', 'email', 'profile', 'groups'],
      cookies: { keys: ['a-cookie-key-for-the-test'] },
      findAccount: async (_ctx: unknown, id: string) => ({
        accountId: id,
        claims: async () => ({ sub: id, email: id, email_verified: true, preferred_username: id.split('@')[0], groups: GROUPS[id] ?? [] }),
      }),
    });
    idp.on('request', provider.callback());
    t = await startTestService({
      httpsPort,
      passwordSignIn: false,
      oidc: {
        issuer, clientId: 'svc', clientSecret: 'a-client-secret-for-the-test', name: 'Test IdP', scopes: 'openid email profile groups',
        allowedDomains: ['example.com'], allowedGroups: [], groupsClaim: 'groups', createUsers: true, adminClaim: 'groups=svc-admins',
      },
    });
    browser = await launchChromium('localhost');
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    idp?.closeAllConnections();
    await new Promise((resolve) => idp?.close(resolve));
  });

  it('offers only "Sign in with Test IdP" when password sign-in is off; the password route refuses', async () => {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    await page.goto(site);
    await page.getByRole('link', { name: 'Sign in with Test IdP' }).waitFor();
    assert.equal(await page.getByLabel('Password').count(), 0);
    await context.close();
    const res = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'x', password: 'y' }) });
    assert.equal(res.status, 403);
    assert.match(((await res.json()) as { error: { message: string } }).error.message, /password sign-in is turned off/);
  });

  it('a first sign-in through the provider creates the user; the admin claim makes an admin', async () => {
    const page = await signIn('alice@example.com');
    await page.getByRole('heading', { level: 1, name: 'Sandboxes' }).waitFor();
    const session = await me(page);
    assert.deepEqual([session.user.name, session.user.admin], ['alice', true]);
    await page.getByRole('link', { name: 'Admin' }).waitFor();
    const stored = await t.service.store.users.getByName('alice');
    assert.equal(stored?.oidc_subject, `${issuer}#alice@example.com`);
    await page.context().close();

    const bob = await signIn('bob@example.com');
    assert.deepEqual([(await me(bob)).user.name, (await me(bob)).user.admin], ['bob', false]);
    await bob.context().close();
    const again = await signIn('alice@example.com');
    assert.equal((await me(again)).user.id, stored!.id, 'the second sign-in finds the same user');
    await again.context().close();
    const rows = (await t.service.store.audit.query({ action: 'session.sign_in' })).rows;
    assert.deepEqual(rows.map((r) => [r.actor_name, r.outcome]), [['alice', 'ok'], ['bob', 'ok'], ['alice', 'ok']]);
  });

  it("two first sign-ins of one person at once make one user, and both are signed in as that user", async () => {
    const held = await Promise.all([heldCallback('carol@example.com'), heldCallback('carol@example.com')]);
    // both callbacks at once: each exchanges its own code, then both look for carol and find nobody yet
    const answers = await Promise.all(held.map(({ query, state }) =>
      fetch(`${t.url}/api/auth/oidc/callback${query}`, { redirect: 'manual', headers: { cookie: `__Host-svc_oidc=${state}` } })));
    const sessions = answers.map((res) => {
      assert.equal(res.status, 302);
      return /__Host-svc_session=([^;]+)/.exec(res.headers.get('set-cookie') ?? '')?.[1];
    });
    assert.ok(sessions.every((cookie) => cookie), 'both callbacks signed in');
    const carols = (await t.service.store.users.list()).filter((u) => u.oidc_subject === `${issuer}#carol@example.com`);
    assert.deepEqual(carols.map((u) => u.name), ['carol'], 'one user, with the plain name');
    for (const cookie of sessions) {
      const session = await fetch(`${t.url}/api/session`, { headers: { cookie: `__Host-svc_session=${cookie}` } });
      assert.equal(((await session.json()) as { user: { id: string } }).user.id, carols[0]!.id);
    }
  });

  it('refuses a user outside the allowed domain with a message, and creates nobody', async () => {
    const page = await signIn('eve@elsewhere.org');
    await page.getByRole('alert').filter({ hasText: 'eve@elsewhere.org may not sign in here: only addresses at example.com may' }).waitFor();
    assert.equal((await (await page.evaluate(async () => (await fetch('/api/session')).status))), 401);
    assert.equal(await t.service.store.users.getByName('eve'), undefined);
    await page.context().close();
  });

  it('refuses a forged state and a replayed code', async () => {
    const used = callbacks.find((u) => u.includes('code='));
    assert.ok(used, 'a callback was seen');
    const query = new URL(used).search;
    const state = new URL(used).searchParams.get('state')!;
    const refusal = async (path: string, cookie?: string) => {
      const res = await fetch(`${t.url}${path}`, { redirect: 'manual', headers: cookie ? { cookie: `__Host-svc_oidc=${cookie}` } : {} });
      assert.equal(res.status, 302);
      assert.ok(!res.headers.get('set-cookie')?.includes('__Host-svc_session='), 'no session');
      return decodeURIComponent(new URL(res.headers.get('location')!, site).searchParams.get('sso_error') ?? '');
    };
    // the state in the URL is not the one this browser started with
    assert.match(await refusal(`/api/auth/oidc/callback${query}`, 'forged-state-value'), /state mismatch/);
    assert.match(await refusal(`/api/auth/oidc/callback${query}`), /state mismatch/);
    // the same code and state again: the sign-in was taken once
    assert.match(await refusal(`/api/auth/oidc/callback${query}`, state), /expired or was already used/);
    // the used code with a fresh sign-in's state: the provider refuses the code
    const start = await fetch(`${t.url}/api/auth/oidc/start`, { redirect: 'manual' });
    const fresh = /__Host-svc_oidc=([^;]+)/.exec(start.headers.get('set-cookie') ?? '')![1]!;
    const replay = new URL(used);
    replay.searchParams.set('state', fresh);
    assert.match(await refusal(`/api/auth/oidc/callback${replay.search}`, fresh), /the identity provider did not confirm the sign-in/);
  });
});
