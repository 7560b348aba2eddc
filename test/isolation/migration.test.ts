// A sandbox made on the main engine (unisolated, as every sandbox was before isolation) moves to the
// user-namespaced sandbox engine at its next creation (deep sleep, then wake) with its volumes, inner
// images, containers and files, and with owners shifted into its uid range (issue 13, item 3).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import type { EngineCli } from '../../harness/engine-cli.ts';
import { openEdgeSandbox, recreateAfterDeepSleep, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

describe('a sandbox of the main engine moves to the isolated engine', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let name: string;
  let cli: EngineCli;
  const main = new Docker();

  const curlApp = () => sb.curl(`${name}-keep`);

  before(async () => {
    t = await startTestService({ sandboxRuntime: 'unisolated' });
    sb = await openEdgeSandbox(t, 'mv');
    ({ name, cli } = sb);
  });
  after(async () => {
    sb?.close();
    await t?.close();
    // the old volumes stay on the main engine for the operator; the test removes them
    for (const v of (await main.listVolumes({ filters: { name: [name] } })).Volumes ?? []) await main.getVolume(v.Name).remove().catch(() => undefined);
  });

  it('keeps the app, its volume, the inner image and files of several owners; owners shift on the host', async () => {
    await main.getContainer(name).inspect(); // it is on the main engine
    await cli.docker(['build', '-q', '-t', 'app:1', FIXTURE]);
    await cli.docker(['volume', 'create', 'data']);
    await cli.docker(['run', '--rm', '-v', 'data:/data', 'app:1', 'sh', '-c', 'echo kept > /data/index.html && chown 1000:1000 /data/index.html']);
    await cli.docker(['run', '-d', '--name', 'keep', '--label', 'tunnel.subdomain=keep', '--restart', 'unless-stopped', '-p', '8080:8080', '-v', 'data:/data', 'app:1', 'httpd', '-f', '-p', '8080', '-h', '/data']);
    await cli.docker(['run', '-d', '--name', 'once', 'app:1', 'sleep', '100000']);
    await eventually(async () => /kept/.test(await curlApp()), 'the app on the main engine', 60_000, 500);
    const inMain = (cmd: string) => run('docker', ['exec', name, 'sh', '-c', cmd]);
    await inMain('echo mine > /root/root.txt && mkdir -p /home/dev && echo dev > /home/dev/dev.txt && chown -R 1000:1000 /home/dev && ' +
      'cp /bin/true /srv/setgid-tool && chgrp 1000 /srv/setgid-tool && chmod 2755 /srv/setgid-tool && mknod /srv/disk b 7 0');

    // the operator turns isolation on; the next re-creation moves the sandbox
    await recreateAfterDeepSleep(t, sb, { sandboxRuntime: 'userns' });

    const isolated = sandboxDocker();
    const { State } = await isolated.getContainer(name).inspect();
    assert.match(fs.readFileSync(`/proc/${State.Pid}/uid_map`, 'utf8'), /^\s*0\s+100000\s+/m, 'now in a user namespace');
    await assert.rejects(main.getContainer(name).inspect(), 'the old container is gone from the main engine');

    await eventually(async () => /kept/.test(await curlApp()), 'the app, restarted by its policy, serving its volume', 90_000, 500);
    const inner = (await cli.docker(['ps', '-a', '--format', '{{.Names}} {{.State}}'])).stdout.trim().split('\n').sort();
    assert.deepEqual(inner, ['keep running', 'once exited']);
    assert.match((await cli.docker(['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}'])).stdout, /^app:1$/m);

    const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout.trim();
    assert.equal(await inSandbox('cat /root/root.txt; stat -c %u:%g /root/root.txt'), 'mine\n0:0');
    assert.equal(await inSandbox('stat -c %u:%g /home/dev/dev.txt'), '1000:1000');
    assert.equal(await inSandbox('stat -c %a:%g /srv/setgid-tool'), '2755:1000', 'the set-group-ID bit survives the owner shift');
    assert.equal(await inSandbox('[ -e /srv/disk ] && echo present || echo absent'), 'absent', 'device nodes are left behind');
    assert.equal((await cli.docker(['run', '--rm', '-v', 'data:/data', 'app:1', 'stat', '-c', '%u', '/data/index.html'])).stdout.trim(), '1000');
    // on the host, the same files belong to the sandbox's uid range
    const home = (await isolated.getVolume(`${name}-home`).inspect()).Mountpoint;
    assert.equal(fs.statSync(path.join(home, 'dev', 'dev.txt')).uid, 101000);
    const root = (await isolated.getVolume(`${name}-root`).inspect()).Mountpoint;
    assert.equal(fs.statSync(path.join(root, 'root.txt')).uid, 100000);
  });
});
