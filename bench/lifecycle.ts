/**
 * Lifecycle figures: create, wake from asleep and wake from deep sleep with 0, 2 and 5 restartable inner
 * containers — each measured from the call until the sandbox's own engine answers `docker ps` with every
 * restartable container running — plus the memory of one idle running sandbox and the image size.
 *
 * Two set-ups side by side, runs alternating between them so a busy moment of the machine hits both
 * alike. COMPARE=image (default): the image before Debian 13 (svc-sandbox:bookworm, docker.io 20.10)
 * against today's (svc-sandbox:latest), both isolated. COMPARE=isolation: today's image unisolated on
 * the main engine against the user-namespaced sandbox engine. Baseline, measured in the same run:
 * starting a plain busybox container on the host engine (the floor any wake pays). Medians over RUNS.
 *
 *   npm run bench:lifecycle            (RUNS=5 by default)
 *   COMPARE=isolation npm run bench:lifecycle
 */
import Docker from 'dockerode';
import type { Config } from '../core/config.ts';
import { innerEngine } from '../lifecycle/runtime/inner-engine.ts';
import { sandboxDocker } from '../harness/sandbox-engine.ts';
import { startTestService, type TestService } from '../harness/service.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const SETUPS: Array<{ label: string; config: Partial<Config> }> = process.env.COMPARE === 'isolation'
  ? [
      { label: 'unisolated (main engine)', config: { sandboxRuntime: 'unisolated' } },
      { label: 'userns (sandbox engine)', config: { sandboxRuntime: 'userns' } },
    ]
  : [
      { label: 'svc-sandbox:bookworm', config: { sandboxImage: 'svc-sandbox:bookworm' } },
      { label: 'svc-sandbox:latest', config: { sandboxImage: 'svc-sandbox:latest' } },
    ];
const CONTAINER_COUNTS = [0, 2, 5];
const FIXTURE = 'svc-fixture-busybox:latest';
const docker = new Docker();

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (n: number) => `${n.toFixed(0)} ms`;

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** One service per image, with a sandbox per container count. */
interface Lane {
  label: string;
  /** the engine that runs this lane's sandboxes */
  engine: Docker;
  t: TestService;
  create: number[];
  wake: Map<number, number[]>;
  deep: Map<number, number[]>;
  sandboxes: Map<number, string>;
  memory: number;
}

async function engineOf(lane: Lane, name: string): Promise<Docker> {
  const state = await lane.t.service.lifecycle.status(name);
  const record = (await lane.t.service.store.sandboxes.get(name))!;
  return innerEngine(name, state.address!, record.certs!);
}

