import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { testHostsDown, testHostsUp } from '../../harness/test-hosts.ts';
import { MOVE_STALE_MS } from '../../lifecycle/move.ts';
import { svcCli, svcCliEnv } from '../helpers/svc-cli.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');
const ROOT = path.resolve('.');

/** The engine of test host i, as the test reaches it on this machine (scripts/test-hosts.sh). */
const hostDocker = (i: number, ...args: string[]) => run('docker', ['-H', `unix:///run/svc-host-${i}.sock`, ...args]);
/** Kills test host i's engine as a crash of that machine would (its dockerd, SIGKILL); testHostsUp starts it again. */
const killEngine = (i: number) => process.kill(Number(fs.readFileSync(`/run/svc-host-${i}.pid`, 'utf8')), 'SIGKILL');

/**
 * `svc hosts evacuate` and `svc hosts move` on two runner hosts on this machine (scripts/test-hosts.sh):
 * every sandbox of host one, running, in deep sleep or with no volumes, moves to host two with its files
 * (owners and extended attributes as inside), inner images and inner containers (their layers' whiteouts
 * too); a move whose process is killed mid-copy leaves the sandbox unable to start until a reconcile pass
 * finishes it. Then one sandbox with 200 MB, moved back and forth: a copy that differs, a deadline passed,
 * either host's engine killed mid-copy, all roll back with nothing lost; a mover paused past the take-over
 * commits nothing. Bad input changes nothing.
 */
