import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { testHostsDown, testHostsUp } from '../../harness/test-hosts.ts';
import { ageMove, containersOn, hostDocker, moveTools, volumesOn } from '../helpers/moving.ts';
import { svcCli, svcCliBackground } from '../helpers/svc-cli.ts';

const run = promisify(execFile);

/** Kills test host i's engine as a crash of that machine would (its dockerd, SIGKILL); testHostsUp starts it again. */
const killEngine = (i: number) => process.kill(Number(fs.readFileSync(`/run/svc-host-${i}.pid`, 'utf8')), 'SIGKILL');

/**
 * `svc hosts move` on two runner hosts on this machine (scripts/test-hosts.sh), of a sandbox with 200 MB
 * moved back and forth: bad input and a target without room change nothing; a deadline passed, a copy
 * that differs in an extended attribute, either host's engine killed mid-copy all roll back with nothing
 * lost; a mover paused past the take-over commits nothing; evacuate goes on past a failed move. (Apart
 * from move.test.ts: a test file has 10 minutes.)
 */
describe('moving one sandbox, interrupted (svc hosts move)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  const names = { big: '', small: '' };
  let bigSum = '';
  let dir = '';

  const { exec, placement, cli } = moveTools(() => t);
  /** `svc hosts move` of the big one, stopped at its first copied bytes by `interrupt`; answers its exit code and output. */
  const interruptedMove = async (to: string, interrupt: () => Promise<void> | void) => {
    const mover = svcCliBackground(t.config, 'hosts', 'move', names.big, '--to', to);
    await mover.when(new RegExp(`${names.big}: test-\\d → ${to}: copied`));
    assert.equal(mover.child.exitCode, null, `the move was under way: ${mover.output()}`);
    await interrupt();
    return { code: await mover.closed, output: mover.output() };
  };

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    await testHostsUp(2, t.config);
    assert.equal((await cli('hosts', 'drain', 'local')).code, 0);
    alice = await t.user('alice');
    Object.assign(names, { big: `svc-z-${t.config.redisPrefix}`, small: `svc-s-${t.config.redisPrefix}` });
    for (const name of Object.values(names)) {
      await t.service.store.hosts.place(name, 'test-2');
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
    }
    await exec(names.small, 'mkdir -p /root/work && echo work-of-small > /root/work/file.txt');
    // 200 MB that no compression shortens: long enough a copy to be interrupted in
    await exec(names.big, 'head -c 200000000 /dev/urandom > /root/big');
    bigSum = await exec(names.big, 'sha256sum /root/big');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-move-interrupted-'));
  });
  after(async () => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
    await testHostsDown();
  });

  it('svc hosts move refuses bad input and changes nothing: unknown sandbox or host, the same host, a drained or silent target, too little space', async () => {
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
    const mover = svcCliBackground(t.config, 'hosts', 'move', names.big, '--to', 'test-1');
    await mover.when(new RegExp(`${names.big}: test-2 → test-1: .* checking the copy`));
    assert.equal(mover.child.exitCode, null, mover.output());
    mover.signal('SIGSTOP');
    try {
      // another move to the same host counts this copy's whole size as taken: the small one's need
      // and the host's free space first (refused: it would keep all it has), then a reserve it would
      // fit within on its own, but not beside the copy under way
      const tooFull = await svcCli({ ...t.config, env: { SVC_MOVE_FREE_RESERVE_MB: '100000000' } }, 'hosts', 'move', names.small, '--to', 'test-1');
      const [, needs, free] = /takes (\d+) MB on "test-2", and host "test-1" has (\d+) MB free/.exec(tooFull.stderr) ?? [];
      assert.ok(needs && free, tooFull.stderr);
      const reserve = Number(free) - Number(needs) - 100;
      const beside = await svcCli({ ...t.config, env: { SVC_MOVE_FREE_RESERVE_MB: String(reserve) } }, 'hosts', 'move', names.small, '--to', 'test-1');
      assert.equal(beside.code, 1, beside.stdout);
      assert.match(beside.stderr, new RegExp(`has \\d+ MB free on its engine's data root, (\\d+) MB of it taken by 1 move under way there \\(${names.big}\\) \\(it keeps ${reserve} MB free`));
      assert.ok(Number(/(\d+) MB of it taken/.exec(beside.stderr)![1]) >= 200, 'the whole size of the big one');
      assert.equal(await placement(names.small), 'test-2');
      // not renewed for MOVE_STALE_MS: its heartbeat written back that far (the mover is stopped)
      const paused = await ageMove(t, names.big);
      await t.service.lifecycle.reconcile();
      await eventually(async () => (await t.service.store.hosts.moves())[0]?.move.owner !== paused.owner, 'the move taken over');
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
    const moved = await cli('hosts', 'move', names.small.replace(/^svc-/, ''), '--to', 'test-1');
    assert.equal(moved.code, 0, moved.stderr);
    assert.match(moved.stdout, new RegExp(`${names.small}: test-2 → test-1: .* checking the copy\n${names.small}: moved test-2 → test-1 \\(`));
    assert.match(moved.stdout, new RegExp(`${names.small} is on test-1; it wakes there at its next request$`, 'm'));
    assert.equal(await placement(names.small), 'test-1');
    const audit = await t.service.store.audit.query({ action: 'admin.sandbox_move' });
    assert.match(audit.rows.find((r) => r.target === names.small)?.detail ?? '', /^test-2 → test-1, \d+ bytes$/, 'its audit row');
    const res = await t.api('POST', `/api/sandboxes/${names.small}/start`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    assert.equal(await exec(names.small, 'cat /root/work/file.txt'), `work-of-small`);
  });

  it('evacuate goes on after a move that missed its deadline: each one tried and named, both left whole where they were', async () => {
    // sorted by name: the small one first, then the big one; with 100 MB more the small one's move cannot
    // end within 1 s either (its 0.2 MB alone moved in 1.0 s once)
    await exec(names.small, 'head -c 100000000 /dev/urandom > /root/filler');
    assert.equal((await cli('hosts', 'drain', 'test-1')).code, 0);
    const evacuated = await cli('hosts', 'evacuate', 'test-1', '--deadline', '1s');
    assert.equal(evacuated.code, 1, evacuated.stdout);
    const rolledBack = (name: string) => new RegExp(`^${name}: move test-1 → test-2 rolled back, the sandbox stays on test-1: the move did not finish within its deadline of 1 s \\(svc hosts move --deadline, SVC_MOVE_DEADLINE\\)$`, 'm');
    assert.match(evacuated.stdout, rolledBack(names.small));
    assert.match(evacuated.stdout, rolledBack(names.big));
    assert.ok(evacuated.stdout.search(rolledBack(names.small)) < evacuated.stdout.search(rolledBack(names.big)), 'the big one tried after the small one failed');
    assert.match(evacuated.stdout, new RegExp(`^test-1: 0 sandbox\\(es\\) moved, 2 not \\(${names.small}, ${names.big}, above\\)`, 'm'));
    await eventually(async () => (await t.service.store.hosts.moves()).length === 0, 'the partial copies removed');
    assert.deepEqual([await placement(names.small), await placement(names.big)], ['test-1', 'test-1']);
    assert.deepEqual([await volumesOn(2, names.small), await volumesOn(2, names.big)], ['', '']);
    assert.equal((await cli('hosts', 'undrain', 'test-1')).code, 0);
    assert.equal((await t.api('POST', `/api/sandboxes/${names.big}/start`, alice.token)).status, 200);
    assert.equal(await exec(names.big, 'sha256sum /root/big'), bigSum);
  });
});
