/**
 * Wake and sleep of one sandbox on Incus against the Docker runtime, side by side in one run (issue
 * 34, docs/incus.md): the same image (svc-sandbox:latest; in Incus the alias svc-sandbox that
 * scripts/incus-host.sh imports), the same restartable busybox httpd inside publishing 8080. A wake
 * is the start call until the app accepts its first connection (an attempt every 10 ms, none waiting
 * for the one before), from the sandbox's address on this machine; a sleep is the stop call until it
 * returns. The two runtimes alternate, RUNS wakes each; medians and the ratio Incus / Docker.
 * Then the same through the service (throughService below): a service on each runtime, the API's
 * start until it answers, and until the app's page comes through the edge.
 *
 *   NODE_ENV=test npx tsx bench/incus-wake.ts        (RUNS=5; needs SVC_RUNTIME=incus npm run setup)
 *   PARTS=engines or PARTS=service                   one of the two parts only
 *
 * Docker side as bench/wake-phases.ts makes it: the service's create options, the bridge's ARP
 * retries, then the cgroup hand-over. Incus side: profiles default + svc-sandbox, a routed NIC at
 * SVC_INCUS_BENCH_ADDRESS (100.73.255.1), over the REST API on /var/lib/incus/unix.socket.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadConfig } from '../core/config.ts';
import { shortenArpRetries } from '../lifecycle/runtime/arp-retries.ts';
import { delegateCgroups } from '../lifecycle/runtime/cgroup-delegation.ts';
import { sandboxBridge } from '../lifecycle/runtime/docker-runtime.ts';
import { sandboxContainerOptions } from '../lifecycle/runtime/host-config.ts';
import { IncusClient } from '../lifecycle/runtime/incus/incus-client.ts';
import { SANDBOX_CLI, sandboxDocker } from '../harness/sandbox-engine.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../harness/edge-sandbox.ts';
import { answerOf, startTestService, type TestService } from '../harness/service.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const IMAGE = 'svc-sandbox:latest';
const FIXTURE = 'svc-fixture-busybox:latest';
const FIXTURE_DIR = join(process.cwd(), 'fixtures/busybox');
const INCUS_ADDRESS = process.env.SVC_INCUS_BENCH_ADDRESS ?? '100.73.255.1';
const APP = 'mkdir -p /www && echo hello-app > /www/index.html && trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait';
const run = promisify(execFile);
const docker = sandboxDocker();
const incus = new IncusClient({ socketPath: '/var/lib/incus/unix.socket' });
const config = loadConfig();
const name = `svc-iwake-${randomBytes(3).toString('hex')}`;
const volumes = { root: `${name}-root`, home: `${name}-home`, srv: `${name}-srv`, opt: `${name}-opt`, docker: `${name}-docker` };
const labels = { 'svc.test': 'incus-wake' };
const transfer = await mkdtemp(join(tmpdir(), 'svc-iwake-'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const accepts = (host: string) => new Promise<boolean>((resolve) => {
  const socket = net.connect({ host, port: 8080, timeout: 2_000 });
  const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
  socket.once('connect', () => done(true));
  socket.once('error', () => done(false));
  socket.once('timeout', () => done(false));
});
async function acceptedAt(ip: string, deadline = Date.now() + 60_000): Promise<number> {
  let at = 0;
  while (!at) {
    if (Date.now() > deadline) throw new Error(`the app at ${ip}:8080 did not answer within 60 s`);
    void accepts(ip).then((ok) => { if (ok && !at) at = Date.now(); });
    await sleep(10);
  }
  return at;
}
const sh = (cmd: string) => run('sh', ['-c', cmd], { maxBuffer: 16 << 20 });

// --- the Docker runtime's sandbox -------------------------------------------------------------------
const container = docker.getContainer(name);
async function dockerStart(): Promise<string> {
  await shortenArpRetries(sandboxBridge(name));
  await container.start();
  const info = await container.inspect();
  await delegateCgroups(info.State.Pid);
  return info.NetworkSettings.Networks[name]!.IPAddress;
}
async function dockerMake(): Promise<string> {
  await docker.createNetwork({ Name: name, Driver: 'bridge', Labels: labels, Options: { 'com.docker.network.bridge.name': sandboxBridge(name) } });
  for (const v of Object.values(volumes)) await docker.createVolume({ Name: v, Labels: labels });
  await docker.createContainer(sandboxContainerOptions({
    name, image: IMAGE, network: name, volumes, transferFolder: transfer, labels, runtime: config.sandboxRuntime,
    env: ['SVC_DNS=1.1.1.1', 'SVC_SSH_AUTHORIZED_KEYS='],
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
  }));
  const ip = await dockerStart();
  const inner = `docker ${SANDBOX_CLI.join(' ')} exec -i ${name}`;
  for (let i = 0; !(await sh(`${inner} docker version`).then(() => true, () => false)); i++) {
    if (i > 300) throw new Error('the inner engine of the Docker sandbox did not answer');
    await sleep(100);
  }
  await sh(`docker save ${FIXTURE} | ${inner} docker load -q`);
  await run('docker', [...SANDBOX_CLI, 'exec', name, 'docker', 'run', '-d', '--name', 'web', '--restart', 'unless-stopped', '-p', '8080:8080', FIXTURE, 'sh', '-c', APP]);
  await acceptedAt(ip);
  return ip;
}

// --- the Incus sandbox ------------------------------------------------------------------------------
const state = (action: 'start' | 'stop') => incus.act('PUT', `/1.0/instances/${name}/state`, { action, timeout: 30 });
async function incusMake(): Promise<void> {
  await incus.act('POST', '/1.0/instances', {
    name, type: 'container', source: { type: 'image', alias: 'svc-sandbox' }, profiles: ['default', 'svc-sandbox'],
    config: { 'environment.SVC_DNS': '1.1.1.1', 'environment.SVC_SSH_AUTHORIZED_KEYS': '' },
    devices: { eth0: { type: 'nic', nictype: 'routed', 'ipv4.address': INCUS_ADDRESS } },
  });
  await state('start');
  for (let i = 0; !(await sh(`incus exec ${name} -- docker version`).then(() => true, () => false)); i++) {
    if (i > 300) throw new Error('the inner engine of the Incus sandbox did not answer');
    await sleep(100);
  }
  await sh(`docker save ${FIXTURE} | incus exec ${name} -- docker load -q`);
  await run('incus', ['exec', name, '--', 'docker', 'run', '-d', '--name', 'web', '--restart', 'unless-stopped', '-p', '8080:8080', FIXTURE, 'sh', '-c', APP]);
  await acceptedAt(INCUS_ADDRESS);
}

type Kind = 'docker' | 'incus';
const results: Record<Kind, { wake: number[]; sleep: number[] }> = { docker: { wake: [], sleep: [] }, incus: { wake: [], sleep: [] } };
async function cycle(kind: Kind, ip: string): Promise<void> {
  const s0 = Date.now();
  if (kind === 'docker') await container.stop(); else await state('stop');
  results[kind].sleep.push(Date.now() - s0);
  await sleep(500);
  const t0 = Date.now();
  const address = kind === 'docker' ? await dockerStart() : (await state('start'), ip);
  results[kind].wake.push((await acceptedAt(address)) - t0);
}

/** The two runtimes' engines, side by side (no service). */
async function engines(): Promise<void> {
  try {
    const made0 = Date.now();
    const dockerIp = await dockerMake();
    const made1 = Date.now();
    await incusMake();
    const made2 = Date.now();
    console.log(`made (image to app answering, with the fixture load): docker ${made1 - made0} ms, incus ${made2 - made1} ms`);
    for (let i = 0; i < RUNS; i++) {
      await cycle('docker', dockerIp);
      await cycle('incus', INCUS_ADDRESS);
      console.log(`run ${i + 1}: docker wake ${results.docker.wake.at(-1)} ms, sleep ${results.docker.sleep.at(-1)} ms; incus wake ${results.incus.wake.at(-1)} ms, sleep ${results.incus.sleep.at(-1)} ms`);
    }
    const load = (await run('cat', ['/proc/loadavg'])).stdout.trim();
    console.log(`\nmedians of ${RUNS} (load ${load}; the machine is shared)`);
    console.log('| | Docker runtime | Incus | Incus / Docker |\n|---|---|---|---|');
    for (const k of ['wake', 'sleep'] as const) {
      const d = median(results.docker[k]);
      const n = median(results.incus[k]);
      console.log(`| ${k} (ms) | ${d} | ${n} | ${(n / d).toFixed(2)} |`);
    }
  } finally {
    await container.remove({ force: true }).catch(() => {});
    await docker.getNetwork(name).remove().catch(() => {});
    for (const v of Object.values(volumes)) await docker.getVolume(v).remove().catch(() => {});
    await incus.act('DELETE', `/1.0/instances/${name}`).catch(async () => {
      await incus.act('PUT', `/1.0/instances/${name}/state`, { action: 'stop', force: true }).catch(() => {});
      await incus.act('DELETE', `/1.0/instances/${name}`).catch(() => {});
    });
    await incus.close();
    await rm(transfer, { recursive: true, force: true });
  }
}

