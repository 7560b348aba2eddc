import assert from 'node:assert/strict';
import type http from 'node:http';
import { describe, it } from 'node:test';
import { APP_PASS_COOKIE, visibilityOf, type AppAccess } from '../../edge/index.ts';
import { gateRequest, withoutServiceCredentials } from '../../edge/services/app-gate.ts';

/** The gate's pure rules; the whole path (real service, sandbox, curl, ws, Chromium) is test/edge/private-apps.test.ts. */
describe('private app gate', () => {
  it('reads the label: public by default, the three words in any case, anything else as owner', () => {
    assert.equal(visibilityOf(undefined), 'public');
    assert.equal(visibilityOf(' Public '), 'public');
    assert.equal(visibilityOf('AUTHENTICATED'), 'authenticated');
    assert.equal(visibilityOf('owner'), 'owner');
    for (const v of ['', 'everyone', 'private', 'public,owner']) assert.equal(visibilityOf(v), 'owner', v);
  });

  it("strips the pass cookie from every app's request and a bearer token from a private app's, keeping the rest", () => {
    const raw = ['Host', 'a', 'Authorization', 'Bearer svc_x', 'Cookie', `theme=dark; ${APP_PASS_COOKIE}=p; lang=en`, 'Cookie', `${APP_PASS_COOKIE}=q`];
    assert.deepEqual(withoutServiceCredentials(raw, true), ['Host', 'a', 'Cookie', 'theme=dark; lang=en']);
    assert.deepEqual(withoutServiceCredentials(raw, false), ['Host', 'a', 'Authorization', 'Bearer svc_x', 'Cookie', 'theme=dark; lang=en']);
    const basic = ['Authorization', 'Basic YTpi'];
    assert.deepEqual(withoutServiceCredentials(basic, true), basic, "the app's own scheme stays");
    const plain = ['Host', 'a', 'Cookie', 'theme=dark'];
    assert.equal(withoutServiceCredentials(plain, true), plain, 'nothing to strip: the same list, no copy');
  });

  it('sends the browser on only to a path of the same address after a ticket', async () => {
    const access: AppAccess = {
      decide: async () => ({ allowed: true }),
      redeem: (label, ticket) => (label === 'svc-a-web' && ticket === 'good' ? { pass: 'p', maxAgeSeconds: 60 } : null),
      signInUrl: (u) => `https://svc.test/api/apps/enter?to=${encodeURIComponent(u)}`,
    };
    const app = { sandbox: 'svc-a', status: 'running' as const, visibility: 'owner' as const };
    const enter = (to: string, ticket = 'good') => gateRequest(access, { url: `/__svc/enter?ticket=${ticket}&to=${encodeURIComponent(to)}`, method: 'GET', headers: {} } as http.IncomingMessage, app, 'svc-a-web.svc.test', 'svc-a-web', 'https://svc-a-web.svc.test/');
    assert.equal((await enter('/deep/path?q=1'))?.headers.location, '/deep/path?q=1');
    for (const to of ['//evil.example/', '/\\evil.example', 'https://evil.example/', '/a\r\nset-cookie: x=1', '/é']) {
      assert.equal((await enter(to))?.headers.location, '/', JSON.stringify(to));
    }
    assert.equal((await enter('/x', 'forged'))?.status, 403);
    const publicApp = await gateRequest(access, { url: '/__svc/enter?ticket=good', method: 'GET', headers: {} } as http.IncomingMessage, { sandbox: 'svc-a', status: 'running' }, 'h', 'l', 'u');
    assert.equal(publicApp, null, 'a public app keeps every path');
  });
});
