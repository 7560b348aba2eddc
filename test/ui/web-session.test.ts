import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { createUser, resetPassword } from '../../accounts/index.ts';
import { SignInGuard } from '../../api/sign-in-guard.ts';
import { reqSerializer } from '../../api/plugins/no-token-in-url.ts';
import { loadConfig } from '../../core/config.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const COOKIE = '__Host-svc_session';

/** Web UI sessions with plain HTTP clients (issue 12): cookie rules, CSRF, Origin, slow-down, password change. */
describe('web sessions', () => {
  let t: TestService;
  let origin: string;
  let userName: string;
  let password: string;

  interface Answer { status: number; body: any; headers: Headers }
  async function call(method: string, route: string, opts: { cookie?: string; csrf?: string; origin?: string | null; body?: unknown; headers?: Record<string, string> } = {}): Promise<Answer> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.cookie) headers.cookie = `${COOKIE}=${opts.cookie}`;
    if (opts.csrf) headers['x-csrf-token'] = opts.csrf;
    const o = opts.origin === undefined ? origin : opts.origin;
    if (o !== null && method !== 'GET') headers.origin = o;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(t.url + route, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    const text = await res.text();
    let body: unknown = text;
    try { body = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, body, headers: res.headers };
  }
  async function signIn(name = userName, pass = password): Promise<{ cookie: string; csrf: string }> {
    const res = await call('POST', '/api/session', { body: { name, password: pass } });
    assert.equal(res.status, 200, answerOf(res));
    const cookie = /^__Host-svc_session=([^;]+);/.exec(res.headers.get('set-cookie') ?? '')?.[1];
    assert.ok(cookie);
    return { cookie, csrf: res.body.csrf };
  }
  const tokenNames = async (cookie: string) => (await call('GET', '/api/me/tokens', { cookie })).body.map((x: { name?: string }) => x.name);

  before(async () => {
    t = await startTestService();
    origin = `https://localhost:${t.config.httpsPort}`;
    const created = await createUser(t.service.store, { name: `web-${t.config.redisPrefix}` });
    userName = created.user.name;
    password = created.password;
  });
  after(async () => t?.close());

  it('signs in with the password and sets a __Host- cookie that is HttpOnly, Secure and SameSite=Strict', async () => {
    for (const [name, pass] of [[userName, 'wrong-password'], [`nobody-${t.config.redisPrefix}`, password]]) {
      const res = await call('POST', '/api/session', { body: { name, password: pass } });
      assert.equal(res.status, 401);
      assert.deepEqual(res.body, { error: { code: 'SVC_UNAUTHENTICATED', message: 'wrong user name or password' } }, 'no hint which part was wrong');
      assert.ok(res.headers.get('set-cookie') === null, 'no cookie for a failed sign-in'); // equal would print a session id
    }
    const res = await call('POST', '/api/session', { body: { name: userName, password } });
    assert.equal(res.status, 200);
    const setCookie = res.headers.get('set-cookie') ?? '';
    assert.ok(/^__Host-svc_session=[A-Za-z0-9_-]{43}; Path=\/; Secure; HttpOnly; SameSite=Strict; Max-Age=43200$/.test(setCookie),
      `Set-Cookie: ${setCookie.replace(/=[^;]*/, '=(value not shown)')}`);
    assert.equal(res.body.user.name, userName);
    assert.ok(!JSON.stringify(res.body).includes(password));
    const cookie = /=([^;]+);/.exec(res.headers.get('set-cookie')!)![1]!;
    const me = await call('GET', '/api/me', { cookie });
    assert.equal(me.status, 200);
    assert.equal(me.body.name, userName);
    const session = await call('GET', '/api/session', { cookie });
    assert.equal(session.body.csrf, res.body.csrf);
  });

  it('refuses changes without the CSRF token or from another origin, and cross-site requests; changes nothing', async () => {
    const { cookie, csrf } = await signIn();
    const before = await tokenNames(cookie);
    const refused: Array<[string, Parameters<typeof call>[2]]> = [
      ['no CSRF token', { cookie, body: { name: 'a' } }],
      ['wrong CSRF token', { cookie, csrf: randomBytes(32).toString('base64url'), body: { name: 'b' } }],
      ['another origin', { cookie, csrf, origin: 'https://evil.example', body: { name: 'c' } }],
      ['an app of ours', { cookie, csrf, origin: `https://svc-x-web.localhost:${t.config.httpsPort}`, body: { name: 'd' } }],
      ['no Origin', { cookie, csrf, origin: null, body: { name: 'e' } }],
      ['marked cross-site', { cookie, csrf, body: { name: 'f' }, headers: { 'sec-fetch-site': 'cross-site' } }],
    ];
    for (const [what, opts] of refused) {
      const res = await call('POST', '/api/me/tokens', opts);
      assert.equal(res.status, 403, `${what}: ${answerOf(res)}`);
      assert.equal(res.body.error.code, 'SVC_FORBIDDEN');
    }
    assert.equal((await call('GET', '/api/me', { cookie, headers: { 'sec-fetch-site': 'cross-site' } })).status, 403, 'a cross-site read too');
    // A cross-site form posting a sign-in (login CSRF) is refused before any password is checked.
    const forged = await call('POST', '/api/session', { origin: 'https://evil.example', body: { name: userName, password } });
    assert.equal(forged.status, 403);
    assert.deepEqual(await tokenNames(cookie), before, 'nothing was created');
    const ok = await call('POST', '/api/me/tokens', { cookie, csrf, body: { name: 'from the UI' } });
    assert.equal(ok.status, 201);
  });

  it('lists when each token was last used', async () => {
    const { cookie, csrf } = await signIn();
    const made = await call('POST', '/api/me/tokens', { cookie, csrf, body: { name: 'used' } });
    const unused = await call('POST', '/api/me/tokens', { cookie, csrf, body: { name: 'unused' } });
    assert.equal((await t.api('GET', '/api/me', made.body.token)).status, 200);
    const listed = await eventually(async () => {
      const rows = (await call('GET', '/api/me/tokens', { cookie })).body as Array<{ id: string; last_used_at?: string }>;
      return rows.find((r) => r.id === made.body.record.id)?.last_used_at ? rows : undefined;
    }, 'last_used_at to be written');
    assert.ok(Date.parse(listed.find((r) => r.id === made.body.record.id)!.last_used_at!) > Date.now() - 60_000);
    assert.equal(listed.find((r) => r.id === unused.body.record.id)!.last_used_at, undefined);
  });

  it('refuses a forged, ended or expired session cookie', async () => {
    for (const forged of [randomBytes(32).toString('base64url'), 'x', '']) {
      const res = await call('GET', '/api/me', { cookie: forged || 'none' });
      assert.equal(res.status, 401, forged);
      assert.equal(res.body.error.code, 'SVC_UNAUTHENTICATED');
    }
    const a = await signIn();
    const out = await call('DELETE', '/api/session', { cookie: a.cookie, csrf: a.csrf });
    assert.equal(out.status, 200);
    assert.match(out.headers.get('set-cookie')!, /^__Host-svc_session=; .*Max-Age=0$/);
    assert.equal((await call('GET', '/api/me', { cookie: a.cookie })).status, 401, 'signed out');
    const b = await signIn();
    const redis = new Redis(loadConfig().redisUrl);
    try {
      const key = `${t.config.redisPrefix}:websession:${createHash('sha256').update(b.cookie).digest('hex')}`;
      assert.equal(await redis.pexpire(key, 1), 1, 'the session lives in Redis under its hash');
    } finally {
      redis.disconnect();
    }
    await eventually(async () => (await call('GET', '/api/me', { cookie: b.cookie })).status === 401, 'the expired session to be refused', 10_000);
  });

  it('refuses a token value in a URL and keeps it out of the request log', async () => {
    const user = await t.user('url');
    for (const route of [`/api/me?token=${user.token}`, `/api/sandboxes/${user.token}`, `/api/me?t=${encodeURIComponent(user.token)}`, `/agent-guide.md?${user.token}`]) {
      const res = await call('GET', route);
      assert.equal(res.status, 400, route);
      assert.match(res.body.error.message, /Authorization header/);
      assert.ok(!JSON.stringify(res.body).includes(user.token));
    }
    assert.ok(!reqSerializer({ method: 'GET', url: `/api/me?token=${user.token}` }).url.includes(user.token));
  });

  it('slows sign-in down after repeated failures, whatever the password, then lets the right one in', async () => {
    for (let i = 0; i < 5; i++) assert.equal((await call('POST', '/api/session', { body: { name: userName, password: `wrong-${i}` } })).status, 401);
    const blocked = await call('POST', '/api/session', { body: { name: userName, password } });
    assert.equal(blocked.status, 429, 'even the right password waits');
    assert.equal(blocked.body.error.code, 'SVC_TOO_MANY_REQUESTS');
    assert.ok(Number(blocked.headers.get('retry-after')) >= 1);
    assert.ok(blocked.headers.get('set-cookie') === null, 'no cookie for a refused sign-in');
    await eventually(async () => (await call('POST', '/api/session', { body: { name: userName, password } })).status === 200, 'the wait to pass', 20_000, 500);
  });

  it('changes the password with the current one and signs out the other sessions', async () => {
    const a = await signIn();
    const b = await signIn();
    const wrong = await call('POST', '/api/me/password', { cookie: a.cookie, csrf: a.csrf, body: { current_password: 'not-it', new_password: 'a-new-password-1' } });
    assert.equal(wrong.status, 403);
    const short = await call('POST', '/api/me/password', { cookie: a.cookie, csrf: a.csrf, body: { current_password: password, new_password: 'short' } });
    assert.equal(short.status, 400);
    assert.equal((await call('GET', '/api/me', { cookie: b.cookie })).status, 200, 'nothing changed yet');
    const next = `new-${randomBytes(9).toString('base64url')}`;
    const noCsrf = await call('POST', '/api/me/password', { cookie: a.cookie, body: { current_password: password, new_password: next } });
    assert.equal(noCsrf.status, 403);
    const changed = await call('POST', '/api/me/password', { cookie: a.cookie, csrf: a.csrf, body: { current_password: password, new_password: next } });
    assert.equal(changed.status, 200, answerOf(changed));
    assert.ok(changed.body.other_sessions_ended >= 1);
    assert.equal((await call('GET', '/api/me', { cookie: b.cookie })).status, 401, 'the other session ended');
    assert.equal((await call('GET', '/api/me', { cookie: a.cookie })).status, 200, 'this one goes on');
    assert.equal((await call('POST', '/api/session', { body: { name: userName, password } })).status, 401, 'the old password is gone');
    password = next;
    await signIn();
    password = (await resetPassword(t.service.store, userName)).password;
  });

  it('checks at most two password hashes at once and turns away a crowd beyond the queue', async () => {
    const redis = new Redis(loadConfig().redisUrl);
    const prefix = `${t.config.redisPrefix}-guard`;
    const guard = new SignInGuard(redis, prefix);
    try {
      let running = 0;
      let most = 0;
      const release: Array<() => void> = [];
      const check = () => new Promise<string>((resolve) => {
        running++;
        most = Math.max(most, running);
        release.push(() => { running--; resolve('ok'); });
      });
      let turnedAway = 0;
      const attempts = Array.from({ length: 40 }, (_, i) => guard.attempt(`user${i}`, `10.0.0.${i}`, check)
        .then((v) => v, (e: Error & { statusCode?: number }) => { turnedAway++; return e.statusCode; }));
      // Every attempt has either started, queued or been turned away before any check ends.
      await eventually(async () => release.length === 2 && turnedAway === 6, 'two checks running and six turned away', 10_000, 20);
      const deadline = Date.now() + 10_000;
      while (release.length > 0 || running > 0) {
        assert.ok(Date.now() < deadline, 'the queue drains');
        release.shift()?.();
        await new Promise((r) => setTimeout(r, 5));
      }
      const outcomes = await Promise.all(attempts);
      assert.equal(most, 2, 'never more than two checks at once');
      assert.equal(outcomes.filter((o) => o === 'ok').length, 34, 'two running and 32 waiting get their turn');
      assert.equal(outcomes.filter((o) => o === 503).length, 6, 'the rest are told to come back');
    } finally {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    }
  });
});
