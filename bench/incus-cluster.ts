/**
 * Several machines on Incus, with the one machine's Docker runtime beside it in one run (issue 34,
 * docs/scale-out.md "Sandboxes on an Incus cluster"; the runner hosts' layer these were first measured
 * against is gone, its figures stay in the docs):
 *
 * - move of a sandbox holding SIZE_MB of random bytes (in /root) beside its inner engine's data:
 *   IncusHosts.move (the sandbox put to sleep, one `incus move --target` of its stopped instance)
 *   between two members of the test cluster (scripts/test-cluster.sh, `dir` pool unless
 *   SVC_TEST_CLUSTER_POOL=btrfs), RUNS times, each beside its baseline: what the runner layer's tar move
 *   carried (the sandbox's /root and inner engine's /var/lib/docker) through a plain `tar | socat …
 *   socat | tar` between the same two members, from the instance's root on the one to a folder on the
 *   other: a tar move without any layer of ours;
 * - memory of one idle sandbox (its cgroup's rss and page cache, read inside it, 20 s after its start)
 *   on the cluster and on this machine's Docker engine;
 * - a member killed (scripts/test-cluster.sh kill): when MemberHealth takes it for lost, when the
 *   runtime's inspect answers `unreachable`, when Incus marks it Offline, and when a list of instances
 *   asked right after the kill answers: Incus's own (what the runtime waited for before) and the
 *   runtime's (InstanceReads).
 *
 *   npm run bench:incus-cluster          (RUNS=3, SIZE_MB=100; root; the cluster is taken down at the end)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { startTestService } from '../harness/service.ts';
import { clusterUp, moverStore, recordSandbox, rig } from '../harness/test-cluster.ts';
import { pino } from 'pino';
import { loadConfig } from '../core/config.ts';
import { IncusClient } from '../lifecycle/runtime/incus/incus-client.ts';
import { LIST } from '../lifecycle/runtime/incus/incus-instance.ts';
import { incusEndpoint, incusRuntime } from '../lifecycle/runtime/incus/open-incus-runtime.ts';
import type { SandboxExecutor } from '../lifecycle/runtime/sandbox-runtime.ts';

const RUNS = Number(process.env.RUNS ?? 3);
const SIZE_MB = Number(process.env.SIZE_MB ?? 100);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const load = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

const FILL = `head -c ${SIZE_MB * 1_000_000} /dev/urandom > /root/payload && sync`;
const DATA = '/var/lib/svc-test-cluster';

/** A shell script run in member `m`'s network and mount namespaces (its holder process, scripts/test-cluster.sh). */
function inMember(m: string, script: string): Promise<void> {
  const holder = fs.readFileSync(`/run/svc-test-cluster/${m}.holder`, 'utf8').trim();
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', ['-t', holder, '-n', '-m', 'sh', '-ec', script], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${m}: ${script.slice(0, 80)}…: exit ${code}: ${err.slice(-300)}`))));
  });
}

/**
 * The baseline: the sandbox's /root and /var/lib/docker (what a runner host's tar move carried) from its
 * instance's root on `from` to a fresh folder on `to`, through tar, a TCP connection between the two
 * members and tar again; answers the milliseconds until the receiving tar has written it all.
 */
async function tarPipe(name: string, from: string, to: string): Promise<number> {
  const port = 19000 + Math.floor(Math.random() * 1000);
  const into = `${DATA}/${to}/bench-tar`;
  await inMember(to, `rm -rf ${into}; mkdir -p ${into}`);
  const t0 = performance.now();
  await Promise.all([
    inMember(to, `socat -u TCP-LISTEN:${port},reuseaddr STDOUT | tar -xf - -C ${into}`),
    // the sender tries again until the listener is up
    inMember(from, `tar -cf - -C ${DATA}/${from}/storage-pools/data/containers/${name}/rootfs root var/lib/docker | socat -u STDIN TCP:100.64.1.${to.slice(1)}:${port},retry=50,interval=0.05`),
  ]);
  const took = performance.now() - t0;
  await inMember(to, `rm -rf ${into}`);
  return took;
}
/** The sandbox's own cgroup (its root inside: LXC and Docker both give it a cgroup namespace). */
async function idleMemory(exec: SandboxExecutor, name: string): Promise<{ rss: number; cache: number }> {
  const r = await exec.run(name, ['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.stat']);
  const stat = new Map(r.stdout.toString().trim().split('\n').map((l) => l.split(' ') as [string, string]));
  return { rss: Number(stat.get('total_rss') ?? stat.get('rss')), cache: Number(stat.get('total_cache') ?? stat.get('cache')) };
}

// --- Incus: the test cluster ----------------------------------------------------------------------------
const incus: { moves: number[]; tars: number[]; bytes: number; memory?: { rss: number; cache: number }; loss?: Record<string, number> } = { moves: [], tars: [], bytes: 0 };
const docker: { memory?: { rss: number; cache: number } } = {};

// the Docker side's service (started before the cluster's lines are in the environment: this one runs
// on this machine's engine), made before any figure so both sides run at the same load
const t = await startTestService({ wakeHoldMs: 0 });
await clusterUp();
const instance = `svcb${randomBytes(3).toString('hex')}`;
// the service's runtime as SVC_RUNTIME=incus builds it, on the cluster `env` points at, with a pool slice of its own
const config = loadConfig({ ...process.env, SVC_INCUS_ADDRESS_POOL: '100.64.251.0/24', SVC_REDIS_PREFIX: instance });
const client = new IncusClient(incusEndpoint(config.incus!));
const ms = await moverStore(instance);
const runtime = incusRuntime(config, pino({ level: 'silent' }), ms.store.addresses, { client });
const { health, hosts } = runtime;
const unwatch = runtime.watchStarts();
const name = `svc-${instance}-move`;
const other = `svc-${instance}-lost`;

