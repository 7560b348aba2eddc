import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { DockerRuntime, LABEL_INSTANCE, LABEL_SANDBOX, sandboxBridge } from '../../lifecycle/runtime/docker-runtime.ts';
import { engineClient } from '../../lifecycle/runtime/engine-client.ts';
import { removeInstance } from '../../harness/service.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { runtimeContract } from './runtime-contract.ts';

/** A DockerRuntime's options as the service would give them, for a test instance of its own. */
function optionsFor(instance: string, transferRoot: string) {
  const config = loadConfig();
  return {
    image: config.sandboxImage,
    runtime: config.sandboxRuntime,
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
    instance,
    logger: pino({ level: 'silent' }),
    transferRoot,
  };
}

/**
 * A test instance of its own inside the current describe: its name, a scratch folder, and a
 * DockerRuntime with its transfer folder there; all removed after the describe.
 */
function scratchInstance() {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-`));
  after(async () => {
    await removeInstance(instance);
    fs.rmSync(root, { recursive: true, force: true });
  });
  const runtimeOn = (transferRoot: string) => new DockerRuntime(sandboxDocker(), optionsFor(instance, transferRoot));
  return { instance, root, runtimeOn, runtime: runtimeOn(path.join(root, 'transfer')) };
}

/** The contract of lifecycle/runtime/sandbox-runtime.ts against DockerRuntime on the real sandbox engine. */
runtimeContract('DockerRuntime', { runsCommands: true }, async () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  const transferRoot = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-transfer-`));
  const options = optionsFor(instance, transferRoot);
  return {
    runtime: new DockerRuntime(sandboxDocker(), options),
    // an engine socket that does not exist: the engine cannot be asked (ENOENT on connect)
    unreachable: new DockerRuntime(engineClient(`unix://${path.join(transferRoot, 'no-engine.sock')}`), options),
    sandboxName: (suffix) => `svc-${instance}-${suffix}`,
    async cleanup() {
      await removeInstance(instance);
      fs.rmSync(transferRoot, { recursive: true, force: true });
    },
  };
});

/** What DockerRuntime keeps beside the container on the host: the transfer folder the container mounts. */
describe('DockerRuntime: the transfer folder goes with the container', () => {
  const { instance, root, runtimeOn } = scratchInstance();

  it('a take-down by a process on another data folder removes the folder the maker chose; the volumes stay', async () => {
    const name = `svc-${instance}-transfer`;
    const maker = runtimeOn(path.join(root, 'a', 'transfer'));
    const other = runtimeOn(path.join(root, 'b', 'transfer'));
    await maker.create({ name, env: { SVC_SANDBOX: name } });
    const state = await maker.inspect(name);
    const folder = 'transferFolder' in state ? state.transferFolder : undefined;
    assert.equal(folder, path.join(root, 'a', 'transfer', name));
    assert.equal('transferMount' in state ? state.transferMount : undefined, '/run/svc-transfer', 'where the sandbox sees it, reported with it');
    assert.ok(fs.existsSync(folder));
    await other.takeDown(name);
    assert.ok(!fs.existsSync(folder), 'the maker\'s folder is gone with its container');
    assert.ok((await other.withVolumes()).includes(name), 'volumes kept');
    await other.removeVolumes(name);
  });
});

/** Archivers are known by their label, never by a name a user can choose. */
describe('DockerRuntime: a sandbox named like an archiver is a sandbox', () => {
  const { instance, root, runtime } = scratchInstance();

  it('is listed (so counted and reconciled); an archiver, labelled or left by an older version, is not, and goes with its sandbox', async () => {
    const owner = `svc-${instance}-x`;
    const lookalike = `${owner}-archiver-1`;
    await runtime.create({ name: owner, env: { SVC_SANDBOX: owner } });
    await runtime.create({ name: lookalike, env: { SVC_SANDBOX: lookalike } });
    await runtime.archiveVolumes(owner, path.join(root, 'archive')); // removes its archiver when done
    // an archiver an older version left behind (killed mid-archive): its sandbox's label, no role label
    await sandboxDocker().createContainer({
      name: `${owner}-archiver-1700000000000`, Image: loadConfig().sandboxImage, Entrypoint: ['/bin/true'],
      Labels: { [LABEL_SANDBOX]: owner, [LABEL_INSTANCE]: instance },
    });
    assert.deepEqual((await runtime.list()).map((c) => c.name).sort(), [owner, lookalike].sort());
    await runtime.takeDown(owner);
    await runtime.removeVolumes(owner);
    const left = await sandboxDocker().listContainers({ all: true, filters: { label: [`${LABEL_INSTANCE}=${instance}`] } });
    assert.deepEqual(left.map((c) => c.Names[0]), [`/${lookalike}`], 'the old archiver went with its sandbox; the look-alike sandbox stays');
  });
});

/** A wake's first connection must not wait a second for the host's ARP retry (lifecycle/runtime/arp-retries.ts). */
describe('DockerRuntime: a sandbox network\'s bridge retries ARP every 100 ms', () => {
  const { instance, runtime } = scratchInstance();

  it('is set at every start, also on a bridge made before (or by an engine restart)', async () => {
    const name = `svc-${instance}-arp`;
    await runtime.create({ name, env: { SVC_SANDBOX: name } });
    const knob = `/proc/sys/net/ipv4/neigh/${sandboxBridge(name)}/retrans_time_ms`;
    fs.writeFileSync(knob, '1000'); // Linux's default: what a bridge made before this setting has
    await runtime.start(name);
    assert.equal(fs.readFileSync(knob, 'utf8').trim(), '100');
    await runtime.stop(name);
  });
});
