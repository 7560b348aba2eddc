// Root in a sandbox is not root on the host (issue 13): the classic escapes, tried as the sandbox's root
// (a shell in the sandbox, as ssh gives one) and from an inner container with every capability, no
// seccomp and every device allowed (as `docker run` through the engine address can ask for). Every probe
// is harmless where it succeeds: values are written back as read, mounts are read-only, the clock is set
// to the current time, the sysrq trigger is opened but nothing is written to it.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const METADATA_IP = '169.254.169.254';

/** Major:minor of the host's root file system, from the host's own mount table. */
function hostRootDevice(): string {
  const line = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === '/');
  return line!.split(' ')[2]!;
}

describe('isolation: root in a sandbox is not root on the host', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let a: string;
  let b: string;
  let cli: EngineCli;
  let hostService: net.Server;
  let hostPort: number;
  let metadata: http.Server | undefined;
  const docker = sandboxDocker();

  /** Runs `script` with bash as root of sandbox `name`; resolves with its exit code and output. */
  const asRoot = async (name: string, script: string) =>
    run('docker', [...SANDBOX_CLI, 'exec', name, 'bash', '-c', script], { timeout: 60_000 })
      .then((r) => ({ code: 0, out: r.stdout + r.stderr }), (e) => ({ code: e.code as number, out: `${e.stdout}${e.stderr}` }));
  /** The same in an inner container with every capability, no seccomp, every device, the host's /dev. */
  const inInner = async (script: string) =>
    cli.docker(['run', '--rm', '--cap-add', 'ALL', '--security-opt', 'seccomp=unconfined', '--security-opt', 'apparmor=unconfined',
      '--security-opt', 'systempaths=unconfined', '--device-cgroup-rule', 'a *:* rwm', '--network', 'host', 'probe', 'sh', '-c', script])
      .then((r) => ({ code: 0, out: r.stdout + r.stderr }), (e) => ({ code: e.code as number, out: `${e.stdout}${e.stderr}` }));
  const addressOf = async (name: string) => Object.values((await docker.getContainer(name).inspect()).NetworkSettings.Networks)[0]!;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    const made = [];
    for (const n of ['a', 'b']) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `esc${n}-${t.config.redisPrefix}`, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      made.push(res.body);
    }
    [a, b] = [made[0].name, made[1].name];
    cli = new EngineCli(made[0].engine_access.host, '127.0.0.1', t.config.httpsPort, made[0]);
    await cli.docker(['build', '-q', '-t', 'probe', path.resolve('fixtures/busybox')]);
    // a service of the host's own on all interfaces: sandboxes must not reach it
    hostService = net.createServer((s) => s.end('host-secret\n'));
    await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r));
    hostPort = (hostService.address() as net.AddressInfo).port;
  });
  after(async () => {
    hostService?.close();
    metadata?.close();
    await run('ip', ['addr', 'del', `${METADATA_IP}/32`, 'dev', 'lo']).catch(() => undefined);
    cli?.dispose();
    await t?.close();
  });

  it('runs the sandbox as an unprivileged host uid', async () => {
    const { State } = await docker.getContainer(a).inspect();
    const map = fs.readFileSync(`/proc/${State.Pid}/uid_map`, 'utf8').trim().split(/\s+/).map(Number);
    assert.equal(map[0], 0);
    assert.ok(map[1]! >= 100000, `root inside is host uid ${map[1]}`);
    assert.ok(map[2]! <= 65536);
  });

  it('refuses mknod + mount of the host disk, as sandbox root and in an inner container', async () => {
    const [major, minor] = hostRootDevice().split(':');
    const probe = `mknod /tmp/hostdisk b ${major} ${minor} && mkdir -p /tmp/m && mount -o ro /tmp/hostdisk /tmp/m && ls /tmp/m`;
    const root = await asRoot(a, probe);
    assert.notEqual(root.code, 0, root.out);
    assert.match(root.out, /not permitted|denied/i);
    const inner = await inInner(probe);
    assert.notEqual(inner.code, 0, inner.out);
  });

  it('refuses kernel knobs: core_pattern and modprobe written back as read, the sysrq trigger, a module', async () => {
    for (const knob of ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe']) {
      const probe = `v=$(cat ${knob}) && printf '%s\\n' "$v" > ${knob}`;
      const root = await asRoot(a, probe);
      assert.notEqual(root.code, 0, `${knob}: ${root.out}`);
      const inner = await inInner(probe);
      assert.notEqual(inner.code, 0, `${knob} (inner): ${inner.out}`);
    }
    // opening the trigger for writing is the escape; nothing is written
    const sysrq = await asRoot(a, ': > /proc/sysrq-trigger');
    assert.notEqual(sysrq.code, 0, sysrq.out);
    assert.notEqual((await inInner(': > /proc/sysrq-trigger')).code, 0);
    // init_module needs CAP_SYS_MODULE in the host's user namespace: EPERM before the file is read
    const module = await inInner('printf "\\177ELF" > /tmp/x.ko && insmod /tmp/x.ko');
    assert.notEqual(module.code, 0, module.out);
    // EPERM, or ENOSYS on a kernel built without modules: either way nothing is loaded
    assert.match(module.out, /not permitted|not implemented|does not support/i);
  });

  it('refuses to set the clock (to the current time)', async () => {
    const root = await asRoot(a, 'date -u -s "@$(date +%s)"');
    assert.notEqual(root.code, 0, root.out);
    assert.match(root.out, /not permitted/i);
    // busybox's date says so but exits 0: its message is the answer
    assert.match((await inInner('date -u -s "@$(date +%s)"')).out, /not permitted/i);
  });

  it('refuses to raise its own memory and PID limits', async () => {
    const probe = 'for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; do v=$(cat $f) && echo $v > $f || exit 1; done';
    const root = await asRoot(a, probe);
    assert.notEqual(root.code, 0, root.out);
  });

  it("reaches neither the host's listeners, nor link-local addresses, nor another sandbox — but does reach the edge", async () => {
    const self = await addressOf(a);
    const other = await addressOf(b);
    // An address the sandbox holds itself says nothing about the host: the inner dockerd's docker0 is
    // 172.17.0.1 inside the sandbox, as the main engine's is on the host.
    const own = new Set((await asRoot(a, "ip -4 -o addr show | awk '{ print $4 }' | cut -d/ -f1")).out.split('\n').filter(Boolean));
    const hostAddresses = () => new Set(Object.values(os.networkInterfaces()).flat()
      .filter((i) => i && i.family === 'IPv4' && !i.internal).map((i) => i!.address));
    const hostIps = [self.Gateway, ...hostAddresses()].filter((ip) => !own.has(ip));
    // a stand-in for the cloud metadata service on the host
    await run('ip', ['addr', 'add', `${METADATA_IP}/32`, 'dev', 'lo']).catch(() => undefined);
    metadata = http.createServer((_req, res) => res.end('metadata-secret'));
    await new Promise<void>((r) => metadata!.listen(80, METADATA_IP, r));
    // every probe at once (a dropped packet costs its whole timeout); the answer lists what opened
    const reachable = async (targets: Array<[string, number]>) => {
      const probes = targets.map(([ip, port]) => `(timeout 5 bash -c 'exec 3<>/dev/tcp/${ip}/${port}' 2>/dev/null && echo "OPEN ${ip}:${port}") &`);
      const { out } = await asRoot(a, `${probes.join('\n')}\nwait`);
      return new Set([...out.matchAll(/^OPEN (\S+)$/gm)].map((m) => m[1]));
    };
    const api = new URL(t.url);
    const forbidden: Array<[string, number]> = [
      ...hostIps.flatMap((ip) => [hostPort, 6379, 5432, 22].map((port): [string, number] => [ip, port])),
      [self.Gateway, Number(api.port)], // the plain-HTTP API port
      [METADATA_IP, 80], // link-local metadata address
      [other.IPAddress, 2376], [other.IPAddress, 22], // another sandbox's engine and sshd
    ];
    const opened = await reachable([[self.Gateway, t.config.httpsPort], ...forbidden]);
    // Other tests' sandbox networks come and go: a bridge address gone by now was routed out to the
    // internet (allowed), where this machine's network accepts connections to any address.
    const stillHost = hostAddresses();
    const probed = new Set(forbidden.filter(([ip]) => ip !== METADATA_IP && ip !== other.IPAddress).map(([ip]) => ip));
    const open = new Set([...opened].filter((o) => { const ip = o.split(':')[0]!; return !probed.has(ip) || stillHost.has(ip); }));
    // the control: the edge (registry pushes from inside go there) answers from inside
    assert.ok(open.has(`${self.Gateway}:${t.config.httpsPort}`), 'the edge port is reachable from the sandbox');
    assert.deepEqual([...open].filter((o) => o !== `${self.Gateway}:${t.config.httpsPort}`), [], 'nothing else of the host or other sandboxes');
    // and an inner container (host network of the sandbox, every capability) gets no further
    const inner = await inInner(`nc -w 3 ${self.Gateway} ${hostPort} </dev/null; nc -w 3 ${METADATA_IP} 80 </dev/null; nc -w 3 ${other.IPAddress} 2376 </dev/null; echo done`);
    assert.doesNotMatch(inner.out, /host-secret|metadata-secret/);
    assert.match(inner.out, /done/);
  });

  it('reaches no other machine of the private network, but the internet beyond it (SVC_SANDBOX_PRIVATE_NETWORKS)', async () => {
    // "Another machine": a network namespace behind a veth, at a private address (192.168.251.2, as a
    // Redis or PostgreSQL machine would be) and at a public one (198.51.100.2, the internet's stand-in)
    const ns = `svcesc${randomBytes(3).toString('hex')}`;
    const veth = `ve${ns.slice(6)}`;
    const sh = (script: string) => run('sh', ['-ec', script]);
    let machine: ReturnType<typeof spawn> | undefined;
    try {
      // these addresses are harness/test-cluster.ts's too: npm test never runs test/incus beside this file
      await sh(`ip netns add ${ns}; ip link add ${veth} type veth peer name eth0 netns ${ns}
        ip addr add 192.168.251.1/30 dev ${veth}; ip link set ${veth} up; ip route add 198.51.100.2/32 dev ${veth}
        ip -n ${ns} addr add 192.168.251.2/30 dev eth0; ip -n ${ns} addr add 198.51.100.2/32 dev eth0
        ip -n ${ns} link set eth0 up; ip -n ${ns} link set lo up; ip -n ${ns} route add default via 192.168.251.1`);
      machine = spawn('ip', ['netns', 'exec', ns, 'socat', 'TCP-LISTEN:7000,fork,reuseaddr', 'SYSTEM:echo lan-secret']);
      const probe = (ip: string) => `timeout 5 bash -c 'exec 3<>/dev/tcp/${ip}/7000; cat <&3' 2>/dev/null || echo "closed ${ip}"`;
      await eventually(async () => (await asRoot(a, probe('198.51.100.2'))).out.includes('lan-secret'), 'the public address answers the sandbox (the control)', 15_000);
      const lan = await asRoot(a, probe('192.168.251.2'));
      assert.doesNotMatch(lan.out, /lan-secret/);
      assert.match(lan.out, /closed 192\.168\.251\.2/);
      const inner = await inInner(`nc -w 3 192.168.251.2 7000 </dev/null; echo done`);
      assert.doesNotMatch(inner.out, /lan-secret/);
      assert.match(inner.out, /done/);
      // the nameservers sandboxes are given stay reachable on port 53 alone
      const rules = (await run('iptables', ['-w', '5', '-S', 'SVC-SANDBOX-PRIVATE'])).stdout;
      for (const ns of t.config.sandboxDns.filter((d) => net.isIPv4(d))) assert.match(rules, new RegExp(`-d ${ns.replace(/\./g, '\\.')}/32 -i svcb\\+ -p udp -m udp --dport 53 -j ACCEPT`));
    } finally {
      // also after a set-up that failed half-way (an address another run holds): nothing of it left
      machine?.kill();
      await sh(`ip link del ${veth} 2>/dev/null || true; ip netns del ${ns} 2>/dev/null || true`);
    }
  });

  it("cannot read another sandbox's files", async () => {
    await asRoot(b, 'echo b-secret > /root/secret.txt');
    await eventually(async () => (await asRoot(b, 'cat /root/secret.txt')).out.includes('b-secret'), 'b wrote its secret', 10_000);
    const found = await asRoot(a, 'grep -rl b-secret /root /home /srv /opt /mnt /run /tmp /var/lib/docker/volumes 2>/dev/null | head -n 1; echo end');
    assert.doesNotMatch(found.out, /secret\.txt/);
  });
});
