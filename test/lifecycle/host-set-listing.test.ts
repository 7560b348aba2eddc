import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import type { DockerRuntime } from '../../lifecycle/runtime/docker-runtime.ts';
import { HostSetRuntime } from '../../lifecycle/runtime/host-set-runtime.ts';
import { openTestStore, type TestStore } from '../store/helpers.ts';

/** What an engine lists: the only part of a runtime a listing asks (the engines themselves are test/hosts/'s). */
function listing(sandboxes: string[]): DockerRuntime {
  return {
    list: async () => sandboxes.map((name) => ({ name, running: true })),
    withVolumes: async () => sandboxes,
  } as unknown as DockerRuntime;
}

/** HostSetRuntime's listings over several hosts (lifecycle/runtime/host-set-runtime.ts), placements in a real store. */
describe('host set listings', () => {
  let t: TestStore;
  before(async () => { t = await openTestStore('sqlite'); });
  after(async () => { await t?.cleanup(); });

  it('take each sandbox from the host it is placed on (local: none), never from another host that lists it too', async () => {
    const created_at = new Date().toISOString();
    await t.store.hosts.put({ name: 'runner-a', address: '10.0.0.2', created_at });
    await t.store.hosts.put({ name: 'runner-b', address: '10.0.0.3', created_at });
    await t.store.hosts.place('svc-on-a', 'runner-a');
    await t.store.hosts.place('svc-on-b', 'runner-b');
    const engines: Record<string, DockerRuntime> = {
      'runner-a': listing(['svc-on-a', 'svc-on-b', 'svc-legacy']), // claims b's sandbox and a local one
      'runner-b': listing(['svc-on-b']),
    };
    const set = new HostSetRuntime({
      local: listing(['svc-legacy', 'svc-on-a']), // a container left here of a sandbox now on runner-a
      hosts: t.store.hosts,
      connect: (host) => engines[host.name]!,
      logger: pino({ level: 'silent' }),
    });
    const expected = ['svc-legacy', 'svc-on-a', 'svc-on-b'];
    assert.deepEqual((await set.list()).map((s) => s.name).sort(), expected);
    assert.deepEqual((await set.withVolumes()).sort(), expected);
  });
});
