import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { testHostsDown, testHostsUp } from '../../harness/test-hosts.ts';
import { ageMove, containersOn, hostDocker, moveTools, volumesOn } from '../helpers/moving.ts';
import { svcCliBackground } from '../helpers/svc-cli.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');


/**
 * `svc hosts evacuate` on two runner hosts on this machine (scripts/test-hosts.sh): every sandbox of
 * host one, running, in deep sleep or with no volumes, moves to host two with its files (owners and
 * extended attributes as inside), inner images and inner containers (their layers' whiteouts too); a move
 * whose process is killed mid-copy leaves the sandbox unable to start until a reconcile pass finishes it;
 * bad input changes nothing. Moves interrupted otherwise, and `svc hosts move`: move-interrupted.test.ts.
 */
describe('moving sandboxes between runner hosts (svc hosts evacuate)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let root: { id: string; token: string };
  const made = new Map<string, { record: any; cli: EngineCli }>();
  const names = { running: '', asleep: '', empty: '', big: '' };
  let bigSum = '';
  let dir = '';

  const { exec, placement, cli } = moveTools(() => t);
  const xattrs = (name: string) => exec(name, 'getfattr -h -d -m - -e hex /root/work/capable /root/work/file.txt');
  let xattrsBefore = '';

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    await testHostsUp(2, t.config);
    for (const host of ['local', 'test-2']) assert.equal((await cli('hosts', 'drain', host)).code, 0);
    alice = await t.user('alice');
    root = await t.user('root', { admin: true });
    const prefix = t.config.redisPrefix;
    // sorted by name, as evacuate moves them: the big one last, so the kill comes after the others moved
    Object.assign(names, { running: `svc-a-${prefix}`, asleep: `svc-b-${prefix}`, empty: `svc-c-${prefix}`, big: `svc-z-${prefix}` });
    for (const name of Object.values(names)) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      assert.equal(await placement(name), 'test-1');
      made.set(name, { record: res.body, cli: new EngineCli(res.body.engine_access.host, '127.0.0.1', t.config.httpsPort, res.body) });
    }
    // files of a user of the sandbox's own (uid 1000) and of root, in the workspace and a home
    for (const name of [names.running, names.asleep]) {
      await exec(name, `mkdir -p /root/work /home/u && echo work-of-${name} > /root/work/file.txt && echo mine > /home/u/own && chown -R 1000:1000 /home/u && chmod 4750 /home/u/own`);
    }
    // extended attributes: a file capability (cap_net_bind_service+ep, as setcap writes it) on a binary, a user.* one
    await exec(names.running, 'cp /bin/sleep /root/work/capable && setfattr -n security.capability -v 0x0100000200040000000000000000000000000000 /root/work/capable'
      + ' && setfattr -n user.origin -v kept /root/work/file.txt');
    xattrsBefore = await xattrs(names.running);
    assert.match(xattrsBefore, /security\.capability=0x01000002000400/);
    assert.match(xattrsBefore, /user\.origin=0x6b657074/);
    // an inner image, and an inner container whose own layer deleted a file of the image (a whiteout)
    const { cli: engine } = made.get(names.running)!;
    await engine.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await engine.docker(['run', '-d', '--name', 'keep', 'busybox-app', 'sh', '-c', 'echo layer > /in-layer && rm -f /bin/nc && exec sleep 3600']);
    await eventually(async () => (await engine.docker(['exec', 'keep', 'cat', '/in-layer']).catch(() => ({ stdout: '' }))).stdout.includes('layer'), 'the inner container');
    // deep sleep: the container and network go, the volumes stay
    await t.service.lifecycle.sleep(names.asleep, 'test');
    await t.service.runtime.takeDown(names.asleep);
    // a sandbox with no volumes on its host (yet): only its placement moves
    await t.service.runtime.takeDown(names.empty);
    for (const v of ['root', 'home', 'srv', 'opt', 'docker']) await hostDocker(1, 'volume', 'rm', `${names.empty}-${v}`);
    // an app of the big one, whose address the edge keeps while it is asleep or moving
    const { cli: bigEngine } = made.get(names.big)!;
    await bigEngine.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await bigEngine.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'busybox-app', 'httpd', '-f', '-p', '8080']);
    await eventually(async () => t.service.lifecycle.views.appAddresses(names.big).length > 0, 'the big one\'s app address');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-move-'));
    fs.writeFileSync(path.join(dir, 'ca.pem'), (await t.api('GET', '/ca.pem', undefined)).body);
    // 200 MB that no compression shortens: long enough a copy to be killed in
    await exec(names.big, 'head -c 200000000 /dev/urandom > /root/big');
    bigSum = await exec(names.big, 'sha256sum /root/big');
    assert.equal((await cli('hosts', 'undrain', 'test-2')).code, 0);
  });
  after(async () => {
    for (const { cli: c } of made.values()) c.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
    await testHostsDown();
  });

  it('refuses bad input and changes nothing: an unknown host, a host not drained, no host named', async () => {
    const before = await t.service.store.hosts.placements();
    const unknown = await cli('hosts', 'evacuate', 'test-9');
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no host named "test-9"/);
    const open = await cli('hosts', 'evacuate', 'test-1');
    assert.equal(open.code, 1);
    assert.match(open.stderr, /not drained: svc hosts drain test-1 first/);
    const usage = await cli('hosts', 'evacuate');
    assert.equal(usage.code, 2);
    assert.deepEqual(await t.service.store.hosts.placements(), before);
    assert.deepEqual(await t.service.store.hosts.moves(), []);
    const running = await t.service.runtime.inspect(names.running);
    assert.equal(running.status, 'running', 'the sandboxes were not touched');
  });

  it('evacuates host one: a move killed mid-copy leaves its sandbox unable to start on either host, and a reconcile pass finishes it', async () => {
    assert.equal((await cli('hosts', 'drain', 'test-1')).code, 0);
    const evacuation = svcCliBackground(t.config, 'hosts', 'evacuate', 'test-1');
    // the big one's first progress line: its copy is under way
    await evacuation.when(new RegExp(`${names.big}: test-1 → test-2: copied`));
    if (evacuation.child.exitCode === null) evacuation.signal('SIGKILL');
    await evacuation.closed;
    const output = evacuation.output();
    for (const name of [names.running, names.asleep, names.empty]) assert.match(output, new RegExp(`${name}: moved test-1 → test-2`), output);
    assert.doesNotMatch(output, new RegExp(`${names.big}: moved`), `killed before the big copy ended: ${output}`);
    // a placement changed by another process reaches this one at once (as the app table does), not at its next miss
    const listed = await t.api('GET', '/api/admin/sandboxes', root.token);
    assert.equal(listed.status, 200, answerOf(listed));
    const hostOf = (name: string) => (listed.body as Array<{ name: string; host: string | null }>).find((s) => s.name === name)?.host;
    assert.deepEqual([names.running, names.asleep, names.empty].map(hostOf), ['test-2', 'test-2', 'test-2'], 'the admin list names the new host');
    const [move] = (await t.service.store.hosts.moves()).map((m) => m.move);
    assert.deepEqual([move?.sandbox, move?.phase, move?.from, move?.to], [names.big, 'copying', 'test-1', 'test-2']);

    // meanwhile: it starts nowhere (503 with Retry-After), and no container of it is on its old host
    const start = await fetch(`${t.url}/api/sandboxes/${names.big}/start`, { method: 'POST', headers: { authorization: `Bearer ${alice.token}` } });
    assert.equal(start.status, 503, await start.text());
    assert.ok(Number(start.headers.get('retry-after')) > 0);
    const app = `${names.big}-web.${t.config.domain}`;
    const page = await run('curl', ['-sS', '-i', '--max-time', '30', '--cacert', path.join(dir, 'ca.pem'), '--resolve', `${app}:${t.config.httpsPort}:127.0.0.1`, `https://${app}:${t.config.httpsPort}/`]);
    assert.match(page.stdout, /^x-svc-waiting: 1/im, 'its app answers the waiting page');
    assert.equal((await hostDocker(1, 'ps', '-aq', '--filter', `name=^${names.big}$`)).stdout.trim(), '');
    assert.equal(await placement(names.big), 'test-1');
    // a reconcile pass before the mover is stale leaves it alone
    await t.service.lifecycle.reconcile();
    assert.equal((await t.service.store.hosts.moves())[0]?.move.owner, move!.owner);

    // once its process has not renewed it for MOVE_STALE_MS (its heartbeat written back that far), a pass takes it over and copies again
    await ageMove(t, names.big);
    await t.service.lifecycle.reconcile();
    await eventually(async () => (await t.service.store.hosts.moves()).length === 0, 'the move finished by reconcile', 180_000, 1000);
    assert.equal(await placement(names.big), 'test-2');
    const res = await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum, 'the big file intact');
    // the old host keeps nothing of it: no volume, no helper
    assert.equal(await volumesOn(1, names.big), '');
    assert.equal(await containersOn(1, names.big), '');
  });

  it('runs the moved sandboxes on host two with their files (owners as inside), inner image and inner container', async () => {
    for (const name of [names.running, names.asleep, names.empty]) {
      assert.equal(await placement(name), 'test-2');
      const res = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
      assert.equal(res.status, 200, answerOf(res));
      assert.match((await t.service.lifecycle.status(name)).address ?? '', /^10\.218\./, 'an address of host two\'s pool');
      assert.equal(await volumesOn(1, name), '', 'nothing left on host one');
    }
    for (const name of [names.running, names.asleep]) {
      assert.equal(await exec(name, 'cat /root/work/file.txt'), `work-of-${name}`);
      assert.equal(await exec(name, 'stat -c "%u:%g %a" /home/u /home/u/own'), '1000:1000 755\n1000:1000 4750');
    }
    assert.equal(await xattrs(names.running), xattrsBefore, 'the file capability and the user.* attribute');
    const { cli: engine } = made.get(names.running)!;
    assert.notEqual((await engine.docker(['images', '-q', 'busybox-app'])).stdout.trim(), '', 'the inner image');
    assert.equal((await engine.docker(['run', '--rm', 'busybox-app', 'sh', '-c', 'test -e /bin/nc && echo image-whole'])).stdout.trim(), 'image-whole');
    await engine.docker(['start', 'keep']);
    const inside = await engine.docker(['exec', 'keep', 'sh', '-c', 'cat /in-layer; test -e /bin/nc && echo nc-back || echo nc-gone']);
    assert.equal(inside.stdout.trim(), 'layer\nnc-gone', 'the inner container\'s own layer, its whiteout included');
    const listed = JSON.parse((await cli('hosts', 'list', '--json')).stdout) as Array<{ name: string; sandboxes: number }>;
    assert.deepEqual(['test-1', 'test-2'].map((h) => listed.find((x) => x.name === h)?.sandboxes), [0, 4]);
    const removed = await cli('hosts', 'remove', 'test-1');
    assert.equal(removed.code, 0, removed.stderr);
    const audit = await t.service.store.audit.query({ action: 'admin.sandbox_move' });
    assert.ok(audit.rows.length >= 3, 'each move is an audit row');
  });
});
