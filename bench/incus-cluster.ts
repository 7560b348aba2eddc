/**
 * Several machines on Incus, with the one machine's Docker runtime beside it in one run (issue 34,
 * docs/scale-out.md "Sandboxes on an Incus cluster"; the runner hosts' layer these were first measured
 * against is gone, its figures stay in the docs):
 *
 * - move of a sandbox holding SIZE_MB of random bytes (in /root) beside its inner engine's data:
 *   IncusHosts.move (the sandbox put to sleep, one `incus move --target` of its stopped instance)
 *   between members of the test cluster (scripts/test-cluster.sh, `dir` pool unless
 *   SVC_TEST_CLUSTER_POOL=btrfs), RUNS times;
 * - memory of one idle sandbox (its cgroup's rss and page cache, read inside it, 20 s after its start)
 *   on the cluster and on this machine's Docker engine;
 * - a member killed (scripts/test-cluster.sh kill): when MemberHealth takes it for lost, when the
 *   runtime's inspect answers `unreachable`, when Incus marks it Offline, and when a list of instances
 *   asked right after the kill answers (what the last session's runtime waited for).
 *
 *   NODE_ENV=test npx tsx bench/incus-cluster.ts          (RUNS=3, SIZE_MB=100; root; the cluster is taken down at the end)
 */
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
/** The sandbox's own cgroup (its root inside: LXC and Docker both give it a cgroup namespace). */
async function idleMemory(exec: SandboxExecutor, name: string): Promise<{ rss: number; cache: number }> {
  const r = await exec.run(name, ['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.stat']);
  const stat = new Map(r.stdout.toString().trim().split('\n').map((l) => l.split(' ') as [string, string]));
  return { rss: Number(stat.get('total_rss') ?? stat.get('rss')), cache: Number(stat.get('total_cache') ?? stat.get('cache')) };
}

// --- Incus: the test cluster ----------------------------------------------------------------------------
const incus: { moves: number[]; bytes: number; memory?: { rss: number; cache: number }; loss?: Record<string, number> } = { moves: [], bytes: 0 };
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

  for (let i = 0; i < RUNS; i++) {
    const m0 = performance.now();
    const done = await hosts.move(ms.mover, name);
    incus.moves.push(performance.now() - m0);
    incus.bytes = done.bytes;
  }
} catch (err) {
  await rig('down');
  throw err;
} finally {
  await t.close();
}

console.log(`moves (ms): incus ${incus.moves.map((x) => x.toFixed(0)).join(', ')}; memory docker ${JSON.stringify(docker.memory)} incus ${JSON.stringify(incus.memory)}`);

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
  while (marks.health === undefined || marks.unreachable === undefined || marks.offline === undefined) {
    if (marks.health === undefined && health.lost().has(member)) marks.health = since();
    if (marks.unreachable === undefined && (await runtime.read(other)).status === 'unreachable') marks.unreachable = since();
    if (marks.offline === undefined && (await client.get<Array<{ server_name: string; status: string }>>('/1.0/cluster/members?recursion=1')).some((m) => m.server_name === member && m.status === 'Offline')) marks.offline = since();
    await sleep(100);
  }
  await listed;
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
console.log('| figure | one machine (Docker) | Incus cluster | Incus / Docker |');
console.log('|---|---|---|---|');
const mi = median(incus.moves);
console.log(`| move, median (runs) | (nowhere to move to) | ${s(mi)} (${incus.moves.map(s).join(', ')}), root volume ${incus.bytes ? `${(incus.bytes / 1e6).toFixed(0)} MB` : 'size not reported by the pool'} | |`);
console.log(`| idle sandbox, rss + page cache | ${mib(docker.memory!.rss)} + ${mib(docker.memory!.cache)} | ${mib(incus.memory!.rss)} + ${mib(incus.memory!.cache)} | ${(incus.memory!.rss / docker.memory!.rss).toFixed(2)} (rss) |`);
const l = incus.loss!;
console.log(`member killed → MemberHealth lost ${s(l.health!)}, inspect unreachable ${s(l.unreachable!)}, Incus Offline ${s(l.offline!)}, a list asked at the kill answered ${s(l.list!)}; unreachable / list ${(l.unreachable! / l.list!).toFixed(2)}`);