// --- through the service: the API's start, and the app on screen through the edge --------------------
/**
 * One service per runtime (as startTestService makes them: its own data, Redis prefix, HAProxy), one
 * sandbox each with the fixture app (restart unless-stopped) at its HTTPS address. A cycle: the
 * lifecycle's sleep, then POST /api/sandboxes/:name/start until it answers (the sandbox runs and its
 * engine answers), and until curl through the edge gets the app's page.
 */
async function throughService(): Promise<void> {
  const kinds = ['docker', 'incus'] as const;
  const figures = { docker: { start: [] as number[], app: [] as number[] }, incus: { start: [] as number[], app: [] as number[] } };
  const services: Partial<Record<(typeof kinds)[number], { t: TestService; sb: EdgeSandbox }>> = {};
  try {
    for (const kind of kinds) {
      const incusConfig = kind === 'incus' ? loadConfig({ ...process.env, SVC_RUNTIME: 'incus' }) : undefined;
      const t = await startTestService(incusConfig ? { runtime: 'incus', incus: incusConfig.incus } : {});
      const sb = await openEdgeSandbox(t, `bw${kind[0]}`);
      services[kind] = { t, sb };
      await sb.cli.docker(['build', '-q', '-t', 'bench-app:1', FIXTURE_DIR], { timeoutMs: 300_000 });
      await sb.cli.docker(['run', '-d', '--name', 'web', '--restart', 'unless-stopped', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'bench-app:1', 'sh', '-c', APP]);
      await onScreen(sb, Date.now() + 60_000);
    }
    for (let i = 0; i < RUNS; i++) {
      for (const kind of kinds) {
        const { t, sb } = services[kind]!;
        await t.service.lifecycle.sleep(sb.name, 'bench');
        await sleep(500);
        const t0 = Date.now();
        const res = await t.api('POST', `/api/sandboxes/${sb.name}/start`, sb.user.token);
        if (res.status !== 200) throw new Error(`start of the ${kind} sandbox: ${answerOf(res)}`);
        figures[kind].start.push(Date.now() - t0);
        figures[kind].app.push((await onScreen(sb, Date.now() + 60_000)) - t0);
      }
      console.log(`run ${i + 1} (service): docker start ${figures.docker.start.at(-1)} ms, app ${figures.docker.app.at(-1)} ms; incus start ${figures.incus.start.at(-1)} ms, app ${figures.incus.app.at(-1)} ms`);
    }
    const load = (await run('cat', ['/proc/loadavg'])).stdout.trim();
    console.log(`\nthrough the service, medians of ${RUNS} (load ${load}; the machine is shared)`);
    console.log('| | Docker runtime | Incus | Incus / Docker |\n|---|---|---|---|');
    for (const k of ['start', 'app'] as const) {
      const d = median(figures.docker[k]);
      const n = median(figures.incus[k]);
      console.log(`| ${k === 'start' ? 'POST start → answered (running)' : 'POST start → app on screen'} (ms) | ${d} | ${n} | ${(n / d).toFixed(2)} |`);
    }
  } finally {
    for (const kind of kinds) {
      const s = services[kind];
      if (!s) continue;
      await s.t.api('DELETE', `/api/sandboxes/${s.sb.name}`, s.sb.user.token).catch(() => undefined);
      s.sb.close();
      await s.t.close();
    }
  }
}

/** When curl through the edge first got the app's page (a try every 20 ms, each waiting for the one before). */
async function onScreen(sb: EdgeSandbox, deadline: number): Promise<number> {
  for (;;) {
    if (/hello-app/.test(await sb.curl(`${sb.name}-web`).catch(() => ''))) return Date.now();
    if (Date.now() > deadline) throw new Error(`the app of ${sb.name} did not come on screen within 60 s`);
    await sleep(20);
  }
}

const PARTS = new Set((process.env.PARTS ?? 'engines,service').split(','));
if (PARTS.has('engines')) await engines();
if (PARTS.has('service')) await throughService();
