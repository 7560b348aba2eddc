import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

/**
 * Issue 14, hole 1: app labels are built by prefixing a sandbox name, so names that prefix each
 * other compete for addresses. `svc-<a>` (mallory) with the subdomain `prod-web` and
 * `svc-<a>-prod` (bob) with `web` both build `svc-<a>-prod-web`; generated labels collide the same
 * way. The address must go to bob's sandbox whatever was created or started first.
 */
describe('app addresses belong to the sandbox name that built them', () => {
  let t: TestService;
  let ca: string;
  let dir: string;
  let mallory: { id: string; token: string };
  let bob: { id: string; token: string };
  let short: string;
  const clis: EngineCli[] = [];

  const serve = (who: string) => `mkdir -p /www && echo hello-from-${who} > /www/index.html && exec httpd -f -p 8080 -h /www`;
  const urls = async (name: string, token: string): Promise<string[]> =>
    [...(await t.api('GET', `/api/sandboxes/${name}`, token)).body.tunnel_urls].map((u: string) => new URL(u).hostname.split('.')[0]!).sort();
  const curl = async (label: string) => {
    const host = `${label}.${t.config.domain}`;
    const port = t.config.httpsPort;
    const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '20', '--cacert', ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
    return stdout;
  };
  const create = async (user: { token: string }, name: string) => {
    const res = await t.api('POST', '/api/sandboxes', user.token, { name, idle_timeout: '1h' });
    if (res.status !== 201) return { status: res.status, body: res.body, cli: undefined };
    const cli = new EngineCli(res.body.engine_access.host, '127.0.0.1', t.config.httpsPort, res.body);
    clis.push(cli);
    await cli.docker(['build', '-q', '-t', 'app', FIXTURE]);
    return { status: res.status, body: res.body, cli };
  };

  before(async () => {
    t = await startTestService();
    mallory = await t.user('mallory');
    bob = await t.user('bob');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-owner-'));
    ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
    short = `own-${t.config.redisPrefix}`;
  });
  after(async () => {
    for (const cli of clis) cli.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
  });

  it('refuses a new name that would take over a live address (409), and admits it once the address is gone', async () => {
    const { cli } = await create(mallory, short);
    await cli!.docker(['run', '-d', '--name', 'first', '--label', 'tunnel.subdomain=prod-web', '-p', '8080:8080', 'app', 'sh', '-c', serve('mallory')]);
    await eventually(async () => (await urls(`svc-${short}`, mallory.token)).includes(`svc-${short}-prod-web`), "mallory's address", 30_000);

    const refused = await t.api('POST', '/api/sandboxes', bob.token, { name: `${short}-prod` });
    assert.equal(refused.status, 409, `answered ${refused.status} ${refused.body.error?.message ?? refused.body.name}`);
    assert.match(refused.body.error.message, new RegExp(`svc-${short}-prod-web`));
    assert.equal((await t.api('GET', `/api/sandboxes/svc-${short}-prod`, bob.token)).status, 404, 'nothing was made');

    await cli!.docker(['rm', '-f', 'first']);
    await eventually(async () => (await urls(`svc-${short}`, mallory.token)).length === 0, 'address gone', 30_000);
    const made = await create(bob, `${short}-prod`);
    assert.equal(made.status, 201, made.body.error?.message);
  });

  it('gives a contested address to the longer name, whichever container started first (subdomain and generated forms, -tcp twin too)', async () => {
    const malloryCli = clis[0]!;
    const bobCli = clis[1]!;
    // Mallory starts first: both forms of bob's future addresses, then one address of her own.
    await malloryCli.docker(['run', '-d', '--name', 'sub', '--label', 'tunnel.subdomain=prod-web', '-p', '8080:8080', 'app', 'sh', '-c', serve('mallory')]);
    await malloryCli.docker(['run', '-d', '--name', 'prod-web', '-p', '8081:8080', 'app', 'sh', '-c', serve('mallory')]);
    await malloryCli.docker(['run', '-d', '--name', 'mine', '--label', 'tunnel.subdomain=mine', '-p', '8082:8080', 'app', 'sh', '-c', serve('mallory')]);
    await eventually(async () => (await urls(`svc-${short}`, mallory.token)).includes(`svc-${short}-mine`), "mallory's own address", 30_000);
    assert.deepEqual(await urls(`svc-${short}`, mallory.token), [`svc-${short}-mine`], 'mallory got none of the contested addresses');

    await bobCli.docker(['run', '-d', '--name', 'front', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'app', 'sh', '-c', serve('bob')]);
    await bobCli.docker(['run', '-d', '--name', 'web', '-p', '8081:8080', 'app', 'sh', '-c', serve('bob')]);
    const contested = [`${short}-prod-web-port8081`, `svc-${short}-prod-web`];
    await eventually(async () => JSON.stringify(await urls(`svc-${short}-prod`, bob.token)) === JSON.stringify(contested), "bob's addresses", 30_000);
    for (const label of contested) {
      const page = await eventually(async () => {
        const out = await curl(label);
        return /^HTTP\/1.1 200/.test(out) ? out : null;
      }, `${label} answers`, 30_000, 500);
      assert.match(page, /hello-from-bob/, label);
    }
    const { stdout } = await run('sh', ['-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -connect 127.0.0.1:${t.config.httpsPort} -servername svc-${short}-prod-web-tcp.${t.config.domain} 2>/dev/null`]);
    assert.match(stdout, /hello-from-bob/, 'the -tcp twin follows its label');
  });

  it("keeps an archived name's addresses away from the shorter name", async () => {
    assert.equal((await t.api('DELETE', `/api/sandboxes/svc-${short}-prod`, bob.token)).status, 200);
    // A new container makes mallory's sandbox look at all its apps again.
    await clis[0]!.docker(['run', '-d', '--name', 'mine2', '--label', 'tunnel.subdomain=mine2', '-p', '8083:8080', 'app', 'sh', '-c', serve('mallory')]);
    await eventually(async () => (await urls(`svc-${short}`, mallory.token)).includes(`svc-${short}-mine2`), "mallory's second address", 30_000);
    assert.deepEqual(await urls(`svc-${short}`, mallory.token), [`svc-${short}-mine`, `svc-${short}-mine2`]);
    assert.match(await curl(`svc-${short}-prod-web`), /^HTTP\/1.1 404/);
  });
});
