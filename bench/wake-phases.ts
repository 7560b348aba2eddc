/**
 * Where a wake's time goes, phase by phase, on the sandbox engine directly (no service, no edge):
 * a sandbox container made with the service's create options (lifecycle/runtime/host-config.ts),
 * its entrypoint's trace (SVC_ENTRYPOINT_TRACE=1), a restartable busybox httpd inside publishing
 * 8080, then wakes from asleep (container stopped) and from deep sleep (container and network
 * removed, volumes kept). Per wake: the host engine's start call, the cgroup hand-over, each
 * entrypoint step, the inner dockerd's own log lines, and the first TCP connection the app accepts
 * (an attempt every 10 ms, none waiting for the one before).
 *
 *   npm run bench:wake-phases        (RUNS=5 per state, IMAGE=svc-sandbox:latest, DEBUG=1: dockerd --debug, VERBOSE=1: every log line)
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { loadConfig } from '../core/config.ts';
import { shortenArpRetries } from '../lifecycle/runtime/arp-retries.ts';
import { delegateCgroups } from '../lifecycle/runtime/cgroup-delegation.ts';
import { sandboxBridge } from '../lifecycle/runtime/docker-runtime.ts';
import { sandboxContainerOptions } from '../lifecycle/runtime/host-config.ts';
import { SANDBOX_CLI, sandboxDocker } from '../harness/sandbox-engine.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const IMAGE = process.env.IMAGE ?? 'svc-sandbox:latest';
const FIXTURE = 'svc-fixture-busybox:latest';
const run = promisify(execFile);
const docker = sandboxDocker();
const config = loadConfig();
const name = `svc-wphase-${randomBytes(3).toString('hex')}`;
const volumes = { root: `${name}-root`, home: `${name}-home`, srv: `${name}-srv`, opt: `${name}-opt`, docker: `${name}-docker` };
const labels = { 'svc.test': 'wake-phases' };
const transfer = await mkdtemp(join(tmpdir(), 'svc-wphase-'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const createNetwork = () => docker.createNetwork({ Name: name, Driver: 'bridge', Labels: labels,
  Options: { 'com.docker.network.bridge.name': sandboxBridge(name) } });
const createContainer = () => docker.createContainer({
  ...sandboxContainerOptions({
    name, image: IMAGE, network: name, volumes, transferFolder: transfer, labels, runtime: config.sandboxRuntime,
    env: ['SVC_ENTRYPOINT_TRACE=1', 'SVC_DNS=1.1.1.1', 'SVC_SSH_AUTHORIZED_KEYS='],
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
  }),
  Cmd: process.env.DEBUG === '1' ? ['--debug'] : [],
});

/** start() as the runtime does it: the bridge's ARP retries, the container, then its own cgroups. */
async function start(c: Docker.Container): Promise<{ started: number; delegated: number; ip: string; pid: number }> {
  await shortenArpRetries(sandboxBridge(name));
  await c.start();
  const started = Date.now();
  const info = await c.inspect();
  await delegateCgroups(info.State.Pid);
  return { started, delegated: Date.now(), ip: info.NetworkSettings.Networks[name]!.IPAddress, pid: info.State.Pid };
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

/** The container's log lines since `since` (ms), each with the engine's timestamp in ms. */
async function logLines(since: number): Promise<Array<{ at: number; line: string }>> {
  const { stdout, stderr } = await run('docker', [...SANDBOX_CLI, 'logs', '--timestamps', '--since', (since / 1000 - 1).toFixed(3), name], { maxBuffer: 64 << 20 });
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

let lastIp = '';
async function wake(kind: 'asleep' | 'deep'): Promise<Record<string, number>> {
  const c = docker.getContainer(name);
  await c.stop();
  if (kind === 'deep') {
    await c.remove();
    await docker.getNetwork(name).remove();
  }
  if (process.env.VERBOSE === '1' && lastIp) console.log(`before the wake, the host's neighbour entry: ${(await run('ip', ['-s', 'neigh', 'show', lastIp])).stdout.trim()}`);
  const t0 = Date.now();
  const marks: Record<string, number> = {};
  if (kind === 'deep') {
    await createNetwork();
    marks['network created'] = Date.now() - t0;
    await createContainer();
    marks['container created'] = Date.now() - t0;
  }
  const s = await start(c);
  lastIp = s.ip;
  marks['start returned'] = s.started - t0;
  marks['cgroups handed over'] = s.delegated - t0;
  // VERBOSE: the address lookups (ARP) in the sandbox's network namespace too, with their times
  const neigh = process.env.VERBOSE === '1' ? spawn('nsenter', ['-t', String(s.pid), '-n', 'ip', '-ts', 'monitor', 'neigh'], { stdio: ['ignore', 'pipe', 'inherit'] }) : undefined;
  const hostNeigh = process.env.VERBOSE === '1' ? spawn('ip', ['-ts', 'monitor', 'neigh'], { stdio: ['ignore', 'pipe', 'inherit'] }) : undefined;
  let neighLog = '';
  neigh?.stdout.on('data', (b: Buffer) => { neighLog += b.toString(); });
  hostNeigh?.stdout.on('data', (b: Buffer) => { neighLog += b.toString().split('\n').filter((l) => l.includes(s.ip)).map((l) => `${l.replace('] ', '] host: ')}\n`).join(''); });
  marks['app accepts'] = (await acceptedAt(s.ip)) - t0;
  await new Promise((r) => setTimeout(r, 100));
  neigh?.kill();
  hostNeigh?.kill();
  if (process.env.VERBOSE === '1') {
    const { stdout } = await run('nsenter', ['-t', String(s.pid), '-n', 'sh', '-c', 'grep -H . /proc/sys/net/ipv4/neigh/*/retrans_time_ms /proc/sys/net/ipv4/neigh/*/mcast_solicit']);
    console.log(stdout);
  }
  const lines = await logLines(t0);
  // every step the entrypoint traces ("[svc-entrypoint] <time> <step>"), then dockerd's
  for (const l of lines) {
    const step = /^\[svc-entrypoint\] \S+ (.+)$/.exec(l.line)?.[1];
    if (step) marks[`entrypoint: ${step}`] ??= l.at - t0;
  }
  for (const [label, re] of DOCKERD_MARKS) {
    const hit = lines.find((l) => re.test(l.line));
    if (hit) marks[label] = hit.at - t0;
  }
  if (process.env.VERBOSE === '1') {
    for (const l of neighLog.split('\n').filter(Boolean)) {
      const at = /^\[([^\]]+)\]/.exec(l)?.[1];
      if (at) lines.push({ at: Date.parse(`${at}Z`), line: `[neigh] ${l.slice(at.length + 3)}` });
    }
    lines.sort((a, b) => a.at - b.at);
    for (const l of lines) console.log(`${String(l.at - t0).padStart(6)} ${l.line.slice(0, 160)}`);
  }
  return marks;
}

try {
  await createNetwork();
  for (const v of Object.values(volumes)) await docker.createVolume({ Name: v, Labels: labels });
  const c = await createContainer();
  const first = await start(c);
  for (let i = 0; ; i++) {
    if (i > 600) throw new Error('the inner engine did not answer');
    if ((await run('docker', [...SANDBOX_CLI, 'exec', name, 'docker', 'version']).then(() => true, () => false))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await run('sh', ['-c', `docker save ${FIXTURE} | docker ${SANDBOX_CLI.join(' ')} exec -i ${name} docker load -q`]);
  // the trap: the app stops at once on a sleep instead of after dockerd's 10 s
  await run('docker', [...SANDBOX_CLI, 'exec', name, 'docker', 'run', '-d', '--name', 'web', '--restart', 'unless-stopped', '-p', '8080:8080',
    FIXTURE, 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait']);
  await acceptedAt(first.ip);

  const all: Record<string, Array<Record<string, number>>> = { asleep: [], deep: [] };
  for (const kind of ['asleep', 'deep'] as const) {
    for (let i = 0; i < RUNS; i++) {
      const m = await wake(kind);
      all[kind]!.push(m);
      console.log(`${kind} ${i + 1}: ${Object.entries(m).sort((a, b) => a[1] - b[1]).map(([k, v]) => `${k} ${v}`).join(', ')}`);
    }
  }
  console.log(`\nmedians (ms after the wake began; load ${(await run('cat', ['/proc/loadavg'])).stdout.trim()})`);
  const keys = [...new Set(Object.values(all).flatMap((ms) => ms.flatMap((m) => Object.keys(m))))];
  const rows = keys.map((k) => ({ k, a: all.asleep!.map((m) => m[k]).filter((x) => x !== undefined) as number[], d: all.deep!.map((m) => m[k]).filter((x) => x !== undefined) as number[] }));
  rows.sort((x, y) => (x.a.length ? median(x.a) : 1e9) - (y.a.length ? median(y.a) : 1e9));
  console.log('| mark | asleep | deep sleep |\n|---|---|---|');
  for (const r of rows) console.log(`| ${r.k} | ${r.a.length ? median(r.a) : '—'} | ${r.d.length ? median(r.d) : '—'} |`);
} finally {
  if (process.env.KEEP === '1') { console.log(`kept ${name}`); process.exit(0); }
  await docker.getContainer(name).remove({ force: true }).catch(() => {});
  await docker.getNetwork(name).remove().catch(() => {});
  for (const v of Object.values(volumes)) await docker.getVolume(v).remove().catch(() => {});
  await rm(transfer, { recursive: true, force: true });
}
