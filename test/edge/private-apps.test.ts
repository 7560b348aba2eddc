import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { WebSocket } from 'ws';
import { createToken, createUser } from '../../accounts/index.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { curl } from '../helpers/curl.ts';
import { navigate } from '../helpers/navigate.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

/**
 * The app in the sandbox: busybox nc running a shell script per connection. It answers with what
 * reached it (an Authorization header? the app pass cookie? the Cookie header left), as a plain
 * HTTP body, or after a real websocket handshake (Sec-WebSocket-Accept computed) as one text frame.
 */
const APP_SCRIPT = `auth=no; pass=no; upgrade=; key=; cookie=
while IFS= read -r line; do
  line=\${line%$(printf '\\r')}
  [ -z "$line" ] && break
  case "$line" in
    [Aa]uthorization:*) auth=yes;;
    [Cc]ookie:*) cookie=\${line#*: }; case "$cookie" in *svc_app_pass*) pass=yes;; esac;;
    [Uu]pgrade:*) upgrade=yes;;
    [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=\${line#*: };;
  esac
done
msg="saw-authorization=$auth saw-pass=$pass cookie=$cookie"
if [ -n "$upgrade" ]; then
  accept=$(printf '%s' "\${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -d' ' -f1 | xxd -r -p | base64)
  printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: %s\\r\\n\\r\\n' "$accept"
  printf "\\\\201\\\\$(printf '%03o' \${#msg})%s" "$msg"
  cat > /dev/null
else
  printf 'HTTP/1.0 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\n%s\\n' "$msg"
fi
`;
const SERVE = `printf %s ${Buffer.from(APP_SCRIPT).toString('base64')} | base64 -d > /app.sh && exec nc -ll -p 8080 -e sh /app.sh`;

interface Person { id: string; name: string; password: string; token: string }

