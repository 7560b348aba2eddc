/**
 * Where a wake's time goes, phase by phase, on the sandbox engine directly (no service, no edge):
 * a sandbox container made with the service's create options (lifecycle/runtime/host-config.ts),
 * its entrypoint's trace (SVC_ENTRYPOINT_TRACE=1), a restartable busybox httpd inside publishing
 * 8080, then wakes from asleep (container stopped) and from deep sleep (container and network
 * removed, volumes kept). Per wake: the host engine's start call, the cgroup hand-over, each
 * entrypoint step, the inner dockerd's own log lines, and the first TCP connection the app accepts
 * (an attempt every 10 ms, none waiting for the one before), and the CPU time the sandbox's own
 * processes had used by then (its cgroup's count: what a busy machine stretches, but does not change).
 * COMPARE=<image>: a second sandbox from that image (the baseline, "before"), woken in turn with the
 * first in the same run, and the ratio of each mark's median (IMAGE / COMPARE). HOST_RUNTIME=<name>:
 * the first sandbox's container runs with that runtime of the sandbox engine (COMPARE's with its default).
 *
 *   npm run bench:wake-phases        (RUNS=5 per state, IMAGE=svc-sandbox:latest, COMPARE=<image>,
 *                                     DEBUG=1: dockerd --debug, VERBOSE=1: every log line)
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadConfig } from '../core/config.ts';
import { shortenArpRetries } from '../lifecycle/runtime/arp-retries.ts';
import { delegateCgroups } from '../lifecycle/runtime/cgroup-delegation.ts';
import { sandboxBridge } from '../lifecycle/runtime/docker-runtime.ts';
import { sandboxContainerOptions } from '../lifecycle/runtime/host-config.ts';
import { SANDBOX_CLI, sandboxDocker } from '../harness/sandbox-engine.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const IMAGE = process.env.IMAGE ?? 'svc-sandbox:latest';
const COMPARE = process.env.COMPARE;
const FIXTURE = 'svc-fixture-busybox:latest';
const VERBOSE = process.env.VERBOSE === '1';
const run = promisify(execFile);
const docker = sandboxDocker();
const config = loadConfig();
const labels = { 'svc.test': 'wake-phases' };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
type Marks = Record<string, number>;

/** One sandbox of the bench: its image, names and transfer folder. */
interface Subject {
  image: string;
  /** the sandbox engine's runtime for its container; its default when unset */
  hostRuntime?: string;
  name: string;
  volumes: { root: string; home: string; srv: string; opt: string; docker: string };
  transfer: string;
  lastIp: string;
}

async function subject(image: string, hostRuntime?: string): Promise<Subject> {
  const name = `svc-wphase-${randomBytes(3).toString('hex')}`;
  const volumes = { root: `${name}-root`, home: `${name}-home`, srv: `${name}-srv`, opt: `${name}-opt`, docker: `${name}-docker` };
  return { image, hostRuntime, name, volumes, transfer: await mkdtemp(join(tmpdir(), 'svc-wphase-')), lastIp: '' };
}

const createNetwork = (s: Subject) => docker.createNetwork({ Name: s.name, Driver: 'bridge', Labels: labels,
  Options: { 'com.docker.network.bridge.name': sandboxBridge(s.name) } });
function createContainer(s: Subject) {
  const options = sandboxContainerOptions({
    name: s.name, image: s.image, network: s.name, volumes: s.volumes, transferFolder: s.transfer, labels, runtime: config.sandboxRuntime,
    env: ['SVC_ENTRYPOINT_TRACE=1', 'SVC_DNS=1.1.1.1', 'SVC_SSH_AUTHORIZED_KEYS='],
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
  });
  if (s.hostRuntime) options.HostConfig!.Runtime = s.hostRuntime;
  return docker.createContainer({ ...options, Cmd: process.env.DEBUG === '1' ? ['--debug'] : [] });
}

/** start() as the runtime does it: the bridge's ARP retries, the container, then its own cgroups. */
async function start(s: Subject): Promise<{ started: number; delegated: number; ip: string; pid: number }> {
  const c = docker.getContainer(s.name);
  await shortenArpRetries(sandboxBridge(s.name));
  await c.start();
  const started = Date.now();
  const info = await c.inspect();
  await delegateCgroups(info.State.Pid);
  return { started, delegated: Date.now(), ip: info.NetworkSettings.Networks[s.name]!.IPAddress, pid: info.State.Pid };
}

const accepts = (host: string, port: number) => new Promise<boolean>((resolve) => {
  const socket = net.connect({ host, port, timeout: 2_000 });
  const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
  socket.once('connect', () => done(true));
  socket.once('error', () => done(false));
  socket.once('timeout', () => done(false));
});
async function acceptedAt(ip: string): Promise<number> {
  let at = 0;
  while (!at) {
    void accepts(ip, 8080).then((ok) => { if (ok && !at) at = Date.now(); });
    await new Promise((r) => setTimeout(r, 10));
  }
  return at;
}