/** Until the inner engine answers `docker ps` and shows `count` running containers. */
async function ready(lane: Lane, name: string, count: number): Promise<void> {
  const engine = await engineOf(lane, name);
  for (;;) {
    const running = await engine.listContainers().catch(() => null);
    if (running && running.length >= count) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function openLane(label: string, config: Partial<Config>): Promise<Lane> {
  const t = await startTestService(config);
  const engine = t.config.sandboxRuntime === 'unisolated' ? docker : sandboxDocker();
  return { label, engine, t, create: [], wake: new Map(), deep: new Map(), sandboxes: new Map(), memory: 0 };
}

/** A sandbox with `count` restartable containers, each publishing a port (as apps do). */
async function prepare(lane: Lane, user: Awaited<ReturnType<TestService['service']['store']['users']['get']>>, count: number): Promise<void> {
  const view = await lane.t.service.lifecycle.create(user!, { name: `bench${count}-${lane.t.config.redisPrefix}`, idle_timeout: '1h' });
  await ready(lane, view.name, 0);
  const engine = await engineOf(lane, view.name);
  if (count > 0) {
    await new Promise<void>((done, fail) => {
      docker.getImage(FIXTURE).get((err, tar) => {
        if (err || !tar) return fail(err);
        engine.loadImage(tar).then((res) => { res.resume(); res.on('end', () => done()); res.on('error', fail); }, fail);
      });
    });
  }
  for (let i = 0; i < count; i++) {
    const c = await engine.createContainer({
      Image: FIXTURE, Cmd: ['httpd', '-f', '-p', '8080', '-h', '/'], name: `app${i}`,
      ExposedPorts: { '8080/tcp': {} },
      HostConfig: { RestartPolicy: { Name: 'unless-stopped' }, PortBindings: { '8080/tcp': [{ HostPort: String(8000 + i) }] } },
    });
    await c.start();
  }
  lane.sandboxes.set(count, view.name);
  lane.wake.set(count, []);
  lane.deep.set(count, []);
}

const lanes: Lane[] = [];
try {
  for (const setup of SETUPS) lanes.push(await openLane(setup.label, setup.config));

  // Baseline: a plain container start on the host engine.
  const plain = await docker.createContainer({ Image: FIXTURE, Cmd: ['sleep', '100000'], Labels: { 'svc.instance': lanes[0]!.t.config.redisPrefix } });
  const baseline: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    baseline.push(await time(() => plain.start()));
    await plain.stop({ t: 0 });
  }

  const users = new Map<Lane, Awaited<ReturnType<TestService['service']['store']['users']['get']>>>();
  for (const lane of lanes) {
    const owner = await lane.t.user('bench');
    users.set(lane, await lane.t.service.store.users.get(owner.id));
  }

  for (let i = 0; i < RUNS; i++) {
    for (const lane of lanes) {
      const name = `create${i}-${lane.t.config.redisPrefix}`;
      lane.create.push(await time(async () => {
        const view = await lane.t.service.lifecycle.create(users.get(lane)!, { name, idle_timeout: '1h' });
        await ready(lane, view.name, 0);
      }));
      await lane.t.service.lifecycle.archive(`svc-${name}`);
    }
  }

  for (const lane of lanes) for (const n of CONTAINER_COUNTS) await prepare(lane, users.get(lane), n);

  // Memory of one idle running sandbox (the empty one), after it settles.
  await new Promise((r) => setTimeout(r, 5_000));
  for (const lane of lanes) {
    const stats = await lane.engine.getContainer(lane.sandboxes.get(0)!).stats({ stream: false });
    lane.memory = (stats.memory_stats.usage - (stats.memory_stats.stats?.total_inactive_file ?? stats.memory_stats.stats?.inactive_file ?? 0)) / 1024 / 1024;
  }

  for (let i = 0; i < RUNS; i++) {
    for (const n of CONTAINER_COUNTS) {
      for (const lane of lanes) {
        const name = lane.sandboxes.get(n)!;
        const { lifecycle } = lane.t.service;
        await lifecycle.sleep(name, 'bench');
        lane.wake.get(n)!.push(await time(async () => { await lifecycle.start(name); await ready(lane, name, n); }));
        await lifecycle.sleep(name, 'bench');
        await lane.t.service.lifecycle['deps'].runtime.takeDown(name);
        lane.deep.get(n)!.push(await time(async () => { await lifecycle.start(name); await ready(lane, name, n); }));
      }
    }
  }

  const base = median(baseline);
  const [old, now] = lanes;
  console.log(`\nlifecycle bench, ${RUNS} runs each (medians), runs alternating between images`);
  console.log(`baseline: plain busybox container start on the host engine: ${ms(base)}`);
  const size = async (image: string) => `${((await docker.getImage(image).inspect()).Size / 1e6).toFixed(0)} MB`;
  const row = (label: string, a: number[], b?: number[]) => {
    const ma = median(a);
    const mb = b ? median(b) : undefined;
    console.log(`${label.padEnd(34)} ${ms(ma).padStart(9)} (${(ma / base).toFixed(1)}x)` +
      (mb !== undefined ? ` → ${ms(mb).padStart(9)} (${(mb / base).toFixed(1)}x)   new/old ${(mb / ma).toFixed(2)}` : ''));
  };
  console.log(`${'set-up'.padEnd(34)} ${old!.label} → ${now?.label ?? ''}`);
  row('create', old!.create, now?.create);
  for (const n of CONTAINER_COUNTS) row(`wake from asleep, ${n} containers`, old!.wake.get(n)!, now?.wake.get(n));
  for (const n of CONTAINER_COUNTS) row(`wake from deep sleep, ${n} containers`, old!.deep.get(n)!, now?.deep.get(n));
  for (const lane of lanes) {
    const perContainer = (m: Map<number, number[]>) => ((median(m.get(5)!) - median(m.get(0)!)) / 5).toFixed(0);
    console.log(`${lane.label}: per restartable container ${perContainer(lane.wake)} ms asleep, ${perContainer(lane.deep)} ms deep; idle memory ${lane.memory.toFixed(1)} MiB; image ${await size(lane.t.config.sandboxImage)}`);
  }
  console.log(`all runs (ms): baseline ${baseline.map(Math.round)}`);
  for (const lane of lanes) {
    console.log(`  ${lane.label}: create ${lane.create.map(Math.round)}; ` +
      CONTAINER_COUNTS.map((n) => `wake${n} ${lane.wake.get(n)!.map(Math.round)}; deep${n} ${lane.deep.get(n)!.map(Math.round)}`).join('; '));
  }
} finally {
  for (const lane of lanes) await lane.t.close();
}