describe('moving sandboxes between runner hosts (svc hosts evacuate, svc hosts move)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  const made = new Map<string, { record: any; cli: EngineCli }>();
  const names = { running: '', asleep: '', empty: '', big: '' };
  let bigSum = '';
  let dir = '';

  const exec = async (name: string, script: string) => {
    const r = await t.service.runtime.exec.run(name, ['sh', '-c', script]);
    assert.equal(r.exitCode, 0, r.stderr);
    return r.stdout.toString().trim();
  };
  const placement = async (name: string) => (await t.service.store.hosts.placementOf(name)) ?? 'local';
  const cli = (...args: string[]) => svcCli(t.config, ...args);
  const xattrs = (name: string) => exec(name, 'getfattr -h -d -m - -e hex /root/work/capable /root/work/file.txt');
  let xattrsBefore = '';
  /** The sandbox's volumes on test host i (their names); its containers there (ids). */
  const volumesOn = async (i: number, name: string) => (await hostDocker(i, 'volume', 'ls', '-q', '--filter', `label=svc.sandbox=${name}`)).stdout.trim();
  const containersOn = async (i: number, name: string) => (await hostDocker(i, 'ps', '-aq', '--filter', `label=svc.sandbox=${name}`)).stdout.trim();

  /**
   * `npx svc …` in its own process group (a kill or a pause takes npx, tsx and node at once, as a crash
   * would); `when(pattern)` resolves once its output matches (or it ended), `closed` with its exit code.
   */
  const background = (...args: string[]) => {
    const child = spawn('npx', ['svc', ...args], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: svcCliEnv(t.config) });
    let output = '';
    const waiting: Array<{ pattern: RegExp; resolve: () => void }> = [];
    const seen = () => {
      for (const w of waiting.filter((x) => x.pattern.test(output))) { waiting.splice(waiting.indexOf(w), 1); w.resolve(); }
    };
    child.stdout.on('data', (d) => { output += d; seen(); });
    child.stderr.on('data', (d) => { output += d; seen(); });
    const closed = new Promise<number | null>((resolve) => child.on('close', (code) => {
      for (const w of waiting.splice(0)) w.resolve();
      resolve(code);
    }));
    return {
      child,
      closed,
      output: () => output,
      when: (pattern: RegExp) => new Promise<void>((resolve) => {
        if (pattern.test(output) || child.exitCode !== null) resolve();
        else waiting.push({ pattern, resolve });
      }),
      signal: (sig: NodeJS.Signals) => process.kill(-child.pid!, sig),
    };
  };
  /** `svc hosts move` of the big one, stopped at its first copied bytes by `interrupt`; answers its exit code and output. */
  const interruptedMove = async (to: string, interrupt: () => Promise<void> | void) => {
    const mover = background('hosts', 'move', names.big, '--to', to);
    await mover.when(new RegExp(`${names.big}: test-\\d → ${to}: copied`));
    assert.equal(mover.child.exitCode, null, `the move was under way: ${mover.output()}`);
    await interrupt();
    return { code: await mover.closed, output: mover.output() };
  };

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    await testHostsUp(2, t.config);
    for (const host of ['local', 'test-2']) assert.equal((await cli('hosts', 'drain', host)).code, 0);
    alice = await t.user('alice');
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
    await eventually(async () => t.service.lifecycle.appAddresses(names.big).length > 0, 'the big one\'s app address');
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
    const evacuation = background('hosts', 'evacuate', 'test-1');
    // the big one's first progress line: its copy is under way
    await evacuation.when(new RegExp(`${names.big}: test-1 → test-2: copied`));
    if (evacuation.child.exitCode === null) evacuation.signal('SIGKILL');
    await evacuation.closed;
    const output = evacuation.output();
    for (const name of [names.running, names.asleep, names.empty]) assert.match(output, new RegExp(`${name}: moved test-1 → test-2`), output);
    assert.doesNotMatch(output, new RegExp(`${names.big}: moved`), `killed before the big copy ended: ${output}`);
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

    // once its process has not renewed it for MOVE_STALE_MS, a pass takes it over and copies again
    await new Promise((r) => setTimeout(r, MOVE_STALE_MS - (Date.now() - Date.parse(move!.heartbeat_at)) + 500));
    await t.service.lifecycle.reconcile();
    await eventually(async () => (await t.service.store.hosts.moves()).length === 0, 'the move finished by reconcile', 180_000, 1000);
    assert.equal(await placement(names.big), 'test-2');
    const res = await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum, 'the big file intact');
    // the old host keeps nothing of it: no volume, no helper
    assert.equal((await hostDocker(1, 'volume', 'ls', '-q', '--filter', `label=svc.sandbox=${names.big}`)).stdout.trim(), '');
    assert.equal((await hostDocker(1, 'ps', '-aq', '--filter', `label=svc.sandbox=${names.big}`)).stdout.trim(), '');
  });

  it('runs the moved sandboxes on host two with their files (owners as inside), inner image and inner container', async () => {
    for (const name of [names.running, names.asleep, names.empty]) {
      assert.equal(await placement(name), 'test-2');
      const res = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
      assert.equal(res.status, 200, answerOf(res));
      assert.match((await t.service.lifecycle.status(name)).address ?? '', /^10\.218\./, 'an address of host two\'s pool');
      assert.equal((await hostDocker(1, 'volume', 'ls', '-q', '--filter', `label=svc.sandbox=${name}`)).stdout.trim(), '', 'nothing left on host one');
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

  it('svc hosts move refuses bad input and changes nothing: unknown sandbox or host, the same host, a drained or silent target, too little space', async () => {
    await testHostsUp(2, t.config); // host one again, as svc hosts add does: its engine kept running
    assert.equal((await cli('hosts', 'drain', 'test-1')).code, 0);
    const before = { placements: await t.service.store.hosts.placements(), volumes: await volumesOn(2, names.big) };
    // a host that does not answer: registered at a port where nothing listens
    assert.equal((await cli('hosts', 'add', 'test-3', '127.0.0.1', '--port', '1', '--pool', '10.230.0.0/16', '--certs-out', path.join(dir, 'test-3'))).code, 0);
    const refusals: Array<[string[], number, RegExp]> = [
      [[], 2, /takes SANDBOX/],
      [[names.big, '--deadline', 'soon'], 2, /--deadline needs a duration/],
      [[`svc-nothing-${t.config.redisPrefix}`], 1, /no sandbox named "svc-nothing-/],
      [[names.big, '--to', 'test-9'], 1, /no host named "test-9"/],
      [[names.big, '--to', 'test-2'], 1, new RegExp(`"${names.big}" is on "test-2" already`)],
      [[names.big, '--to', 'test-1'], 1, /host "test-1" is drained/],
      [[names.big, '--to', 'test-3'], 1, /host "test-3" does not answer .*nothing was changed/],
    ];
    for (const [args, code, message] of refusals) {
      const r = await cli('hosts', 'move', ...args);
      assert.deepEqual([r.code, message.test(r.stderr)], [code, true], `${args.join(' ')}: ${r.stderr}`);
    }
    assert.equal((await cli('hosts', 'drain', 'test-3')).code, 0);
    assert.equal((await cli('hosts', 'remove', 'test-3')).code, 0);
    assert.equal((await cli('hosts', 'undrain', 'test-1')).code, 0);
    // a target that would keep less than SVC_MOVE_FREE_RESERVE_MB free: here, all it has
    const { stdout: df } = await run('df', ['-kP', '/var/lib/svc-host-1']);
    const freeMb = Math.ceil((Number(df.trim().split('\n').at(-1)!.split(/\s+/)[3]) * 1024) / 1e6);
    const full = await svcCli({ ...t.config, env: { SVC_MOVE_FREE_RESERVE_MB: String(freeMb) } }, 'hosts', 'move', names.big, '--to', 'test-1');
    assert.equal(full.code, 1);
    assert.match(full.stderr, new RegExp(`sandbox "${names.big}" takes (\\d+) MB on "test-2", and host "test-1" has (\\d+) MB free on its engine's data root \\(it keeps ${freeMb} MB free, SVC_MOVE_FREE_RESERVE_MB\\): not moved`));
    const [, takes] = /takes (\d+) MB/.exec(full.stderr)!;
    assert.ok(Number(takes) >= 200, `the 200 MB file counted: ${takes} MB`);
    assert.deepEqual(await t.service.store.hosts.placements(), before.placements);
    assert.deepEqual(await t.service.store.hosts.moves(), []);
    assert.equal(await volumesOn(2, names.big), before.volumes);
    assert.equal(await volumesOn(1, names.big), '', 'nothing made on the target');
  });

  it('rolls a move back when its deadline passes, or when the copy differs in an extended attribute', async () => {
    const late = await cli('hosts', 'move', names.big, '--to', 'test-1', '--deadline', '1s');
    assert.equal(late.code, 1);
    assert.match(late.stdout, new RegExp(`${names.big}: move test-2 → test-1 rolled back, the sandbox stays on test-2: the move did not finish within its deadline of 1 s`));
    // the target's helper gets an attribute the source does not have, while the bytes flow
    const differs = await interruptedMove('test-1', async () => {
      const helper = (await hostDocker(1, 'ps', '-q', '--filter', 'label=svc.role=mover', '--filter', `label=svc.sandbox=${names.big}`)).stdout.trim();
      await hostDocker(1, 'exec', helper, 'setfattr', '-n', 'user.intruder', '-v', 'x', '/v/root');
    });
    assert.equal(differs.code, 1, differs.output);
    assert.match(differs.output, /rolled back, the sandbox stays on test-2: the copy differs from the source in its extended attributes$/m);
    for (const text of [late.stdout, differs.output]) assert.doesNotMatch(text, /is on test-1/);
    await eventually(async () => (await t.service.store.hosts.moves()).length === 0, 'the partial copies removed');
    assert.equal(await placement(names.big), 'test-2');
    assert.equal(await volumesOn(1, names.big), '');
  });

  it('rolls back when the target host\'s engine is killed mid-copy: the sandbox wakes on its source at once; the partial copy goes once the target is back', async () => {
    const { code, output } = await interruptedMove('test-1', () => { killEngine(1); });
    assert.equal(code, 1, output);
    assert.match(output, /rolled back, the sandbox stays on test-2/);
    const [move] = (await t.service.store.hosts.moves()).map((m) => m.move);
    assert.deepEqual([move?.phase, move?.leftover], ['cleaning', 'test-1'], 'the leftover waits for its host');
    assert.equal(await placement(names.big), 'test-2');
    const res = await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum);
    await testHostsUp(2, t.config);
    await eventually(async () => {
      await t.service.lifecycle.reconcile();
      return (await t.service.store.hosts.moves()).length === 0;
    }, 'the partial copy removed by a reconcile pass', 60_000, 2000);
    assert.equal(await volumesOn(1, names.big), '');
  });

  it('rolls back when the source host\'s engine is killed mid-copy: unavailable while it is away, then as it was with its files', async () => {
    const { code, output } = await interruptedMove('test-1', () => { killEngine(2); });
    assert.equal(code, 1, output);
    assert.match(output, /rolled back, the sandbox stays on test-2/);
    // the target answers: its partial copy goes at once
    assert.deepEqual(await t.service.store.hosts.moves(), []);
    assert.equal(await volumesOn(1, names.big), '');
    assert.equal(await placement(names.big), 'test-2');
    assert.equal((await t.service.runtime.inspect(names.big)).status, 'unreachable');
    await testHostsUp(2, t.config);
    const res = await eventually(async () => {
      const r = await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token);
      return r.status === 200 ? r : null;
    }, 'the sandbox starts on its host again', 60_000, 1000);
    assert.equal(res.status, 200);
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum);
  });

  it('fences a mover paused past the take-over: a reconcile pass moves the sandbox, the paused one commits nothing when it resumes', async () => {
    const mover = background('hosts', 'move', names.big, '--to', 'test-1');
    await mover.when(new RegExp(`${names.big}: test-2 → test-1: .* checking the copy`));
    assert.equal(mover.child.exitCode, null, mover.output());
    mover.signal('SIGSTOP');
    try {
      const [paused] = (await t.service.store.hosts.moves()).map((m) => m.move);
      await new Promise((r) => setTimeout(r, MOVE_STALE_MS - (Date.now() - Date.parse(paused!.heartbeat_at)) + 500));
      await t.service.lifecycle.reconcile();
      await eventually(async () => (await t.service.store.hosts.moves())[0]?.move.owner !== paused!.owner, 'the move taken over');
    } finally {
      mover.signal('SIGCONT'); // while the new owner copies
    }
    assert.equal(await mover.closed, 1, mover.output());
    assert.match(mover.output(), /another process took the move over/);
    assert.doesNotMatch(mover.output(), /rolled back|is on test-1/);
    await eventually(async () => (await t.service.store.hosts.moves()).length === 0, 'the move finished by the new owner', 180_000, 1000);
    assert.equal(await placement(names.big), 'test-1');
    assert.deepEqual([await volumesOn(2, names.big), await containersOn(2, names.big)], ['', ''], 'nothing of it left on test-2');
    const res = await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.match((await t.service.lifecycle.status(names.big)).address ?? '', /^10\.217\./, 'running on test-1');
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum);
  });

  it('moves one sandbox with svc hosts move: progress lines, an audit row', async () => {
    const moved = await cli('hosts', 'move', names.asleep.replace(/^svc-/, ''), '--to', 'test-1');
    assert.equal(moved.code, 0, moved.stderr);
    assert.match(moved.stdout, new RegExp(`${names.asleep}: test-2 → test-1: .* checking the copy\n${names.asleep}: moved test-2 → test-1 \\(`));
    assert.match(moved.stdout, new RegExp(`${names.asleep} is on test-1; it wakes there at its next request$`, 'm'));
    assert.equal(await placement(names.asleep), 'test-1');
    const audit = await t.service.store.audit.query({ action: 'admin.sandbox_move' });
    assert.match(audit.rows.find((r) => r.target === names.asleep)?.detail ?? '', /^test-2 → test-1, \d+ bytes$/, 'its audit row');
    const res = await t.api('POST', `/api/sandboxes/${names.asleep}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(await exec(names.asleep, 'cat /root/work/file.txt'), `work-of-${names.asleep}`);
  });
});