/** CPU ms used so far by the processes of the container whose first process is `pid` (cgroup v1 or v2). */
async function cpuMs(pid: number): Promise<number | undefined> {
  const lines = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n');
  const v1 = lines.map((l) => /^\d+:([^:]*\bcpuacct\b[^:]*):(.+)$/.exec(l)).find(Boolean);
  if (v1) return Number(await readFile(`/sys/fs/cgroup/${v1[1]}/${v1[2]}/cpuacct.usage`, 'utf8')) / 1e6;
  const v2 = lines.map((l) => /^0::(.+)$/.exec(l)).find(Boolean);
  const usec = v2 && /usage_usec (\d+)/.exec(await readFile(`/sys/fs/cgroup/${v2[1]}/cpu.stat`, 'utf8'))?.[1];
  return usec ? Number(usec) / 1000 : undefined;
}

/** The container's log lines since `since` (ms), each with the engine's timestamp in ms. */
async function logLines(s: Subject, since: number): Promise<Array<{ at: number; line: string }>> {
  const { stdout, stderr } = await run('docker', [...SANDBOX_CLI, 'logs', '--timestamps', '--since', (since / 1000 - 1).toFixed(3), s.name], { maxBuffer: 64 << 20 });
  return (stdout + stderr).split('\n').filter(Boolean).map((l) => {
    const sp = l.indexOf(' ');
    const line = l.slice(sp + 1);
    // the process's own clock where the line has one (the engine stamps lines when it reads them)
    const own = /^time="([^"]+)"/.exec(line)?.[1] ?? /^\[svc-entrypoint\] (\S+Z) /.exec(line)?.[1];
    return { at: Date.parse(own ?? l.slice(0, sp)), line };
  }).filter((l) => l.at >= since);
}

