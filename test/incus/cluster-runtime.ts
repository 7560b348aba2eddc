import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { IncusClient } from '../../lifecycle/runtime/incus/incus-client.ts';
import { IncusRuntime } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import type { Mover } from '../../lifecycle/runtime/host-operations.ts';
import type { Store } from '../../store/index.ts';
import { moverStore, outsideMachine, recordSandbox, SERVICE_ADDRESS } from '../../harness/test-cluster.ts';
import { incusClient, runtimeOptions } from './endpoint.ts';

const run = promisify(execFile);

/**
 * Sandboxes on the 3-member test cluster (cluster.test.ts brings it up): spread over the members, kept
 * apart by the members' firewall, one moved, a member drained and evacuated (and its removal refused
 * while it held sandboxes). IncusRuntime and IncusHosts as the service and `svc hosts …` use them; the
 * service itself on the cluster, a member lost among them: cluster-service.ts.
 */
export function runtimeOnCluster(): void {
  describe('IncusRuntime and IncusHosts over 3 members', { concurrency: false }, () => {
    const instance = `svct${randomBytes(3).toString('hex')}`;
    const names = [1, 2, 3].map((i) => `svc-${instance}-s${i}`);
    let client: IncusClient;
    let runtime: IncusRuntime;
    let unwatch: () => void;
    let store: Store;
    let mover: Mover;
    const closers: Array<() => Promise<void>> = [];

    /** Writes a file in the sandbox and answers its sha256 line. */
    const keep = async (name: string) => {
      const r = await runtime.exec.run(name, ['sh', '-c', 'head -c 4M /dev/urandom > /root/kept.bin && sha256sum /root/kept.bin']);
      assert.equal(r.exitCode, 0, r.stderr);
      return r.stdout.toString();
    };
    const digest = async (name: string) => (await runtime.exec.run(name, ['sha256sum', '/root/kept.bin'])).stdout.toString();
    const engineAnswers = async (name: string) => (await runtime.exec.run(name, ['docker', 'info', '--format', '{{.Driver}}'])).stdout.toString().trim();
    const placement = async () => new Map(await Promise.all(names.map(async (n) => [n, await runtime.hostOf(n)] as const)));
    const addressOf = async (name: string) => {
      const s = await runtime.inspect(name);
      assert.ok(s.status === 'running' && s.address, `${name} runs with an address: ${JSON.stringify(s)}`);
      return s.address;
    };

    before(async () => {
      client = incusClient();
      // a slice of the rig's pool of its own: the service's part holds addresses in a store of its own
      const opts = await runtimeOptions(instance, '100.64.250.0/24');
      closers.push(opts.close);
      runtime = new IncusRuntime(client, opts.options);
      // as the service runs it: Incus's events and the members' health watched, reads from what they kept
      unwatch = runtime.watchStarts();
      const ms = await moverStore(instance);
      closers.push(ms.close);
      ({ store, mover } = ms);
    });
    after(async () => {
      for (const n of names) await runtime?.removeVolumes(n).catch(() => undefined);
      unwatch?.();
      await client?.close();
      for (const close of closers) await close();
    });

    it('places three sandboxes one on each member (Incus\'s scheduler takes the member with the fewest), each with its own routed address', async () => {
      for (const n of names) {
        await recordSandbox(store, n);
        await runtime.create({ name: n, env: {} });
        await runtime.start(n);
      }
      assert.deepEqual([...(await placement()).values()].sort(), ['m1', 'm2', 'm3']);
      const addresses = await Promise.all(names.map(addressOf));
      assert.equal(new Set(addresses).size, 3, `three addresses: ${addresses.join(' ')}`);
      for (const a of addresses) assert.match(a, /^100\.64\.250\.\d+$/, 'from the pool it was given');
    });

    it('keeps sandboxes apart across members: another member\'s sandbox, the members and the service are refused; the outside and the service\'s own connections are not', async () => {
      const [a, b, c] = names as [string, string, string];
      const outside = await outsideMachine(`svcic${randomBytes(3).toString('hex')}`);
      const service = net.createServer((s) => s.end('service-secret\n'));
      await new Promise<void>((r) => service.listen(0, SERVICE_ADDRESS, r));
      try {
        const port = (service.address() as net.AddressInfo).port;
        const probe = (targets: string[]) => runtime.exec.run(a, ['bash', '-c', targets.map((t) => {
          const [ip, p] = t.split(':');
          return `if timeout 3 bash -c 'exec 3<>/dev/tcp/${ip}/${p}' 2>/dev/null; then echo "open ${t}"; else echo "closed ${t}"; fi`;
        }).join('; ')]).then((r) => r.stdout.toString());
        // the control first: the outside answers (routing and NAT work), so a refusal below is the firewall's
        assert.match(await probe(['198.51.100.2:7000']), /open 198\.51\.100\.2:7000/);
        const refused = [
          `${await addressOf(b)}:22`, `${await addressOf(c)}:2376`, // other members' sandboxes: sshd, engine
          '100.64.1.1:8443', '100.64.1.2:8443', '100.64.1.3:8443', // the members' Incus API
          `${SERVICE_ADDRESS}:${port}`, // a listener of the service's machine
          '169.254.0.1:22', '192.168.251.2:7000', // link-local (the routed NIC's gateway), a private machine
        ];
        const out = await probe(refused);
        for (const t of refused) assert.match(out, new RegExp(`closed ${t.replace(/\./g, '\\.')}`), out);
        // an inner container with every capability gets no further (its packets leave as the sandbox's)
        const image = (await run('docker', ['save', 'svc-fixture-busybox:latest'], { encoding: 'buffer', maxBuffer: 64 << 20 })).stdout;
        assert.equal((await runtime.exec.run(a, ['docker', 'load'], image)).exitCode, 0);
        const inner = await runtime.exec.run(a, ['docker', 'run', '--rm', '--network', 'host', '--cap-add', 'ALL', 'svc-fixture-busybox:latest',
          'sh', '-c', `nc -w 3 ${await addressOf(b)} 22 </dev/null; nc -w 3 ${SERVICE_ADDRESS} ${port} </dev/null; echo done`]);
        assert.doesNotMatch(inner.stdout.toString(), /SSH-2\.0|service-secret/);
        // the service (the edge) reaches every member's sandbox
        for (const n of [a, b, c]) assert.match(await sshBanner(await addressOf(n)), /^SSH-2\.0/, `the service reaches ${n}'s sshd`);
      } finally {
        service.close();
        await outside.close();
      }
    });

    it('moves one sandbox to another member (asleep, one Incus move): its files, its address and its engine go with it', async () => {
      const name = names[0]!;
      const from = (await runtime.hostOf(name))!;
      const before = await keep(name);
      const address = await addressOf(name);
      const done = await runtime.hosts.move(mover, name);
      assert.equal(done.from, from);
      assert.notEqual(done.to, from);
      assert.equal(await runtime.hostOf(name), done.to);
      assert.equal((await runtime.inspect(name)).status, 'deep_sleep', 'asleep where it went, as a runner host\'s move leaves it');
      await runtime.create({ name, env: {} });
      await runtime.start(name);
      assert.equal(await digest(name), before);
      assert.equal(await addressOf(name), address);
      assert.match(await sshBanner(address), /^SSH-2\.0/, 'reached at its address on its new member');
      assert.equal(await engineAnswers(name), 'overlay2');
      await assert.rejects(runtime.hosts.move(mover, name, { to: done.to }), /is on "m\d" already/);
      await assert.rejects(runtime.hosts.move(mover, name, { to: 'm9' }), /no host named "m9"/);
    });

    it('drains a member (nothing new goes there), refuses to remove it while it holds sandboxes, evacuates it with files intact, and opens it again', async () => {
      const member = (await runtime.hostOf(names[1]!))!;
      const digests = new Map<string, string>();
      for (const n of names) if ((await runtime.hostOf(n)) === member) digests.set(n, await keep(n));
      assert.ok(digests.size > 0);
      await assert.rejects(runtime.hosts.evacuate(mover, member), /is not drained/);
      await runtime.hosts.setDrained(member, true);
      assert.equal((await runtime.hosts.readings()).find((h) => h.name === member)?.drained, true);
      await assert.rejects(runtime.hosts.remove(member), new RegExp(`host "${member}" holds ${digests.size} sandbox`));
      // a sandbox made now goes elsewhere (the scheduler skips a member set to manual)
      const extra = `svc-${instance}-x`;
      names.push(extra);
      await runtime.create({ name: extra, env: {} });
      assert.notEqual(await runtime.hostOf(extra), member);

      const { moved, failed } = await runtime.hosts.evacuate(mover, member);
      assert.deepEqual(failed, []);
      assert.deepEqual(moved.sort(), [...digests.keys()].sort());
      for (const [n, sum] of digests) {
        assert.notEqual(await runtime.hostOf(n), member);
        await runtime.create({ name: n, env: {} });
        await runtime.start(n);
        assert.equal(await digest(n), sum, `${n}'s files came along`);
        assert.equal(await engineAnswers(n), 'overlay2');
      }
      const reading = (await runtime.hosts.readings()).find((h) => h.name === member)!;
      assert.equal(reading.drained, true);
      assert.equal((await client.get<{ status: string }>(`/1.0/cluster/members/${member}`)).status, 'Evacuated', 'Incus keeps it empty too');
      await runtime.hosts.setDrained(member, false);
      assert.equal((await client.get<{ status: string }>(`/1.0/cluster/members/${member}`)).status, 'Online');
      assert.equal((await runtime.hosts.readings()).find((h) => h.name === member)?.drained, false);
    });

    it('forks a running sandbox while its settle runs over and over (a reconcile pass beside the fork): the copy is made with its files, the source runs on', async () => {
      const source = names[2]!;
      await runtime.start(source);
      const sum = await keep(source);
      const fork = `svc-${instance}-f`;
      names.push(fork);
      let settling = true;
      let settles = 0;
      const beside = (async () => {
        for (; settling; settles++) {
          await runtime.settle(source);
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      try {
        await runtime.copyVolumes!(source, fork);
      } finally {
        settling = false;
        await beside;
      }
      assert.ok(settles > 1, `settle ran during the copy (${settles} times)`);
      assert.equal((await runtime.inspect(source)).status, 'running');
      assert.equal(await digest(source), sum);
      await runtime.create({ name: fork, env: {} });
      await runtime.start(fork);
      assert.equal(await digest(fork), sum, 'the fork has the source\'s files');
    });
  });
}

/** The first line sshd sends at `address`:22, from this process (the service's side). */
function sshBanner(address: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(22, address);
    s.setTimeout(5000, () => s.destroy(new Error(`no answer from ${address}:22`)));
    s.once('data', (d) => { resolve(d.toString().split('\r\n')[0]!); s.destroy(); });
    s.once('error', reject);
  });
}
