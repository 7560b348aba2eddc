import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { incusClient, runtimeOptions } from './endpoint.ts';

const run = promisify(execFile);
const RIG = path.join(import.meta.dirname, '../../scripts/test-cluster.sh');
const rig = (...args: string[]) => run('bash', [RIG, ...args], { maxBuffer: 1 << 20 });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A member of a 3-member Incus cluster lost (scripts/test-cluster.sh kill: its incusd killed, its link
 * cut) and back: IncusRuntime on the other members answers throughout. Not in `npm test` (it needs
 * the rig, 10–20 s to make, and it kills a member); it brings the cluster up itself and leaves it up:
 *
 *   NODE_ENV=test npx tsx --test test/incus/host-loss.incus.ts
 */
describe('IncusRuntime on a cluster: a member lost and back', () => {
  const instance = `svct${randomBytes(3).toString('hex')}`;
  let client: IncusClient;
  let runtime: IncusRuntime;
  let options: Awaited<ReturnType<typeof runtimeOptions>> | undefined;
  const names = [1, 2, 3].map((i) => `svc-${instance}-s${i}`);
  const where = new Map<string, string>();

  before(async () => {
    await rig('up', '3');
    // the lines `env` prints, as a shell's eval would take them
    for (const m of (await rig('env')).stdout.matchAll(/^export (\w+)=(.*)$/gm)) process.env[m[1]!] = m[2]!;
    client = incusClient();
    options = await runtimeOptions(instance);
    runtime = new IncusRuntime(client, options.options);
  });
  after(async () => {
    await rig('up', '3');
    for (const n of names) await runtime?.removeVolumes(n).catch(() => undefined);
    await client?.close();
    await options?.close();
  });

  it('places three sandboxes one on each member (the scheduler takes the member with the fewest)', async () => {
    for (const n of names) {
      await runtime.create({ name: n, env: {} });
      where.set(n, (await runtime.hostOf(n))!);
    }
    assert.deepEqual([...where.values()].sort(), ['m1', 'm2', 'm3']);
    for (const n of names) {
      await runtime.start(n);
      const r = await runtime.exec.run(n, ['sh', '-c', 'echo "$(hostname) keeps this" > /root/kept.txt && sha256sum /root/kept.txt']);
      assert.equal(r.exitCode, 0, r.stderr);
    }
  });

  it('a killed member: its sandbox becomes unreachable (never deep_sleep), the others run commands all along; back when it returns, files intact', async () => {
    const lost = [...where].find(([, m]) => m !== 'm1')![0];
    const kept = names.filter((n) => n !== lost);
    const before = (await runtime.exec.run(lost, ['sha256sum', '/root/kept.txt'])).stdout.toString();
    await rig('kill', where.get(lost)!);
    const t0 = Date.now();
    for (;;) {
      const state = await runtime.inspect(lost);
      assert.notEqual(state.status, 'deep_sleep', 'a lost member\'s sandbox is never taken for gone');
      if (state.status === 'unreachable') break;
      for (const n of kept) assert.equal((await runtime.exec.run(n, ['true'])).exitCode, 0, `${n} runs commands while ${lost}'s member is away`);
      await sleep(500);
    }
    console.log(`# ${lost} (${where.get(lost)}) unreachable ${Date.now() - t0} ms after its member was killed`);
    for (const n of kept) assert.equal((await runtime.inspect(n)).status, 'running');
    const listed = (await runtime.list()).map((s) => s.name);
    assert.ok(kept.every((n) => listed.includes(n)) && !listed.includes(lost), 'the others listed; the lost one left out, as a runner host that does not answer');

    await rig('up', '3');
    const t1 = Date.now();
    while ((await runtime.inspect(lost)).status !== 'running') await sleep(200);
    console.log(`# ${lost} running again ${Date.now() - t1} ms after up`);
    // the member answers before it is ready for commands (`Server isn't ready yet`)
    while (!(await runtime.exec.run(lost, ['true']).then((r) => r.exitCode === 0, () => false))) await sleep(200);
    console.log(`# ${lost} runs commands again ${Date.now() - t1} ms after up`);
    assert.equal((await runtime.exec.run(lost, ['sha256sum', '/root/kept.txt'])).stdout.toString(), before);
  });
});