/** Lines of dockerd's log that mark a phase (the two `debug` ones only with DEBUG=1). */
const DOCKERD_MARKS: Array<[string, RegExp]> = [
  ['dockerd: starting', /msg="Starting up"/],
  ['dockerd: loading containers', /msg="Loading containers: start/],
  ['dockerd: app container starting', /msg="starting container"/],
  ['dockerd: app task started', /topic=\/tasks\/start/],
  ['dockerd: loading done', /msg="Loading containers: done/],
  ['dockerd: API listens', /msg="API listen on/],
];

/** VERBOSE: the address lookups (ARP) in the sandbox's network namespace and the host's, with their times. */
function watchNeighbours(pid: number, ip: string): { stop: () => string } {
  if (!VERBOSE) return { stop: () => '' };
  const inside = spawn('nsenter', ['-t', String(pid), '-n', 'ip', '-ts', 'monitor', 'neigh'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const host = spawn('ip', ['-ts', 'monitor', 'neigh'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let log = '';
  inside.stdout.on('data', (b: Buffer) => { log += b.toString(); });
  host.stdout.on('data', (b: Buffer) => { log += b.toString().split('\n').filter((l) => l.includes(ip)).map((l) => `${l.replace('] ', '] host: ')}\n`).join(''); });
  return { stop: () => { inside.kill(); host.kill(); return log; } };
}

async function wake(s: Subject, kind: 'asleep' | 'deep'): Promise<Marks> {
  const c = docker.getContainer(s.name);
  await c.stop();
  if (kind === 'deep') {
    await c.remove();
    await docker.getNetwork(s.name).remove();
  }
  if (VERBOSE && s.lastIp) console.log(`before the wake, the host's neighbour entry: ${(await run('ip', ['-s', 'neigh', 'show', s.lastIp])).stdout.trim()}`);
  const t0 = Date.now();
  const marks: Marks = {};
  if (kind === 'deep') {
    await createNetwork(s);
    marks['network created'] = Date.now() - t0;
    await createContainer(s);
    marks['container created'] = Date.now() - t0;
  }
  const started = await start(s);
  s.lastIp = started.ip;
  marks['start returned'] = started.started - t0;
  marks['cgroups handed over'] = started.delegated - t0;
  const neighbours = watchNeighbours(started.pid, started.ip);
  marks['app accepts'] = (await acceptedAt(started.ip)) - t0;
  const cpu = await cpuMs(started.pid).catch(() => undefined);
  if (cpu !== undefined) marks['sandbox CPU ms until the app accepts'] = Math.round(cpu);
  await new Promise((r) => setTimeout(r, 100));
  const neighLog = neighbours.stop();
  if (VERBOSE) {
    const { stdout } = await run('nsenter', ['-t', String(started.pid), '-n', 'sh', '-c', 'grep -H . /proc/sys/net/ipv4/neigh/*/retrans_time_ms /proc/sys/net/ipv4/neigh/*/mcast_solicit']);
    console.log(stdout);
  }
  const lines = await logLines(s, t0);
  // every step the entrypoint traces ("[svc-entrypoint] <time> <step>"), then dockerd's
  for (const l of lines) {
    const step = /^\[svc-entrypoint\] \S+ (.+)$/.exec(l.line)?.[1];
    if (step) marks[`entrypoint: ${step}`] ??= l.at - t0;
  }
  for (const [label, re] of DOCKERD_MARKS) {
    const hit = lines.find((l) => re.test(l.line));
    if (hit) marks[label] = hit.at - t0;
  }
  if (VERBOSE) {
    for (const l of neighLog.split('\n').filter(Boolean)) {
      const at = /^\[([^\]]+)\]/.exec(l)?.[1];
      if (at) lines.push({ at: Date.parse(`${at}Z`), line: `[neigh] ${l.slice(at.length + 3)}` });
    }
    lines.sort((a, b) => a.at - b.at);
    for (const l of lines) console.log(`${String(l.at - t0).padStart(6)} ${l.line.slice(0, 160)}`);
  }
  return marks;
}

/** A sandbox of `s.image` with the app running in it, as a user leaves it before it falls asleep. */
async function prepare(s: Subject): Promise<void> {
  await createNetwork(s);
  for (const v of Object.values(s.volumes)) await docker.createVolume({ Name: v, Labels: labels });
  await createContainer(s);
  const first = await start(s);
  for (let i = 0; ; i++) {
    if (i > 600) throw new Error('the inner engine did not answer');
    if ((await run('docker', [...SANDBOX_CLI, 'exec', s.name, 'docker', 'version']).then(() => true, () => false))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await run('sh', ['-c', `docker save ${FIXTURE} | docker ${SANDBOX_CLI.join(' ')} exec -i ${s.name} docker load -q`]);
  // the trap: the app stops at once on a sleep instead of after dockerd's 10 s
  await run('docker', [...SANDBOX_CLI, 'exec', s.name, 'docker', 'run', '-d', '--name', 'web', '--restart', 'unless-stopped', '-p', '8080:8080',
    FIXTURE, 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait']);
  await acceptedAt(first.ip);
}

async function remove(s: Subject): Promise<void> {
  await docker.getContainer(s.name).remove({ force: true }).catch(() => {});
  await docker.getNetwork(s.name).remove().catch(() => {});
  for (const v of Object.values(s.volumes)) await docker.getVolume(v).remove().catch(() => {});
  await rm(s.transfer, { recursive: true, force: true });
}

const label = (s: Subject) => s.hostRuntime ? `${s.image} (${s.hostRuntime})` : s.image;

/** The medians of each mark, per image and state, and with COMPARE the ratio of each to the baseline's. */
function report(all: Map<Subject, Record<'asleep' | 'deep', Marks[]>>): void {
  const subjects = [...all.keys()];
  const col = (s: Subject, kind: 'asleep' | 'deep', k: string) => {
    const xs = all.get(s)![kind].map((m) => m[k]).filter((x) => x !== undefined) as number[];
    return xs.length ? median(xs) : undefined;
  };
  const keys = [...new Set([...all.values()].flatMap((r) => [...r.asleep, ...r.deep].flatMap((m) => Object.keys(m))))];
  // the time marks in order, the CPU count last
  const at = (k: string) => (k.includes('CPU') ? 1e10 : col(subjects[0]!, 'asleep', k) ?? 1e9);
  keys.sort((x, y) => at(x) - at(y));
  const heads = subjects.flatMap((s) => [`${label(s)} asleep`, `${label(s)} deep`]);
  const ratio = (kind: 'asleep' | 'deep', k: string) => {
    const [a, b] = [col(subjects[0]!, kind, k), col(subjects[1]!, kind, k)];
    return a !== undefined && b ? (a / b).toFixed(2) : '—';
  };
  if (subjects.length > 1) heads.push('ratio asleep', 'ratio deep');
  console.log(`| mark | ${heads.join(' | ')} |\n|${'---|'.repeat(heads.length + 1)}`);
  for (const k of keys) {
    const cells = subjects.flatMap((s) => [col(s, 'asleep', k) ?? '—', col(s, 'deep', k) ?? '—']);
    if (subjects.length > 1) cells.push(ratio('asleep', k), ratio('deep', k));
    console.log(`| ${k} | ${cells.join(' | ')} |`);
  }
}

const subjects = [await subject(IMAGE, process.env.HOST_RUNTIME), ...(COMPARE ? [await subject(COMPARE)] : [])];
const loadAtStart = (await run('cat', ['/proc/loadavg'])).stdout.trim();
try {
  for (const s of subjects) await prepare(s);
  const all = new Map(subjects.map((s) => [s, { asleep: [] as Marks[], deep: [] as Marks[] }]));
  for (const kind of ['asleep', 'deep'] as const) {
    for (let i = 0; i < RUNS; i++) {
      // in turn, and the first of each pair alternating, so neither image always follows the other
      for (const s of i % 2 ? [...subjects].reverse() : subjects) {
        const m = await wake(s, kind);
        all.get(s)![kind].push(m);
        console.log(`${label(s)} ${kind} ${i + 1}: ${Object.entries(m).sort((a, b) => a[1] - b[1]).map(([k, v]) => `${k} ${v}`).join(', ')}`);
      }
    }
  }
  console.log(`\nmedians (ms after the wake began; load at start ${loadAtStart}, at end ${(await run('cat', ['/proc/loadavg'])).stdout.trim()})`);
  report(all);
} finally {
  if (process.env.KEEP === '1') console.log(`kept ${subjects.map((s) => s.name).join(', ')}`);
  else for (const s of subjects) await remove(s);
}