try {
  const owner = await t.user('bench');
  const rname = `svc-bench-imove-${t.config.redisPrefix}`;
  const created = await t.api('POST', '/api/sandboxes', owner.token, { name: rname, idle_timeout: '1h' });
  if (created.status !== 201) throw new Error(`create failed: ${JSON.stringify(created.body)}`);
  await t.service.runtime.exec.run(rname, ['sh', '-c', FILL]);

  await recordSandbox(ms.store, name);
  await runtime.create({ name, env: {} });
  await runtime.start(name);
  await runtime.exec.run(name, ['sh', '-c', FILL]);

  await sleep(20_000);
  incus.memory = await idleMemory(runtime.exec, name);
  docker.memory = await idleMemory(t.service.runtime.exec, rname);

  // between two members, alternating: the baseline's tar pipe, then the move, each from where the sandbox is
  const first = (await runtime.hostOf(name))!;
  const second = first === 'm2' ? 'm3' : 'm2';
  await runtime.stop(name);
  for (let i = 0; i < RUNS; i++) {
    const [from, to] = i % 2 === 0 ? [first, second] : [second, first];
    incus.tars.push(await tarPipe(name, from, to));
    const m0 = performance.now();
    const done = await hosts.move(ms.mover, name, { to });
    incus.moves.push(performance.now() - m0);
    incus.bytes = done.bytes;
  }
} catch (err) {
  await rig('down');
  throw err;
} finally {
  await t.close();
}

console.log(`moves (ms): incus ${incus.moves.map((x) => x.toFixed(0)).join(', ')}, tar pipe ${incus.tars.map((x) => x.toFixed(0)).join(', ')}; memory docker ${JSON.stringify(docker.memory)} incus ${JSON.stringify(incus.memory)}`);

// --- a member lost ----------------------------------------------------------------------------------------
try {
  await recordSandbox(ms.store, other);
  // not on m1, the member the client talks to (losing it is losing the API, not a member)
  await hosts.setDrained('m1', true);
  await runtime.create({ name: other, env: {} });
  await hosts.setDrained('m1', false);
  await runtime.start(other);
  const member = (await runtime.hostOf(other))!;
  await sleep(2000);
  await rig('kill', member);
  const t0 = performance.now();
  const since = () => performance.now() - t0;
  const marks: Record<string, number> = {};
  const listed = client.get(LIST, { timeoutMs: 60_000 }).then(() => { marks.list = since(); }, () => { marks.list = since(); });
  // the runtime's own list (reconcile passes, the metrics): InstanceReads, not held up by the lost member
  const runtimeListed = runtime.list().then(() => { marks.runtimeList = since(); }, () => { marks.runtimeList = since(); });
  while (marks.health === undefined || marks.unreachable === undefined || marks.offline === undefined) {
    if (marks.health === undefined && health.lost().has(member)) marks.health = since();
    if (marks.unreachable === undefined && (await runtime.read(other)).status === 'unreachable') marks.unreachable = since();
    if (marks.offline === undefined && (await client.get<Array<{ server_name: string; status: string }>>('/1.0/cluster/members?recursion=1')).some((m) => m.server_name === member && m.status === 'Offline')) marks.offline = since();
    await sleep(100);
  }
  await Promise.all([listed, runtimeListed]);
  incus.loss = marks;
} finally {
  unwatch();
  await rig('up', '3');
  for (const n of [name, other]) await runtime.removeVolumes(n).catch(() => undefined);
  await client.close();
  await ms.close();
  await rig('down');
}

console.log(`bench/incus-cluster: ${RUNS} runs each, a sandbox with ${SIZE_MB} MB of random bytes; load average at the end ${load()} (2 cores)`);
console.log('| figure | baseline | Incus cluster | Incus / baseline |');
console.log('|---|---|---|---|');
const mi = median(incus.moves);
const ti = median(incus.tars);
console.log(`| move between two members, median (runs) | tar pipe of /root and /var/lib/docker: ${s(ti)} (${incus.tars.map(s).join(', ')}) | ${s(mi)} (${incus.moves.map(s).join(', ')}), root volume ${incus.bytes ? `${(incus.bytes / 1e6).toFixed(0)} MB` : 'size not reported by the pool'} | ${(mi / ti).toFixed(2)} |`);
console.log(`| idle sandbox, rss + page cache | one machine's Docker runtime: ${mib(docker.memory!.rss)} + ${mib(docker.memory!.cache)} | ${mib(incus.memory!.rss)} + ${mib(incus.memory!.cache)} | ${(incus.memory!.rss / docker.memory!.rss).toFixed(2)} (rss) |`);
const l = incus.loss!;
console.log(`member killed → MemberHealth lost ${s(l.health!)}, inspect unreachable ${s(l.unreachable!)}, Incus Offline ${s(l.offline!)}, Incus's list asked at the kill answered ${s(l.list!)}, the runtime's list asked then ${s(l.runtimeList!)}; unreachable / Incus's list ${(l.unreachable! / l.list!).toFixed(2)}`);
