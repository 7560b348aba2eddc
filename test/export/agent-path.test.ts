import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { downloadExport } from '../helpers/export-folder.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIXTURE = path.resolve(HERE, '../../fixtures/busybox');

/**
 * An agent's path (issue 12): agent-path.sh gets the unzipped export folder and a compose project,
 * and nothing else: an empty environment (PATH and a fresh HOME) in a private mount namespace whose
 * /etc/hosts maps the sandbox's names to the edge, as DNS would.
 */
describe("an agent's path with only the export folder", () => {
  let t: TestService;
  let name: string;
  let token: string;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-agent-path-'));

  before(async () => {
    t = await startTestService();
    const alice = await t.user('alice');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `agent-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    ({ token } = await downloadExport(t, name, alice.token, tmp));
    // The agent finds its sandbox asleep.
    await t.service.lifecycle.sleep(name, 'test');
  });
  after(async () => {
    await t?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('starts the sandbox, deploys two services with compose, reaches the app, reads logs and files, keeps it awake', async () => {
    const project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    fs.copyFileSync(path.join(HERE, 'agent-app/compose.yaml'), path.join(project, 'compose.yaml'));
    fs.cpSync(FIXTURE, path.join(project, 'busybox'), { recursive: true, verbatimSymlinks: true });
    assert.ok(fs.existsSync(path.join(project, 'busybox/.build/rootfs/bin/busybox')), 'fixtures/busybox/.build is made by npm run setup');
    const home = path.join(tmp, 'home');
    fs.mkdirSync(home);
    const hosts = path.join(tmp, 'hosts');
    fs.writeFileSync(hosts, `127.0.0.1 localhost ${name}-engine.localhost ${name}-web.localhost\n`);

    const script = 'mount --bind "$1" /etc/hosts && shift && exec env -i PATH="$PATH" HOME="$HOME_DIR" bash "$@"';
    const child = spawn('unshare', ['-m', 'sh', '-c', script, 'sh', hosts, path.join(HERE, 'agent-path.sh'), path.join(tmp, name), project], {
      env: { PATH: process.env.PATH, HOME_DIR: home },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 540_000);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    clearTimeout(timer);
    assert.equal(code, 0, out);
    assert.match(out, /\[agent\] done$/m);
    assert.ok(!out.includes(token), 'the token is never printed');

    const record = (await t.api('GET', `/api/sandboxes/${name}`, token)).body;
    assert.equal(record.status, 'running');
    assert.ok(record.apps.some((a: { url: string; answers: boolean }) => a.url.startsWith(`https://${name}-web.localhost`) && a.answers), JSON.stringify(record.apps));
  });
});
