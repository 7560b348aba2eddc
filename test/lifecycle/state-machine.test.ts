import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createUser, setDisabled } from '../../accounts/index.ts';
import { archiveFolder } from '../../lifecycle/archive.ts';
import { sandboxName } from '../../lifecycle/names.ts';
import { RuntimeUnreachable } from '../../lifecycle/runtime/sandbox-runtime.ts';
import { memoryLifecycle, type MemoryLifecycle } from '../helpers/memory-lifecycle.ts';

const HOUR = 3_600_000;

/**
 * The state machine of spec section 3 (lifecycle/controller.ts) against the in-memory runtime, on the
 * real Redis and store: each transition's calls to the runtime, sessions and timers. Beside the
 * real-engine tests (sandbox-lifecycle.test.ts, faults, three processes), never instead of them.
 */
describe('lifecycle state machine (in-memory runtime)', () => {
  let m: MemoryLifecycle;
  let n = 0;
  /** A new running sandbox of its own for each test. */
  const running = async (settings: { idle_timeout?: string; deep_sleep_after?: string } = {}) =>
    (await m.lifecycle.create(m.owner, { name: `sm${++n}`, idle_timeout: '1h', ...settings })).name;
  const jobs = async (kind: 'idle' | 'deep', name: string) =>
    (await m.queue.queue.getJobs(['delayed', 'waiting'])).filter((j) => j.id?.startsWith(`${kind}@${name}@`)).map((j) => Number(j.id!.split('@')[2]));

  before(async () => {
    m = await memoryLifecycle();
  });
  after(async () => {
    await m?.close();
  });

  it('creates: volumes and container made once, started once, an idle session with its timer', async () => {
    const name = await running();
    assert.deepEqual(m.runtime.calls.filter((c) => c.endsWith(` ${name}`) && !c.startsWith('exec')), [`create ${name}`, `start ${name}`]);
    assert.equal((await m.lifecycle.status(name)).status, 'running');
    const session = await m.sessions.get(name);
    assert.ok(session && session.expiresAt > Date.now() + HOUR - 60_000, 'a session of idle_timeout');
    assert.deepEqual(await jobs('idle', name), [session.timerAt], 'one idle-check timer at its expiry');
    assert.equal((await m.lifecycle.views.view(await m.lifecycle.record(name))).status, 'running');
  });

  it('wakes once for twenty concurrent starts (single flight), from asleep and from deep sleep', async () => {
    const name = await running();
    await m.lifecycle.sleep(name, 'test');
    let open!: () => void;
    m.runtime.gate = new Promise((resolve) => { open = resolve; });
    const wakes = Array.from({ length: 20 }, () => m.lifecycle.start(name));
    open();
    const states = await Promise.all(wakes);
    assert.ok(states.every((s) => s.status === 'running'));
    assert.equal(m.runtime.count('start', name), 2, 'the create and one wake');

    await m.lifecycle.sleep(name, 'test');
    await m.runtime.takeDown(name);
    await Promise.all(Array.from({ length: 20 }, () => m.lifecycle.start(name)));
    assert.equal(m.runtime.count('create', name), 2, 'one re-create from deep sleep');
    assert.equal(m.runtime.count('start', name), 3);
  });

  it('sleeps when its idle check finds the session run out, re-arms when it was renewed, and sets the deep-sleep timer', async () => {
    const name = await running({ deep_sleep_after: '2h' });
    const first = (await m.sessions.get(name))!;
    // renewed meanwhile: the timer moves to the new expiry and nothing stops
    await m.sessions.set(name, { expiresAt: first.timerAt + 60_000, timerAt: first.timerAt });
    await m.lifecycle.timers.onIdleCheck(name, first.timerAt);
    assert.equal((await m.lifecycle.status(name)).status, 'running');
    assert.ok((await jobs('idle', name)).includes(first.timerAt + 60_000), 'the timer re-armed at the new expiry');

    const due = Date.now() - 1_000;
    await m.sessions.set(name, { expiresAt: due, timerAt: due });
    await m.lifecycle.timers.onIdleCheck(name, due);
    const state = await m.lifecycle.status(name);
    assert.equal(state.status, 'exited');
    assert.equal(await m.sessions.get(name), null, 'the session is closed');
    assert.deepEqual(await jobs('deep', name), [Date.parse(state.finishedAt!) + 2 * HOUR], 'deep sleep at stop time + deep_sleep_after');
    // a timer that is not the session's (superseded) does nothing
    await m.lifecycle.start(name);
    await m.lifecycle.timers.onIdleCheck(name, due);
    assert.equal((await m.lifecycle.status(name)).status, 'running');
  });

  it('goes into deep sleep when its timer is due (volumes kept), and not before', async () => {
    const name = await running({ deep_sleep_after: '1h' });
    m.runtime.stopOutside(name, new Date(Date.now() - 30 * 60_000));
    await m.lifecycle.timers.onDeepSleep(name, Date.now());
    assert.equal((await m.lifecycle.status(name)).status, 'exited', 'not due for another 30 minutes');
    assert.equal(m.runtime.count('takeDown', name), 0);

    const other = await running({ deep_sleep_after: '1h' });
    const stopped = new Date(Date.now() - 2 * HOUR);
    m.runtime.stopOutside(other, stopped);
    await m.lifecycle.timers.onDeepSleep(other, stopped.getTime() + HOUR);
    assert.equal((await m.lifecycle.status(other)).status, 'deep_sleep');
    assert.ok(m.runtime.hasVolumes(other), 'volumes kept');
    assert.equal((await m.lifecycle.views.view(await m.lifecycle.record(other))).status, 'deep_sleep');
  });

  it('reconciles a sandbox started behind its back (a session opens) and one stopped behind its back (session closed, timer set)', async () => {
    const name = await running({ deep_sleep_after: '3h' });
    await m.lifecycle.sleep(name, 'test');
    m.runtime.startOutside(name);
    await m.lifecycle.reconcile();
    assert.ok(await m.sessions.get(name), 'started outside: a session');

    const stopped = new Date();
    m.runtime.stopOutside(name, stopped);
    await m.lifecycle.reconcile();
    assert.equal(await m.sessions.get(name), null, 'stopped outside: no session');
    assert.ok((await jobs('deep', name)).includes(stopped.getTime() + 3 * HOUR), 'its deep-sleep timer');

    // stopped outside long ago: reconcile runs the overdue deep sleep itself
    const old = await running({ deep_sleep_after: '1h' });
    m.runtime.stopOutside(old, new Date(Date.now() - 2 * HOUR));
    await m.lifecycle.reconcile();
    assert.equal((await m.lifecycle.status(old)).status, 'deep_sleep');
  });

  it('never takes an engine that cannot be asked for deep sleep: reads say unavailable, actions 503, nothing re-created, no timers touched', async () => {
    const name = await running({ deep_sleep_after: '1h' });
    const asleep = await running({ deep_sleep_after: '1h' });
    m.runtime.stopOutside(asleep, new Date(Date.now() - 2 * HOUR));
    // its idle time is up: the idle check must stop it, and cannot
    const due = Date.now() - 1_000;
    await m.sessions.set(name, { expiresAt: due, timerAt: due });
    const session = await m.sessions.get(name);
    const record = await m.store.sandboxes.get(name);
    const calls = m.runtime.calls.length;
    const timers = [await jobs('idle', name), await jobs('deep', name), await jobs('deep', asleep)];
    m.runtime.unreachable = 'connect ECONNREFUSED 10.0.0.9:2376';
    try {
      const unreachable = (err: unknown) => err instanceof RuntimeUnreachable && err.statusCode === 503 && err.code === 'SVC_BUSY' && err.retryAfter === 5
        && /^the sandbox is unavailable: .* does not answer;/.test(err.message)
        && !err.message.includes('10.0.0.9') && err.reason === 'connect ECONNREFUSED 10.0.0.9:2376'; // the host's address only in the log
      await assert.rejects(m.lifecycle.status(name), unreachable);
      // reads answer: the sandbox is there, its state unknown
      for (const sandbox of [name, asleep]) {
        const view = await m.lifecycle.views.view(await m.lifecycle.record(sandbox));
        assert.equal(view.status, 'unavailable');
        assert.equal(view.stops_at, null);
        assert.equal(view.deep_sleep_at, null);
        assert.match(view.hint ?? '', /does not answer/);
        assert.deepEqual((await m.lifecycle.observe(sandbox)).status, 'unavailable');
      }
      assert.deepEqual((await m.lifecycle.views.list([(await m.store.sandboxes.get(name))!, (await m.store.sandboxes.get(asleep))!])).map((s) => s.status), ['unavailable', 'unavailable']);
      await assert.rejects(m.lifecycle.updateSettings(name, { idle_timeout: '5m' }), unreachable);
      assert.deepEqual(await m.store.sandboxes.get(name), record, 'a refused PATCH changed nothing');
      await assert.rejects(m.lifecycle.start(name), unreachable);
      await assert.rejects(m.lifecycle.start(asleep), unreachable);
      await assert.rejects(m.lifecycle.keepAwake(name), unreachable);
      await assert.rejects(m.lifecycle.timers.onDeepSleep(asleep, Date.now()), unreachable);
      await assert.rejects(m.lifecycle.reconcile(), unreachable);
      await assert.rejects(m.lifecycle.timers.onIdleCheck(name, due), unreachable);
      assert.deepEqual(m.runtime.calls.slice(calls), [], 'no create, start, stop or take-down');
      assert.deepEqual(await m.sessions.get(name), session, 'the session is untouched (the sleep is tried again by the timer\'s retry or reconcile)');
      assert.deepEqual([await jobs('idle', name), await jobs('deep', name), await jobs('deep', asleep)], timers, 'no timer armed or moved');
    } finally {
      m.runtime.unreachable = undefined;
    }
    assert.equal((await m.lifecycle.views.view(await m.lifecycle.record(name))).status, 'running', 'a read right after shows it again: nothing kept it unavailable');
    assert.equal((await m.lifecycle.status(name)).status, 'running', 'back as it was');
    assert.equal((await m.lifecycle.status(asleep)).status, 'exited', 'still asleep, not re-created');
  });

  it('lists a sandbox whose engine is away as unavailable beside the others, which keep their status', async () => {
    for (const { name, running: on } of await m.runtime.list()) if (on) await m.lifecycle.sleep(name, 'room under the running quota');
    const away = await running();
    const near = await running();
    const asleep = await running();
    await m.lifecycle.sleep(asleep, 'test');
    const records = await Promise.all([away, near, asleep].map(async (name) => (await m.store.sandboxes.get(name))!));
    m.runtime.unreachableSandboxes.set(away, 'connect ECONNREFUSED 10.0.0.9:2376');
    try {
      assert.deepEqual((await m.lifecycle.views.list(records)).map((s) => [s.name, s.status]), [[away, 'unavailable'], [near, 'running'], [asleep, 'exited']]);
      await m.lifecycle.reconcile(); // the others' pass goes on
      assert.equal(m.runtime.count('create', away), 1, 'never re-created');
    } finally {
      m.runtime.unreachableSandboxes.delete(away);
    }
    assert.equal((await m.lifecycle.views.view(await m.lifecycle.record(away))).status, 'running', 'back in its state');
  });

  it('archives into the archive folder (SVC_ARCHIVE_DIR): the folders and the configuration, then nothing is left', async () => {
    const name = await running();
    const { archive } = await m.lifecycle.archive(name);
    assert.match(archive, new RegExp(`^archive/${name}-`));
    const folder = archiveFolder(m.config.archiveDir, archive);
    assert.ok(folder.startsWith(m.config.archiveDir + path.sep) && !folder.startsWith(m.config.dataDir), `in the archive folder: ${folder}`);
    assert.ok(fs.existsSync(path.join(folder, 'root.tar.gz')));
    const configuration = JSON.parse(fs.readFileSync(path.join(folder, 'sandbox.json'), 'utf8'));
    assert.equal(configuration.name, name);
    assert.equal(configuration.certs, undefined, 'no engine keys in the archive');
    assert.equal((await m.lifecycle.status(name)).status, 'deep_sleep');
    assert.ok(!m.runtime.hasVolumes(name));
    await assert.rejects(m.lifecycle.start(name), { code: 'SVC_SANDBOX_ARCHIVED' });
  });

  it('finishes an archive its process did not (killed after the record said "archived")', async () => {
    const name = await running();
    const record = (await m.store.sandboxes.get(name))!;
    await m.store.sandboxes.put({ ...record, archived_at: new Date().toISOString(), archive_path: `archive/${name}-killed` });
    await m.lifecycle.reconcile();
    assert.ok(fs.existsSync(path.join(m.config.archiveDir, `${name}-killed`, 'sandbox.json')));
    assert.ok(!m.runtime.hasVolumes(name));
    assert.ok(!(await m.runtime.list()).some((c) => c.name === name));
  });

  it('writes SSH keys to every running sandbox it can reach; one whose engine is away is marked and reconcile writes it', async () => {
    for (const { name, running: on } of await m.runtime.list()) if (on) await m.lifecycle.sleep(name, 'room under the running quota');
    const away = await running();
    const near = await running();
    const writes = (name: string) => m.runtime.count('exec', name);
    const [awayBefore, nearBefore] = [writes(away), writes(near)];
    m.runtime.unreachableSandboxes.set(away, 'connect ECONNREFUSED 10.0.0.9:2376');
    try {
      await m.lifecycle.sshKeys.syncOwner(m.owner.id); // the store change happened: no 503
      assert.equal(writes(near), nearBefore + 1, 'the reachable sandbox got the new keys at once');
      assert.equal(writes(away), awayBefore, 'the engine that is away was not written');
    } finally {
      m.runtime.unreachableSandboxes.delete(away);
    }
    await m.lifecycle.reconcile();
    assert.equal(writes(away), awayBefore + 1, 'reconcile wrote the marked sandbox');
    await m.lifecycle.reconcile();
    assert.equal(writes(away), awayBefore + 1, 'the mark is cleared: written once');
  });

  it('DELETE with the engine away: 503 and the record unchanged; lost after the record is written: the archive answer, reconcile finishes it', async () => {
    for (const { name, running: on } of await m.runtime.list()) if (on) await m.lifecycle.sleep(name, 'room under the running quota');
    const name = await running();
    m.runtime.unreachable = 'connect ECONNREFUSED 10.0.0.9:2376';
    try {
      await assert.rejects(m.lifecycle.archive(name), RuntimeUnreachable);
    } finally {
      m.runtime.unreachable = undefined;
    }
    assert.equal((await m.store.sandboxes.get(name))!.archived_at, undefined, 'not archived: the retry can DELETE');

    m.runtime.unreachableCalls.set(`stop ${name}`, 'connect ECONNREFUSED 10.0.0.9:2376');
    let archive: string;
    try {
      ({ archive } = await m.lifecycle.archive(name));
    } finally {
      m.runtime.unreachableCalls.clear();
    }
    assert.ok((await m.store.sandboxes.get(name))!.archived_at, 'archived');
    assert.ok(m.runtime.hasVolumes(name), 'the engine\'s part is left');
    await m.lifecycle.reconcile();
    assert.ok(fs.existsSync(path.join(archiveFolder(m.config.archiveDir, archive), 'sandbox.json')), 'reconcile wrote the archive');
    assert.ok(!m.runtime.hasVolumes(name));
  });

  it('enabling engine access with the engine lost mid-way saves no certs (the retry works, no 409)', async () => {
    for (const { name, running: on } of await m.runtime.list()) if (on) await m.lifecycle.sleep(name, 'room under the running quota');
    const name = await running();
    const { certs: _certs, ...withoutCerts } = (await m.store.sandboxes.get(name))!;
    await m.store.sandboxes.put(withoutCerts);
    await m.lifecycle.sleep(name, 'test');
    m.runtime.unreachableCalls.set(`create ${name}`, 'connect ECONNREFUSED 10.0.0.9:2376');
    try {
      await assert.rejects(m.lifecycle.enableEngineAccess(name), RuntimeUnreachable);
    } finally {
      m.runtime.unreachableCalls.clear();
    }
    assert.equal((await m.store.sandboxes.get(name))!.certs, undefined, 'no certs saved for a container made without them');
    await m.lifecycle.enableEngineAccess(name);
    assert.ok((await m.store.sandboxes.get(name))!.certs, 'the retry enables it');
  });

  it('a create whose engine is lost is a 503 (not 502), and what the engine kept is taken away by reconcile', async () => {
    for (const { name, running: on } of await m.runtime.list()) if (on) await m.lifecycle.sleep(name, 'room under the running quota');
    const name = sandboxName(`sm${++n}`);
    for (const call of ['start', 'takeDown', 'removeVolumes'] as const) m.runtime.unreachableCalls.set(`${call} ${name}`, 'connect ECONNREFUSED 10.0.0.9:2376');
    try {
      await assert.rejects(m.lifecycle.create(m.owner, { name }), (err: unknown) => err instanceof RuntimeUnreachable && err.statusCode === 503);
    } finally {
      m.runtime.unreachableCalls.clear();
    }
    assert.ok((await m.store.sandboxes.get(name))!.archived_at, 'the record is archived: the name is reserved until its leftovers are gone');
    assert.ok(m.runtime.hasVolumes(name), 'the engine kept its part');
    await m.lifecycle.reconcile();
    assert.ok(!m.runtime.hasVolumes(name) && !(await m.runtime.list()).some((c) => c.name === name), 'reconcile took it away');
  });

  it('keeps the admission\'s count of what runs: counted as it runs, not once it sleeps; a reconcile pass sets it to what runs', async () => {
    const runs = async () => (await m.admission.usage(m.owner)).running;
    const before = await runs();
    const name = await running();
    assert.equal(await runs(), before + 1, 'counted once it runs');
    await m.lifecycle.sleep(name, 'test');
    assert.equal(await runs(), before, 'not counted once asleep');
    await m.lifecycle.start(name);
    assert.equal(await runs(), before + 1);
    m.runtime.stopOutside(name); // it stopped by itself: the count learns it at the next pass
    assert.equal(await runs(), before + 1);
    await m.lifecycle.reconcile();
    assert.equal(await runs(), before);
    m.runtime.startOutside(name);
    await m.lifecycle.reconcile();
    assert.equal(await runs(), before + 1, 'started outside the service: counted by the pass');
  });

  it('a reconcile pass puts a disabled owner\'s running sandboxes to sleep (a disabling whose news was missed)', async () => {
    const { user } = await createUser(m.store, { name: `disabled-${m.config.redisPrefix}` });
    const name = (await m.lifecycle.create(user, { name: `sm${++n}`, idle_timeout: 'off' })).name;
    const other = await running();
    await setDisabled(m.store, user.name, true);
    await m.lifecycle.reconcile();
    assert.equal((await m.lifecycle.status(name)).status, 'exited');
    assert.equal((await m.lifecycle.status(other)).status, 'running', 'another owner\'s sandbox is left alone');
    await assert.rejects(m.lifecycle.start(name), /disabled/);
  });

  it('refuses an archive path that is absolute or leaves the archive folder (a restored record may carry one)', () => {
    for (const bad of ['/etc/cron.d', 'archive/../../etc', '../outside', 'archive', 'archive/..', 'other/../../x']) {
      assert.throws(() => archiveFolder(m.config.archiveDir, bad), /not inside the archive folder/, bad);
    }
    assert.equal(archiveFolder(m.config.archiveDir, 'archive/x-2026'), path.join(m.config.archiveDir, 'x-2026'));
    assert.equal(archiveFolder(m.config.archiveDir, 'archive/..x'), path.join(m.config.archiveDir, '..x'), 'a folder named with dots is inside');
  });
});
