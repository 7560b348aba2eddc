// The compose v2 CLI a user already has, against a sandbox through the engine address on the TLS port
// (spec 1.1, 3 rule 5, 4.3, 4.4): build, both kinds of app address, exec, logs, a second release that
// recreates only what changed, a failing build, sleep and wake, and `docker compose` inside over ssh.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { EngineCli } from '../../harness/engine-cli.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { sshThroughEdge } from '../helpers/ssh-through-edge.ts';

const FIXTURE = path.resolve('fixtures/busybox');

/** A build context: the busybox fixture's rootfs plus a Dockerfile of the test's own. */
function context(dir: string, dockerfile: string): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.cpSync(path.join(FIXTURE, '.build'), path.join(dir, '.build'), { recursive: true, verbatimSymlinks: true });
  fs.writeFileSync(path.join(dir, 'Dockerfile'), dockerfile);
}

const serve = (text: string) =>
  `FROM scratch\nCOPY .build/rootfs/ /\nENV PATH=/bin\nRUN mkdir -p /www && echo ${text} > /www/index.html\nCMD ["httpd", "-f", "-p", "8080", "-h", "/www"]\n`;

/** Two services: `web` (built, default address) and `api` (labelled, a named volume, restarts on wake). */
function composeFile(apiTag: string): string {
  return `services:
  web:
    build: ./web
    image: shop-web:1
    ports: ["8080:8080"]
  api:
    build: ./api-${apiTag}
    image: shop-api:${apiTag}
    labels:
      tunnel.subdomain: api
    ports: ["9090:8080"]
    restart: unless-stopped
    volumes: ["data:/data"]
    command: ["sh", "-c", "echo ${apiTag} >> /data/releases; echo api-${apiTag} started; exec httpd -f -p 8080 -h /www"]
volumes:
  data: {}
`;
}

