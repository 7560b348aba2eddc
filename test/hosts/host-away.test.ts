import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { EngineProxy } from '../../harness/engine-proxy.ts';
import { SANDBOX_DOCKER_HOST, sandboxDocker } from '../../harness/sandbox-engine.ts';
import { TEST_SECRET_KEY_FILE } from '../../harness/secret-key.ts';
import { eventually, removeInstance } from '../../harness/service.ts';
import { DockerRuntime, type EngineCapacity } from '../../lifecycle/runtime/docker-runtime.ts';
import { engineClient } from '../../lifecycle/runtime/engine-client.ts';
import { HostSetRuntime } from '../../lifecycle/runtime/host-set-runtime.ts';
import { resourceNames } from '../../lifecycle/names.ts';
import { RuntimeUnreachable } from '../../lifecycle/runtime/sandbox-runtime.ts';
import { runtimeOptions } from '../../lifecycle/runtime/open-docker-runtime.ts';
import { destroyStore, LOCAL_HOST, openStore, type Store } from '../../store/index.ts';

/** Milliseconds a call takes, with its answer. */
async function timed<T>(call: () => Promise<T>): Promise<[number, T]> {
  const began = performance.now();
  const answer = await call();
  return [performance.now() - began, answer];
}

/**
 * HostSetRuntime with a host that falls silent: this machine's sandbox engine as `local`, and as a
 * second host ("quiet") the same engine behind an EngineProxy the test holds silent and restores.
 * Sandbox containers are made (not started): enough for inspect, list and the events that keep reads.
 */
describe('HostSetRuntime: a silent host costs one ask, not every read; reads kept by the engine\'s events', () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-`));
  const config = { ...loadConfig({ SVC_DATA_DIR: dataDir }), secretKeyFile: TEST_SECRET_KEY_FILE, redisPrefix: instance };
  /** What the runtime logs, kept: the test waits for the line that says a host is away. */
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
  const nearby = `svc-${instance}-near`;
  const far = `svc-${instance}-far`;
  let store: Store;
  let proxy: EngineProxy;
  let local: DockerRuntime;
  let hosts: HostSetRuntime;
  let unwatch: () => void;

  before(async () => {
    store = await openStore(`sqlite://${path.join(dataDir, 'svc.sqlite')}`, { secretKeyFile: config.secretKeyFile });
    proxy = await EngineProxy.start(path.join(dataDir, 'quiet.sock'), SANDBOX_DOCKER_HOST);
    local = new DockerRuntime(sandboxDocker(), runtimeOptions(config, logger));
    await store.hosts.put({ name: 'quiet', address: '127.0.0.1', pool: config.sandboxAddressPool, created_at: new Date().toISOString() });
    hosts = new HostSetRuntime({
      local, hosts: store.hosts, logger, localPool: config.sandboxAddressPool,
      connect: () => new DockerRuntime(engineClient(proxy.url), { ...runtimeOptions(config, logger), hostDuties: false }),
    });
    unwatch = hosts.watchStarts();
    await store.hosts.place(far, 'quiet');
    await hosts.create({ name: nearby, env: {} });
    await hosts.create({ name: far, env: {} });
  });

  after(async () => {
    unwatch?.();
    await proxy?.cut();
    await removeInstance(instance);
    await destroyStore(store);
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('this machine\'s engine cuts its pool in /28s: 4096 sandbox networks (scripts/sandbox-engine.sh)', async () => {
    assert.equal((await local.figures()).networks, 4096);
  });

  it('keeps reads from the engine\'s events: its own changes and an outside removal are seen at once', async () => {
    assert.equal((await hosts.read(nearby)).status, 'exited');
    assert.equal((await hosts.read(nearby)).status, 'exited', 'the second read, from what was kept');
    await sandboxDocker().getContainer(resourceNames(nearby).container).remove({ force: true });
    await eventually(async () => (await hosts.read(nearby)).status === 'deep_sleep', 'the removal seen by reads', 2000, 20);
    await hosts.create({ name: nearby, env: {} });
    assert.equal((await hosts.read(nearby)).status, 'exited', 'made again: the runtime\'s own change');
    await hosts.takeDown(nearby);
    assert.equal((await hosts.read(nearby)).status, 'deep_sleep', 'taken down: at once');
    await hosts.create({ name: nearby, env: {} });
  });

  it('a silent host is found by the watch\'s probe; then its reads answer unreachable at once and the other host\'s are unaffected', async () => {
    assert.deepEqual((await hosts.list()).map((s) => s.name).sort(), [far, nearby].sort());
    const seen = lines.length;
    await proxy.hang();
    // no ask of it now: the probe every 5 s (5 s for its answer: a loaded engine is slow, not away) finds it
    await eventually(async () => lines.slice(seen).some((l) => l.includes('"host":"quiet"') && l.includes('host does not answer')), 'the watch\'s probe finding the host away', 30_000, 100);
    const [farMs, farState] = await timed(() => hosts.inspect(far));
    assert.equal(farState.status, 'unreachable');
    assert.ok(farMs < 200, `an away host's sandbox answers at once (${farMs.toFixed(0)} ms)`);
    for (let i = 0; i < 5; i++) {
      const [listMs, listed] = await timed(() => hosts.list());
      assert.deepEqual(listed.map((s) => s.name), [nearby], 'the silent host\'s sandbox left out');
      assert.ok(listMs < 1000, `list while a host is silent: ${listMs.toFixed(0)} ms`);
      const [nearMs, near] = await timed(() => hosts.read(nearby));
      assert.equal(near.status, 'exited');
      assert.ok(nearMs < 1000, `the other host's sandbox: ${nearMs.toFixed(0)} ms`);
      assert.equal((await timed(() => hosts.read(far)))[1].status, 'unreachable');
    }
    const [startMs] = await timed(() => assert.rejects(hosts.start(far), (err) => err instanceof RuntimeUnreachable));
    assert.ok(startMs < 200, `a call on it: unreachable at once (${startMs.toFixed(0)} ms)`);
  });

  it('a host that answers again is seen within seconds', async () => {
    await proxy.restore();
    const began = Date.now();
    await eventually(async () => (await hosts.inspect(far)).status === 'exited', 'the host back', 5000, 100);
    assert.ok(Date.now() - began < 4000, `seen ${Date.now() - began} ms after it answers`);
    assert.deepEqual((await hosts.list()).map((s) => s.name).sort(), [far, nearby].sort());
  });

  it('a host whose first ask fails is away at once, without waiting for the watch\'s probe', async () => {
    await proxy.hang();
    const [firstMs, first] = await timed(() => hosts.inspect(far));
    assert.equal(first.status, 'unreachable', `the ask that finds it silent (${firstMs.toFixed(0)} ms)`);
    const [nextMs, next] = await timed(() => hosts.inspect(far));
    assert.equal(next.status, 'unreachable');
    assert.ok(nextMs < 200, `the next one: ${nextMs.toFixed(0)} ms`);
    await proxy.restore();
    await eventually(async () => (await hosts.inspect(far)).status === 'exited', 'the host back', 5000, 100);
  });
});

