import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER } from '../../edge/index.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import type { EngineCli } from '../../harness/engine-cli.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';
import { sshThroughEdge } from '../helpers/ssh-through-edge.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

/** A real sandbox behind the real edge, reached by curl, the docker CLI, ssh and openssl. */
describe('a sandbox through the edge', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let alice: { id: string; token: string };
  let name: string;
  let port: number;
  let cli: EngineCli;
  let ca: string;

  const host = (label: string) => `${label}.${t.config.domain}`;
  const curl = async (label: string, extra: string[] = []) => {
    const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '20', '--cacert', ca, '--resolve', `${host(label)}:${port}:127.0.0.1`, ...extra, `https://${host(label)}:${port}/`]);
    const [head, ...body] = stdout.split('\r\n\r\n');
    return { head: head!.toLowerCase(), body: body.join('\r\n\r\n') };
  };
  const status = async () => (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body.status;

  before(async () => {
    // the waiting page's path: no hold (test/edge/wake-hold-sandbox.test.ts holds)
    t = await startTestService({ wakeHoldMs: 0 });
    port = t.config.httpsPort;
    sb = await openEdgeSandbox(t, 'edge');
    ({ name, cli, ca, user: alice } = sb);
    assert.equal((await sb.record()).engine_access.port, port);
  });
  after(async () => {
    sb?.close();
    await t?.close();
  });

  it('serves the API and the CA on the TLS port', async () => {
    const { stdout } = await run('curl', ['-sS', '--cacert', ca, '--resolve', `${t.config.domain}:${port}:127.0.0.1`, '-H', `authorization: Bearer ${alice.token}`, `https://${t.config.domain}:${port}/api/me`]);
    assert.match(JSON.parse(stdout).name, /^alice-/);
  });

  it('deploys with the docker CLI through port 443 (engine passthrough): run and build', async () => {
    await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    const serve = 'mkdir -p /www && echo hello-from-$HOSTNAME > /www/index.html && exec httpd -f -p 8080 -h /www';
    await cli.docker(['run', '-d', '--name', 'web', '--hostname', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c', serve]);
    await cli.docker(['run', '-d', '--name', 'plain', '--hostname', 'plain', '--restart', 'unless-stopped', '-p', '8081:8080', 'busybox-app', 'sh', '-c', serve]);
    await cli.docker(['run', '-d', '--name', 'private', '-p', '127.0.0.1:8082:8080', 'busybox-app', 'sh', '-c', serve]);
    assert.deepEqual((await cli.docker(['ps', '--format', '{{.Names}}'])).stdout.split('\n').filter(Boolean).sort(), ['plain', 'private', 'web']);
  });

  it('gives every port published on all interfaces an HTTPS address, as spec 4.3 says', async () => {
    const short = name.slice('svc-'.length);
    const expected = [`https://${name}-web.${t.config.domain}:${port}`, `https://${short}-plain-port8081.${t.config.domain}:${port}`].sort();
    const record = await eventually(async () => {
      const r = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
      return r.tunnel_urls.length === 2 && r.apps.every((a: { answers: boolean }) => a.answers) ? r : null;
    }, 'app addresses', 30_000);
    assert.deepEqual([...record.tunnel_urls].sort(), expected, 'the 127.0.0.1 port has no address');
    assert.match((await curl(`${name}-web`)).body, /hello-from-web/);
    assert.match((await curl(`${short}-plain-port8081`)).body, /hello-from-plain/);
    const unknown = await curl(`${short}-private-port8082`);
    assert.match(unknown.head, /^http\/1.1 404/);
  });

  it('carries raw TCP to a published port through its -tcp twin', async () => {
    const { stdout } = await run('sh', ['-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -connect 127.0.0.1:${port} -servername ${host(`${name}-web-tcp`)} 2>/dev/null`]);
    assert.match(stdout, /hello-from-web/);
  });

  it('reaches a database through its TLS address with its own client (redis-cli --tls)', async () => {
    await cli.docker(['build', '-q', '-t', 'redis-app', path.resolve('fixtures/redis')]);
    await cli.docker(['run', '-d', '--name', 'cache', '-p', '6379:6379', 'redis-app']);
    const label = `${name.slice('svc-'.length)}-cache-port6379`;
    await eventually(async () => (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body.tunnel_urls.some((u: string) => u.includes(label)), 'redis address', 30_000);
    const redis = (...args: string[]) => run('redis-cli', ['--tls', '--sni', host(`${label}-tcp`), '--cacert', ca, '-h', '127.0.0.1', '-p', String(port), ...args]);
    const pong = await eventually(async () => ((await redis('PING')).stdout.trim() === 'PONG' ? 'PONG' : null), 'redis PING over TLS', 20_000, 500);
    assert.equal(pong, 'PONG');
    assert.equal((await redis('SET', 'greeting', 'hello')).stdout.trim(), 'OK');
    assert.equal((await redis('GET', 'greeting')).stdout.trim(), 'hello');
  });

  it('answers with an error page for an app that listens only on 127.0.0.1 in its container', async () => {
    const serveLocal = 'mkdir -p /www && echo local > /www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /www';
    await cli.docker(['run', '-d', '--name', 'local', '-p', '8083:8080', 'busybox-app', 'sh', '-c', serveLocal]);
    const label = `${name.slice('svc-'.length)}-local-port8083`;
    const page = await eventually(async () => {
      const res = await curl(label);
      return /^http\/1.1 502/.test(res.head) ? res : null;
    }, 'loopback-only error page', 30_000, 500);
    assert.match(page.body, /listens only on 127\.0\.0\.1/);
    assert.match(page.body, /0\.0\.0\.0/);
  });

  it('lets ssh in as root with a registered key, through openssl s_client on the TLS port', async () => {
    const shell = await sshThroughEdge(t, alice.token, sb.dir);
    const ssh = async () => (await shell(name, 'id -un && docker ps --format "{{.Names}}"')).stdout;
    const stdout = await ssh();
    assert.match(stdout, /^root\n/);
    assert.match(stdout, /web/, 'inside, the docker CLI talks to the sandbox engine');
    // with HAProxy owning the port, the first connection put the shell name into its map: the next is HAProxy's
    const dp = t.service.edge.dataPlane;
    if (dp) {
      const api = new RuntimeApi(dp.files.adminSocket);
      await eventually(async () => (await api.send(`show map ${dp.files.tunnelsMap}`)).includes(` ${host(`${name}-shell-tcp`)} `), 'the shell in HAProxy\'s map', 5_000, 50);
      assert.match(await ssh(), /^root\n/, 'ssh through HAProxy');
    }
  });

  it('sleeps when idle; an engine connection is reset and never wakes it', async () => {
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '3s' });
    await eventually(async () => (await status()) === 'exited', 'idle sleep', 40_000);
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h' });
    await assert.rejects(cli.docker(['ps'], { timeoutMs: 20_000 }), 'the engine client fails while asleep');
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(await status(), 'exited', 'still asleep after an engine connection');
  });

  it('answers an app request while asleep with the waiting page, wakes, then serves the app', async () => {
    const waiting = await curl(`${name}-web`);
    assert.match(waiting.head, /^http\/1.1 200/);
    assert.match(waiting.head, new RegExp(`${WAITING_HEADER}: 1`));
    assert.match(waiting.head, /retry-after: \d+/);
    assert.match(waiting.body, /Sandbox is waking up/);
    await eventually(async () => /hello-from-web/.test((await curl(`${name}-web`)).body), 'app after wake', 30_000, 500);
    assert.equal(await status(), 'running');
  });

  it('counts a streaming engine connection as activity (a long build keeps the sandbox awake)', async () => {
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '4s' });
    // `docker events` streams bytes only when something happens; a container printing every 500 ms via `logs -f` does.
    await cli.docker(['run', '-d', '--name', 'ticker', 'busybox-app', 'sh', '-c', 'while true; do echo tick; sleep 0.5; done']);
    const follow = spawn('unshare', ['-m', 'sh', '-c', 'mount --bind "$HOSTS" /etc/hosts && exec docker logs -f ticker'], {
      env: { ...process.env, HOSTS: path.join(cli.certDir, 'hosts'), DOCKER_HOST: `tcp://${name}-engine.${t.config.domain}:${port}`, DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: cli.certDir },
      stdio: 'ignore',
    });
    try {
      await new Promise((r) => setTimeout(r, 10_000));
      assert.equal(await status(), 'running', 'bytes on the engine connection renewed the session');
    } finally {
      follow.kill();
    }
    await eventually(async () => (await status()) === 'exited', 'sleep once the stream ends', 30_000);
  });
});