describe('docker compose v2 against a sandbox', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let alice: { id: string; token: string };
  let name: string;
  let cli: EngineCli;
  let dir: string;

  const curl = (label: string) => sb.curl(label);
  const record = () => sb.record();
  const containerIds = async () => {
    const { stdout } = await cli.compose(dir, ['-p', 'shop', 'ps', '-a', '--format', '{{.Service}} {{.ID}} {{.State}}']);
    return new Map(stdout.trim().split('\n').filter(Boolean).map((l) => { const [s, id, state] = l.split(' '); return [s!, { id: id!, state: state! }]; }));
  };

  before(async () => {
    t = await startTestService();
    sb = await openEdgeSandbox(t, 'cmp');
    ({ name, cli, dir, user: alice } = sb);
    context(path.join(dir, 'web'), serve('web-1'));
    context(path.join(dir, 'api-1'), serve('api-1'));
    context(path.join(dir, 'api-2'), serve('api-2'));
    fs.writeFileSync(path.join(dir, 'compose.yaml'), composeFile('1'));
  });
  after(async () => {
    sb?.close();
    await t?.close();
  });

  it('runs a supported engine with compose v2 and buildx inside', async () => {
    const { stdout } = await cli.docker(['version', '--format', '{{.Server.Version}}']);
    assert.ok(Number(stdout.trim().split('.')[0]) >= 26, `engine ${stdout.trim()}`);
  });

  it('deploys with `up -d --build` (BuildKit through the engine address) and serves both spec 4.3 addresses', async () => {
    await cli.compose(dir, ['-p', 'shop', 'up', '-d', '--build'], { timeoutMs: 300_000 });
    const short = name.slice('svc-'.length);
    const port = t.config.httpsPort;
    const expected = [`https://${name}-api.${t.config.domain}:${port}`, `https://${short}-shop-shop-web-1-port8080.${t.config.domain}:${port}`].sort();
    await eventually(async () => {
      const r = await record();
      return r.tunnel_urls.length === 2 && r.apps.every((a: { answers: boolean }) => a.answers);
    }, 'both app addresses answering', 60_000);
    assert.deepEqual([...(await record()).tunnel_urls].sort(), expected);
    assert.match(await curl(`${name}-api`), /api-1/);
    assert.match(await curl(`${short}-shop-shop-web-1-port8080`), /web-1/);
  });

  it('runs `exec` and `logs` through the engine address', async () => {
    assert.equal((await cli.compose(dir, ['-p', 'shop', 'exec', '-T', 'api', 'cat', '/data/releases'])).stdout.trim(), '1');
    const logs = await cli.compose(dir, ['-p', 'shop', 'logs', '--no-color', 'api']);
    assert.match(logs.stdout, /api-1 started/);
  });

  it('a second release with a new tag recreates only the changed service and keeps the named volume', async () => {
    const before = await containerIds();
    fs.writeFileSync(path.join(dir, 'compose.yaml'), composeFile('2'));
    await cli.compose(dir, ['-p', 'shop', 'up', '-d', '--build'], { timeoutMs: 300_000 });
    const after = await containerIds();
    assert.equal(after.get('web')?.id, before.get('web')?.id, 'web is unchanged and kept');
    assert.notEqual(after.get('api')?.id, before.get('api')?.id, 'api is recreated');
    await eventually(async () => /api-2/.test(await curl(`${name}-api`)), 'the new release at the same address', 60_000, 500);
    // the volume, seen through its file path (spec 2.4): both releases wrote to it
    const volumes = (await t.api('GET', `/api/sandboxes/${name}/volumes`, alice.token)).body;
    const data = volumes.find((v: { name: string }) => v.name === 'shop_data');
    assert.ok(data, JSON.stringify(volumes));
    const text = await t.api('GET', `/api/sandboxes/${name}/files/text?path=${encodeURIComponent(`${data.path}/releases`)}`, alice.token);
    assert.equal(text.status, 200, answerOf(text));
    assert.equal(text.body.text, '1\n2\n');
  });

  it("a build that fails answers with compose's error and leaves the sandbox and its apps healthy", async () => {
    const broken = path.join(dir, 'broken');
    context(path.join(broken, 'app'), 'FROM scratch\nCOPY .build/rootfs/ /\nRUN sh -c "echo the-build-breaks >&2; exit 3"\n');
    fs.writeFileSync(path.join(broken, 'compose.yaml'), 'services:\n  app:\n    build: ./app\n    ports: ["7070:8080"]\n');
    const failed = await cli.compose(broken, ['-p', 'broken', 'up', '-d', '--build'], { timeoutMs: 300_000 }).then(() => null, (err: Error) => err);
    assert.ok(failed, 'the build failed');
    assert.match(failed.message, /the-build-breaks|exit code: 3|returned a non-zero code: 3/);
    assert.equal((await record()).status, 'running');
    assert.match(await curl(`${name}-api`), /api-2/);
    const ids = await containerIds();
    assert.equal(ids.get('api')?.state, 'running');
    assert.equal(ids.get('web')?.state, 'running');
  });

  it('after sleep and wake only services with restart unless-stopped or always run', async () => {
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '3s' });
    await eventually(async () => (await record()).status === 'exited', 'idle sleep', 60_000);
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h' });
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/start`, alice.token)).status < 300, true);
    await eventually(async () => (await record()).status === 'running', 'wake', 60_000);
    const ids = await eventually(async () => {
      const m = await containerIds();
      return m.get('api')?.state === 'running' ? m : null;
    }, 'api restarted by its policy', 60_000, 500);
    assert.equal(ids.get('web')?.state, 'exited', 'web has no restart policy and stays stopped');
    await eventually(async () => /api-2/.test(await curl(`${name}-api`)), 'api answers after the wake', 60_000, 500);
  });

  it('inside the sandbox over ssh, `docker compose` sees the project', async () => {
    const ssh = await sshThroughEdge(t, alice.token, dir);
    const { stdout } = await eventually(() => ssh(name, 'docker compose version --short && docker compose ls --all --format json && docker compose -p shop ps --format "{{.Service}}"'), 'ssh into the sandbox', 60_000, 1000);
    const [version, ls, ...services] = stdout.trim().split('\n');
    assert.match(version!, /^v?2\./);
    assert.ok(JSON.parse(ls!).some((p: { Name: string }) => p.Name === 'shop'), ls);
    assert.deepEqual(services, ['api']);
  });
});