/** Private app addresses (issue 35): tunnel.visibility on a real app in a real sandbox, through the edge. */
for (const dataPlane of ['haproxy', 'node'] as const) {
  describe(`private app addresses (${dataPlane} data plane)`, () => {
    let t: TestService;
    let alice: Person;
    let bob: Person;
    let admin: Person;
    let name: string;
    let port: number;
    let cli: EngineCli;
    let dir: string;
    let ca: string;

    const host = (label: string) => `${label}.${t.config.domain}`;
    const appUrl = (label: string, p = '/') => `https://${host(label)}:${port}${p}`;
    /** curl to an app address, the token (if any) through curl's stdin config. */
    const get = (label: string, opts: { token?: string; args?: string[]; path?: string } = {}) =>
      curl(appUrl(label, opts.path), { token: opts.token, args: ['-i', '--max-time', '20', '--cacert', ca, '--resolve', `${host(label)}:${port}:127.0.0.1`, ...(opts.args ?? [])] });
    const person = async (who: string, admin = false): Promise<Person> => {
      const { user, password } = await createUser(t.service.store, { name: `${who}-${t.config.redisPrefix}`, admin });
      return { id: user.id, name: user.name, password, token: (await createToken(t.service.store, { userId: user.id })).value };
    };
    /** A websocket to the app: its first message, or the error the handshake got. */
    const websocket = (label: string, token?: string) => new Promise<string>((resolve) => {
      const ws = new WebSocket(appUrl(label), {
        ca: fs.readFileSync(ca),
        headers: token ? { authorization: `Bearer ${token}` } : {},
        lookup: ((_h: string, o: { all?: boolean }, cb: (...a: unknown[]) => void) => (o.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4))) as never,
      });
      ws.on('message', (m) => { resolve(`message: ${String(m)}`); ws.terminate(); });
      ws.on('error', (err) => resolve(`error: ${err.message}`));
    });

    before(async () => {
      t = await startTestService({ dataPlane });
      port = t.config.httpsPort;
      [alice, bob, admin] = [await person('alice'), await person('bob'), await person('root', true)];
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-private-apps-'));
      ca = path.join(dir, 'ca.pem');
      fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `pa-${t.config.redisPrefix}`, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      name = res.body.name;
      cli = new EngineCli(res.body.engine_access.host, '127.0.0.1', port, res.body);
      await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
      const app = (container: string, hostPort: number, visibility?: string) => cli.docker([
        'run', '-d', '--name', container, '--label', `tunnel.subdomain=${container}`, ...(visibility ? ['--label', `tunnel.visibility=${visibility}`] : []),
        '-p', `${hostPort}:8080`, 'busybox-app', 'sh', '-c', SERVE,
      ]);
      await app('mine', 8080, 'owner');
      await app('members', 8081, 'authenticated');
      await app('open', 8082);
      await app('typo', 8083, 'everyone');
      await eventually(async () => {
        const r = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
        return r.tunnel_urls?.length === 4 && r.apps.every((a: { answers: boolean }) => a.answers);
      }, 'four app addresses that answer', 60_000);
    });
    after(async () => {
      cli?.dispose();
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
      await t?.close();
    });

    it('shows each private address with its visibility in the sandbox record', async () => {
      const r = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
      const shown = Object.fromEntries(r.apps.map((a: { url: string; visibility?: string }) => [new URL(a.url).hostname, a.visibility ?? 'public']));
      assert.deepEqual(shown, { [host(`${name}-mine`)]: 'owner', [host(`${name}-members`)]: 'authenticated', [host(`${name}-open`)]: 'public', [host(`${name}-typo`)]: 'owner' });
    });

    it('lets the owner and an admin in with a bearer token; the app sees neither the token nor the pass', async () => {
      for (const who of [alice, admin]) {
        const res = await get(`${name}-mine`, { token: who.token, args: ['-H', 'cookie: theme=dark'] });
        assert.equal(res.status, 200, res.body);
        assert.match(res.body, /saw-authorization=no saw-pass=no cookie=theme=dark/);
      }
    });

    it('refuses another user with 403 and a page that says why; lets any user into an authenticated app', async () => {
      const refused = await get(`${name}-mine`, { token: bob.token });
      assert.equal(refused.status, 403);
      assert.match(refused.body, /only the owner of svc-pa-\S+ and administrators may reach it/);
      assert.match(refused.body, new RegExp(`signed in as ${bob.name}`));
      assert.doesNotMatch(refused.body, /saw-authorization/, 'the app was not reached');
      const members = await get(`${name}-members`, { token: bob.token });
      assert.equal(members.status, 200, members.body);
      assert.match(members.body, /saw-authorization=no/);
    });

    it('answers a client without a token 401, a browser a redirect to sign in; an unknown label value reads as owner', async () => {
      for (const label of [`${name}-mine`, `${name}-members`, `${name}-typo`]) {
        const res = await get(label);
        assert.equal(res.status, 401, label);
        assert.match(res.body, /www-authenticate: Bearer/i);
        assert.match(res.body, /This app is private/);
      }
      const browser = await get(`${name}-mine`, { path: '/page?x=1', args: ['-H', 'accept: text/html'] });
      assert.equal(browser.status, 302);
      const location = /^location: (\S+)/im.exec(browser.body)?.[1];
      assert.equal(location, `https://${t.config.domain}:${port}/api/apps/enter?to=${encodeURIComponent(appUrl(`${name}-mine`, '/page?x=1'))}`);
      assert.equal((await get(`${name}-typo`, { token: bob.token })).status, 403);
      const wrong = await get(`${name}-mine`, { token: `svc_${'A'.repeat(43)}` });
      assert.equal(wrong.status, 401);
      assert.match(wrong.body, /unknown or revoked token/);
      // the public default is untouched: no token needed, and the app sees what the client sent
      const open = await get(`${name}-open`, { token: bob.token });
      assert.equal(open.status, 200);
      assert.match(open.body, /saw-authorization=yes/);
    });

    it('holds for websockets: no token and another user are refused, the owner gets the app without the token', async () => {
      assert.equal(await websocket(`${name}-mine`), 'error: Unexpected server response: 401');
      assert.equal(await websocket(`${name}-mine`, bob.token), 'error: Unexpected server response: 403');
      assert.equal(await websocket(`${name}-mine`, alice.token), 'message: saw-authorization=no saw-pass=no cookie=');
    });

    it('refuses the TCP twin of a private app; the public one carries', async () => {
      const twin = async (label: string) => (await run('sh', ['-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -connect 127.0.0.1:${port} -servername ${host(`${label}-tcp`)} 2>/dev/null; true`])).stdout;
      assert.match(await eventually(async () => (/saw-authorization/.test(await twin(`${name}-open`)) ? 'carried' : null), 'the public twin', 20_000, 500), /carried/);
      assert.equal(await twin(`${name}-mine`), '');
    });

    if (dataPlane === 'haproxy') {
      it("keeps a private app out of HAProxy's map (Node checks each request); a public one goes in", async () => {
        const dp = t.service.edge.dataPlane!;
        const api = new RuntimeApi(dp.files.adminSocket);
        const map = () => api.send(`show map ${dp.files.appsMap}`);
        await get(`${name}-open`);
        await eventually(async () => (await map()).includes(` ${host(`${name}-open`)} `), 'the public app in the map', 5_000, 50);
        for (let i = 0; i < 3; i++) assert.equal((await get(`${name}-mine`, { token: alice.token })).status, 200);
        assert.ok(!(await map()).includes(host(`${name}-mine`)), 'the private app is not in the map');
        assert.equal((await get(`${name}-mine`)).status, 401, 'and its requests are still checked');
      });

      it('signs a browser in and back to the app (Chromium): a host-only pass for that address, never the session cookie', async () => {
        const browser = await launchChromium(t.config.domain);
        try {
          const context = await browser.newContext({ ignoreHTTPSErrors: true });
          const page = await context.newPage();
          await navigate(page, () => page.goto(appUrl(`${name}-mine`, '/deep/path?q=1')));
          await page.getByLabel('User name').fill(alice.name);
          await page.getByLabel('Password').fill(alice.password);
          await page.keyboard.press('Enter');
          await page.waitForURL(appUrl(`${name}-mine`, '/deep/path?q=1'));
          assert.match(await page.locator('body').innerText(), /saw-authorization=no saw-pass=no cookie=\s*$/);
          const appCookies = await context.cookies(appUrl(`${name}-mine`));
          assert.deepEqual(appCookies.map((c) => [c.name, c.domain, c.httpOnly, c.secure, c.sameSite]), [['__Host-svc_app_pass', host(`${name}-mine`), true, true, 'Lax']]);
          // the pass is for that address only: another private app of the same sandbox asks again
          const other = await context.newPage();
          await navigate(other, () => other.goto(appUrl(`${name}-members`)));
          await other.waitForURL(appUrl(`${name}-members`));
          assert.match(await other.locator('body').innerText(), /saw-authorization=no saw-pass=no/);

          const bobs = await browser.newContext({ ignoreHTTPSErrors: true });
          const bobPage = await bobs.newPage();
          await navigate(bobPage, () => bobPage.goto(appUrl(`${name}-mine`)));
          await bobPage.getByLabel('User name').fill(bob.name);
          await bobPage.getByLabel('Password').fill(bob.password);
          await bobPage.keyboard.press('Enter');
          await bobPage.getByRole('heading', { name: 'You may not reach this app' }).waitFor();
          assert.match(await bobPage.locator('body').innerText(), /only the owner of .* and administrators may reach it/);
        } finally {
          await browser.close();
        }
      });

      it('takes a sign-in ticket once, for its own address only', async () => {
        const session = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: alice.name, password: alice.password }) });
        const cookie = /^(__Host-svc_session=[^;]+)/.exec(session.headers.get('set-cookie') ?? '')?.[1];
        assert.ok(cookie, `sign-in failed: ${session.status}`);
        const enter = await fetch(`${t.url}/api/apps/enter?to=${encodeURIComponent(appUrl(`${name}-mine`, '/x'))}`, { headers: { cookie }, redirect: 'manual' });
        assert.equal(enter.status, 302);
        const back = new URL(enter.headers.get('location')!);
        assert.equal(back.origin, `https://${host(`${name}-mine`)}:${port}`);
        const ticketPath = `${back.pathname}${back.search}`;
        const forged = ticketPath.replace(/ticket=([^&]+)/, (_m, v: string) => `ticket=${v.slice(0, -2)}${v.endsWith('AA') ? 'BB' : 'AA'}`);
        assert.equal((await get(`${name}-mine`, { path: forged })).status, 403, 'a ticket whose signature was changed');
        const elsewhere = await get(`${name}-members`, { path: ticketPath });
        assert.equal(elsewhere.status, 403, 'a ticket for another address');
        const first = await get(`${name}-mine`, { path: ticketPath });
        assert.equal(first.status, 302);
        assert.match(first.body, /^location: \/x\r?$/im);
        assert.match(first.body, /^set-cookie: __Host-svc_app_pass=[^;]+; Path=\/; Secure; HttpOnly; SameSite=Lax; Max-Age=\d+/im);
        assert.equal((await get(`${name}-mine`, { path: ticketPath })).status, 403, 'used once');
        const pass = /^set-cookie: (__Host-svc_app_pass=[^;]+)/im.exec(first.body)![1]!;
        const withPass = await get(`${name}-mine`, { args: ['-H', `cookie: ${pass}; theme=dark`] });
        assert.equal(withPass.status, 200);
        assert.match(withPass.body, /saw-authorization=no saw-pass=no cookie=theme=dark/);
        assert.equal((await get(`${name}-members`, { args: ['-H', `cookie: ${pass}`] })).status, 401, 'a pass for another address');
        assert.equal((await get(`${name}-mine`, { args: ['-H', `cookie: ${pass.slice(0, -1)}x`] })).status, 401, 'a changed pass');
        const bad = await fetch(`${t.url}/api/apps/enter?to=${encodeURIComponent('https://evil.example/')}`, { headers: { cookie }, redirect: 'manual' });
        assert.equal(bad.status, 400, 'only app addresses of this service');
      });
    }
  });
}
