import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { DockerRuntime } from '../../lifecycle/runtime/docker-runtime.ts';
import { engineClient } from '../../lifecycle/runtime/engine-client.ts';
import { choosePlacement, inPool, placementScore } from '../../lifecycle/runtime/host-placement.ts';
import { openHostSet, runtimeOptions } from '../../lifecycle/runtime/open-docker-runtime.ts';
import { destroyStore, openStore, LOCAL_HOST, type Store } from '../../store/index.ts';
import { removeInstance } from '../../harness/service.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { TEST_SECRET_KEY_FILE } from '../../harness/secret-key.ts';
import { testHostsDown, testHostsUp } from '../../harness/test-hosts.ts';
import { runtimeContract } from '../runtime/runtime-contract.ts';

const GB = 2 ** 30;
const load = (name: string, over: Partial<Parameters<typeof placementScore>[0]> = {}) => ({
  name, memoryBytes: 16 * GB, cpus: 8, sandboxes: 0, running: 0, networks: 256, committedMemoryBytes: 0, committedCpus: 0, ...over,
});

describe('placement score (lifecycle/runtime/host-set-runtime.ts)', () => {
  it('takes the host with the most room by its scarcest resource, then the fewest sandboxes, then the name', () => {
    assert.equal(choosePlacement([load('a', { committedMemoryBytes: 8 * GB }), load('b', { committedCpus: 2 })]), 'b', 'a: half its memory taken; b: a quarter of its CPU');
    assert.equal(choosePlacement([load('a', { sandboxes: 3 }), load('b', { sandboxes: 2 })]), 'b');
    assert.equal(choosePlacement([load('b'), load('a')]), 'a');
    assert.equal(choosePlacement([load('big', { memoryBytes: 64 * GB, committedMemoryBytes: 16 * GB }), load('small', { committedMemoryBytes: 8 * GB })]), 'big', 'shares, not bytes');
  });

  it('never places on a host whose address pool has no network left; overcommitted hosts still rank', () => {
    assert.equal(placementScore(load('full', { sandboxes: 256 })), -Infinity);
    assert.equal(choosePlacement([load('full', { sandboxes: 256 }), load('finer', { sandboxes: 256, networks: 4096 })]), 'finer', 'a pool cut in /28s holds more');
    assert.equal(choosePlacement([load('full', { sandboxes: 256 })]), undefined);
    assert.equal(choosePlacement([load('a', { committedCpus: 24 }), load('b', { committedCpus: 16 })]), 'b', 'both past their cores');
  });
});

describe('engine-reported addresses (HostSetRuntime: only inside the host\'s pool)', () => {
  it('takes an address inside the pool; refuses loopback, another pool, malformed pools and non-addresses', () => {
    assert.equal(inPool('10.217.3.18', '10.217.0.0/16'), true);
    assert.equal(inPool('127.0.0.1', '10.217.0.0/16'), false);
    assert.equal(inPool('10.218.0.2', '10.217.0.0/16'), false, 'another host\'s sandbox');
    assert.equal(inPool('10.217.0.2', '10.217.0.0'), false);
    assert.equal(inPool('10.217.0.2', 'nonsense/16'), false);
    assert.equal(inPool('10.217.0.2.example', '10.217.0.0/16'), false);
  });
});

/**
 * The contract of lifecycle/runtime/sandbox-runtime.ts against HostSetRuntime with this machine's engine
 * drained and one test host (scripts/test-hosts.sh): the sandbox is placed on test-1 and every call goes
 * to that host's engine over mutual TLS. Its "unreachable" twin has the sandbox placed on a host whose
 * engine refuses connections, and this machine's engine gone.
 */
runtimeContract('HostSetRuntime (a test host)', { runsCommands: true }, async () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-`));
  const config = { ...loadConfig({ SVC_DATA_DIR: dataDir }), secretKeyFile: TEST_SECRET_KEY_FILE, redisPrefix: instance, storeTable: `${instance}_store` };
  const logger = pino({ level: 'silent' });
  const store: Store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
  await testHostsUp(1, config);
  await store.hosts.put({ name: LOCAL_HOST, drained_at: new Date().toISOString(), created_at: new Date().toISOString() });
  const transferRoot = path.join(dataDir, 'transfer');
  const local = new DockerRuntime(sandboxDocker(), { ...runtimeOptions(config, logger), transferRoot });
  const runtime = openHostSet(local, store.hosts, config, logger, transferRoot);

  const away = await openStore(`sqlite://${path.join(dataDir, 'away.sqlite')}`, { secretKeyFile: config.secretKeyFile });
  const test1 = (await store.hosts.get('test-1'))!;
  await away.hosts.put({ ...test1, name: 'away', address: '127.0.0.1', port: 9 }); // discard port: refused
  const gone = new DockerRuntime(engineClient(`unix://${path.join(dataDir, 'no-engine.sock')}`), { ...runtimeOptions(config, logger), transferRoot });
  const unreachable = openHostSet(gone, away.hosts, config, logger, transferRoot);
  const sandboxName = (suffix: string) => `svc-${instance}-${suffix}`;
  await away.hosts.place(sandboxName('contract'), 'away');

  return {
    runtime,
    unreachable,
    sandboxName,
    async cleanup() {
      const placedOn = await store.hosts.placementOf(sandboxName('contract'));
      assert.equal(placedOn, undefined, 'the placement went with the volumes');
      await removeInstance(instance);
      await testHostsDown();
      await away.close();
      await destroyStore(store);
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
});

