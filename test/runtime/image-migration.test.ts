// A sandbox made from the image before Debian 13 (svc-sandbox:bookworm: docker.io 20.10, no compose) moves
// to today's image at its next re-creation (deep sleep, then wake) with every volume, inner image,
// container and file intact (issue: compose everywhere, item 2).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { EngineCli } from '../../harness/engine-cli.ts';
import { openEdgeSandbox, recreateAfterDeepSleep, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';

const LEGACY_IMAGE = 'svc-sandbox:bookworm';
const FIXTURE = path.resolve('fixtures/busybox');

describe('a sandbox on the pre-Debian-13 image moves to today’s image at its next re-creation', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let alice: { id: string; token: string };
  let name: string;
  let cli: EngineCli;
  let dir: string;

  const curlApp = () => sb.curl(`${name}-shop`);

  before(async () => {
    t = await startTestService({ sandboxImage: LEGACY_IMAGE });
    sb = await openEdgeSandbox(t, 'mig');
    ({ name, cli, dir, user: alice } = sb);
  });
  after(async () => {
    sb?.close();
    await t?.close();
  });

  it('keeps the compose app, its named volume, the inner image and /srv across the move', async () => {
    assert.match((await cli.docker(['version', '--format', '{{.Server.Version}}'])).stdout, /^20\.10\./, 'starts on the old engine');
    // a compose app with a volume, deployed with the compose v2 CLI from outside (the old image has none inside)
    fs.cpSync(path.join(FIXTURE, '.build'), path.join(dir, 'app', '.build'), { recursive: true, verbatimSymlinks: true });
    fs.writeFileSync(path.join(dir, 'app', 'Dockerfile'), 'FROM scratch\nCOPY .build/rootfs/ /\nENV PATH=/bin\n');
    fs.writeFileSync(path.join(dir, 'compose.yaml'), `services:
  shop:
    build: ./app
    image: shop:1
    labels: { tunnel.subdomain: shop }
    ports: ["8080:8080"]
    restart: unless-stopped
    volumes: ["data:/www"]
    command: ["sh", "-c", "[ -f /www/index.html ] || echo made-on-the-old-image > /www/index.html; exec httpd -f -p 8080 -h /www"]
volumes:
  data: {}
`);
    // the old engine has no BuildKit session API: compose falls back to the classic builder with this
    await cli.compose(dir, ['-p', 'shop', 'up', '-d', '--build'], { timeoutMs: 300_000, env: { DOCKER_BUILDKIT: '0' } });
    await eventually(async () => /made-on-the-old-image/.test(await curlApp()), 'the app on the old image', 60_000, 500);
    const put = await fetch(`${t.url}/api/sandboxes/${name}/files/content?path=/srv/notes.txt`, {
      method: 'PUT', headers: { authorization: `Bearer ${alice.token}` }, body: 'kept in /srv',
    });
    assert.equal(put.status < 300, true, await put.text());
    const containerId = (await cli.docker(['ps', '-q', '--filter', 'name=shop-shop-1'])).stdout.trim();
    assert.ok(containerId);

    // the operator moves the service to today's image; the next re-creation puts the sandbox on it
    await recreateAfterDeepSleep(t, sb, { sandboxImage: 'svc-sandbox:latest' });

    const version = await eventually(async () => (await cli.docker(['version', '--format', '{{.Server.Version}}'])).stdout.trim(), 'the new engine', 60_000, 500);
    assert.ok(Number(version.split('.')[0]) >= 26, `engine ${version}`);
    assert.match((await cli.docker(['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}'])).stdout, /^shop:1$/m, 'inner image kept');
    assert.equal((await cli.docker(['ps', '-q', '--no-trunc', '--filter', 'name=shop-shop-1'])).stdout.trim().startsWith(containerId), true, 'the same container, restarted by its policy');
    await eventually(async () => /made-on-the-old-image/.test(await curlApp()), 'the app and its volume on the new image', 60_000, 500);
    const notes = await t.api('GET', `/api/sandboxes/${name}/files/text?path=/srv/notes.txt`, alice.token);
    assert.equal(notes.body.text, 'kept in /srv');
    // and compose v2 now works inside too, on the same project
    const ls = await cli.compose(dir, ['-p', 'shop', 'ps', '--format', '{{.Service}} {{.State}}']);
    assert.equal(ls.stdout.trim(), 'shop running');
  });
});
