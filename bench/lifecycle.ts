/**
 * Lifecycle figures (issue 2): create, wake from asleep, wake from deep sleep — each measured
 * from the call until the sandbox's own engine answers `docker ps` — and the memory of one idle
 * running sandbox. Baseline, measured in the same run: starting a plain busybox container on the
 * host engine (the floor any wake pays). Medians over RUNS runs.
 *
 *   npm run bench:lifecycle            (RUNS=5 by default)
 */
import Docker from 'dockerode';
import { innerEngine } from '../lifecycle/runtime/inner-engine.ts';
import { startTestService } from '../test/helpers/service.ts';

const RUNS = Number(process.env.RUNS ?? 5);
const docker = new Docker();

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (n: number) => `${n.toFixed(0)} ms`;

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const t = await startTestService();
try {
  const owner = await t.user('bench');
  const user = (await t.service.store.users.get(owner.id))!;
  const { lifecycle, store } = t.service;
  const enginePs = async (name: string) => {
    const state = await lifecycle.status(name);
    const record = (await store.sandboxes.get(name))!;
    await innerEngine(name, state.address!, record.certs!).listContainers();
  };

  // Baseline: a plain container start on the host engine.
  const plain = await docker.createContainer({ Image: 'svc-fixture-busybox:latest', Cmd: ['sleep', '100000'], Labels: { 'svc.instance': t.config.redisPrefix } });
  const baseline: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    baseline.push(await time(() => plain.start()));
    await plain.stop({ t: 0 });
  }

  const create: number[] = [];
  const names: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const name = `bench-${i}-${t.config.redisPrefix}`;
    create.push(await time(async () => {
      const view = await lifecycle.create(user, { name, idle_timeout: '1h' });
      await enginePs(view.name);
      names.push(view.name);
    }));
  }
  const name = names[0]!;
  for (const other of names.slice(1)) await lifecycle.archive(other);

  // Memory of one idle running sandbox, after it settles.
  await new Promise((r) => setTimeout(r, 5_000));
  const stats = await docker.getContainer(name).stats({ stream: false });
  const memory = (stats.memory_stats.usage - (stats.memory_stats.stats?.total_inactive_file ?? stats.memory_stats.stats?.inactive_file ?? 0)) / 1024 / 1024;

  const wake: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await lifecycle.sleep(name, 'bench');
    wake.push(await time(async () => { await lifecycle.start(name); await enginePs(name); }));
  }

  const deep: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await lifecycle.sleep(name, 'bench');
    await t.service.lifecycle['deps'].runtime.takeDown(name);
    deep.push(await time(async () => { await lifecycle.start(name); await enginePs(name); }));
  }

  const base = median(baseline);
  const rows: Array<[string, number, number]> = [
    ['create (until engine answers docker ps)', median(create), 10_000],
    ['wake from asleep', median(wake), 1_500],
    ['wake from deep sleep', median(deep), 5_000],
  ];
  console.log(`\nlifecycle bench, ${RUNS} runs each (medians)`);
  console.log(`baseline: plain busybox container start on the host engine: ${ms(base)}`);
  for (const [label, value, target] of rows) {
    console.log(`${label.padEnd(42)} ${ms(value).padStart(9)}  = ${(value / base).toFixed(1)}x baseline; target < ${ms(target)}: ${value < target ? 'met' : 'MISSED'}`);
  }
  console.log(`${'memory of one idle running sandbox'.padEnd(42)} ${memory.toFixed(1).padStart(6)} MiB`);
  console.log(`all runs (ms): create ${create.map(Math.round)}, wake ${wake.map(Math.round)}, deep ${deep.map(Math.round)}, baseline ${baseline.map(Math.round)}`);
} finally {
  await t.close();
}