/**
 * A host slow to answer a heavy call (a capacity count over hundreds of containers on a loaded engine
 * passes its 3-s deadline) but answering its ping is slow, not away: its sandboxes stay readable.
 */
describe('HostSetRuntime: a slow host is not an away host', () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-`));
  const config = { ...loadConfig({ SVC_DATA_DIR: dataDir }), secretKeyFile: TEST_SECRET_KEY_FILE, redisPrefix: instance };
  const logger = pino({ level: 'silent' });
  const sandbox = `svc-${instance}-slow`;
  let store: Store | undefined;

  /** The real engine, but every capacity count misses its deadline, as on an engine under load. */
  class SlowCounts extends DockerRuntime {
    override async figures(): Promise<EngineCapacity> {
      await new Promise((r) => setTimeout(r, 100));
      throw new RuntimeUnreachable('no answer in time');
    }
  }

  after(async () => {
    await removeInstance(instance);
    if (store) await destroyStore(store);
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('a capacity count past its deadline leaves the host out of that count only; its sandboxes still read their state', async () => {
    store = await openStore(`sqlite://${path.join(dataDir, 'svc.sqlite')}`, { secretKeyFile: config.secretKeyFile });
    await store.hosts.put({ name: 'slow', address: '127.0.0.1', pool: config.sandboxAddressPool, created_at: new Date().toISOString() });
    const hosts = new HostSetRuntime({
      local: new DockerRuntime(sandboxDocker(), runtimeOptions(config, logger)), hosts: store.hosts, logger, localPool: config.sandboxAddressPool,
      connect: () => new SlowCounts(sandboxDocker(), { ...runtimeOptions(config, logger), hostDuties: false }),
    });
    await store.hosts.place(sandbox, 'slow');
    await hosts.create({ name: sandbox, env: {} });
    const loads = await hosts.hosts.readings();
    assert.match(loads.find((l) => l.name === 'slow')?.error ?? '', /no answer in time/);
    assert.equal((await hosts.inspect(sandbox)).status, 'exited', 'the host answered its ping: not away');
    assert.equal((await hosts.inspect(sandbox)).status, 'exited');
  });

  it('a sandbox another process moved is found on its new host once its old host is gone, without a restart', async () => {
    const local = new DockerRuntime(sandboxDocker(), runtimeOptions(config, logger));
    const hosts = new HostSetRuntime({
      local, hosts: store!.hosts, logger, localPool: config.sandboxAddressPool,
      connect: (record) => new DockerRuntime(engineClient(`tcp://${record.address}:${record.port}`), { ...runtimeOptions(config, logger), hostDuties: false }),
    });
    const moved = `svc-${instance}-moved`;
    await store!.hosts.put({ name: 'old', address: '127.0.0.1', port: 9, pool: config.sandboxAddressPool, created_at: new Date().toISOString() });
    await store!.hosts.place(moved, 'old');
    assert.equal((await hosts.inspect(moved)).status, 'unreachable', 'on its old host, which refuses');
    // what svc hosts evacuate does in its own process: the copy on this machine, the placement switched, the old host removed
    await local.create({ name: moved, env: {} });
    await store!.hosts.replace(moved, LOCAL_HOST);
    await store!.hosts.put({ ...(await store!.hosts.get('old'))!, drained_at: new Date().toISOString() });
    await store!.hosts.remove('old');
    assert.equal((await hosts.inspect(moved)).status, 'exited', 'read on its new host');
    await hosts.takeDown(moved); // an action, too, goes to the new host
    assert.equal((await hosts.inspect(moved)).status, 'deep_sleep');
  });
});
