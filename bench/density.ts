/**
 * Density (issue 20 item 6): TOTAL sandboxes on this machine's sandbox engine, ASLEEP of them asleep and
 * the rest running idle, made through the API of one service; then, while they all exist, the API's
 * latency (GET /api/sandboxes of their owner, GET /api/sandboxes/:name, a create and its DELETE),
 * wakes of asleep sandboxes through the API (POST /start: it answers once the sandbox's own engine
 * answers) and the listing of running sandboxes a wake's admission makes under its lease, p50 and p99. Baseline, from the same run: the same measurements with BASELINE sandboxes
 * (the same share asleep) before the rest are made. Memory: `free -m` before and with them all, and
 * the RSS of each running sandbox (its cgroup's total_rss: dockerd, containerd and all inside).
 *
 *   npm run bench:density                      (TOTAL=500 ASLEEP=400 BASELINE=5 CONCURRENCY=4)
 *   npm run bench:density -- --count 50        (TOTAL=50, 40 asleep: a quick run, about 2 minutes)
 *
 * It ends with the ratios of the figures with TOTAL to the baseline's, from the same run: on this
 * shared machine the load moves both, and a ratio shows what the count itself costs. The bench reads
 * the answers in the service's own process (as `fetch` and JSON.parse), so its lists include that.
 *
 * The bench's own service lifts the quotas and the overcommit guard that would stop one user at 20
 * sandboxes, 5 running and 1.5× the memory (SVC_QUOTA_MAX_SANDBOXES, SVC_QUOTA_MAX_RUNNING,
 * SVC_OVERCOMMIT_MEMORY, SVC_OVERCOMMIT_CPUS, SVC_WAKES_PER_HOUR). Each asleep sandbox is put to sleep
 * right after its create (lifecycle.sleep, what its idle timer does), so no more than CONCURRENCY extra
 * ones run at once. Everything is removed at the end, and at Ctrl-C.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { sandboxDocker } from '../harness/sandbox-engine.ts';
import { answerOf, removeInstance, startTestService, type TestService } from '../harness/service.ts';
import { LABEL_INSTANCE } from '../lifecycle/runtime/docker-runtime.ts';

const countFlag = process.argv.indexOf('--count');
const TOTAL = Number(countFlag > 0 ? process.argv[countFlag + 1] : process.env.TOTAL ?? 500);
const ASLEEP = Number(process.env.ASLEEP ?? Math.round(TOTAL * 0.8));
const BASELINE = Number(process.env.BASELINE ?? 5);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 4);
/** API requests per measured route and phase, and wakes per phase. */
const SAMPLES = Number(process.env.SAMPLES ?? 200);
const WAKES = Number(process.env.WAKES ?? 20);
const CREATES = Number(process.env.CREATES ?? 5);
/** How long the service's close may take before the bench removes its sandboxes itself (removal included: 100 s for 500). */
const CLOSE_WAIT_MS = 240_000;
if (![TOTAL, ASLEEP, BASELINE, CONCURRENCY, SAMPLES, WAKES, CREATES].every((n) => Number.isInteger(n) && n >= 0) || ASLEEP > TOTAL || BASELINE > TOTAL || CONCURRENCY < 1) {
  throw new Error('TOTAL (--count), ASLEEP ≤ TOTAL, BASELINE ≤ TOTAL, CONCURRENCY ≥ 1, SAMPLES, WAKES and CREATES take whole numbers');
}
/** Sandbox i sleeps when it is one of the ASLEEP of TOTAL, spread evenly (the baseline gets the same share). */
const sleeps = (i: number) => Math.floor((i + 1) * ASLEEP / TOTAL) > Math.floor(i * ASLEEP / TOTAL);

const quantile = (xs: number[], q: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? NaN;
};
const ms = (n: number) => (n >= 1000 ? `${(n / 1000).toFixed(2)} s` : `${n.toFixed(1)} ms`);
const figures = (xs: number[]) => `p50 ${ms(quantile(xs, 0.5))}, p99 ${ms(quantile(xs, 0.99))}, max ${ms(Math.max(...xs))} (${xs.length})`;
const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const usedMb = () => {
  const mem = execFileSync('free', ['-m'], { encoding: 'utf8' }).split('\n').find((l) => l.startsWith('Mem:'))!.split(/\s+/);
  return { used: Number(mem[2]), available: Number(mem[6]) };
};

let interrupted = false;
process.once('SIGINT', () => {
  interrupted = true;
  console.log('\n[density] interrupted: finishing the calls under way, then removing everything (Ctrl-C again leaves it behind)');
  process.once('SIGINT', () => process.exit(130));
});
const checkInterrupted = () => { if (interrupted) throw new Error('interrupted'); };

const memoryBefore = usedMb();
console.log(`[density] ${TOTAL} sandboxes (${ASLEEP} asleep, ${TOTAL - ASLEEP} running idle), baseline at ${BASELINE}, ${CONCURRENCY} creates at once; load ${loadavg()}; memory used ${memoryBefore.used} MB, available ${memoryBefore.available} MB`);
const service: TestService = await startTestService({
  quotaMaxSandboxes: TOTAL + CREATES + 10,
  quotaMaxRunning: TOTAL - ASLEEP + CONCURRENCY + 10,
  overcommitMemory: 100,
  overcommitCpus: 1000,
  wakesPerHour: 100_000,
});
const owner = await service.user('density');
const names: string[] = [];
const asleep: string[] = [];
const running: string[] = [];

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const began = performance.now();
  const value = await fn();
  return [performance.now() - began, value];
}

async function api(method: string, route: string, body?: unknown): Promise<{ status: number; body: any }> {
  return service.api(method, route, owner.token, body);
}

/** Makes sandbox i through the API and, if it is one to sleep, puts it to sleep at once. */
async function make(i: number): Promise<void> {
  // idle_timeout off: on a loaded machine making 500 takes longer than the default 30 minutes, and
  // the first running ones would fall asleep before they are measured
  const res = await api('POST', '/api/sandboxes', { idle_timeout: 'off' });
  if (res.status !== 201) throw new Error(`create: ${answerOf(res)}`);
  const name = res.body.name as string;
  names.push(name);
  if (sleeps(i)) {
    await service.service.lifecycle.sleep(name, 'bench');
    asleep.push(name);
  } else {
    running.push(name);
  }
}

/** Makes sandboxes from..to-1, CONCURRENCY at once, with a progress line every 10 s. */
async function makeMany(from: number, to: number): Promise<void> {
  let next = from;
  let done = 0;
  let failed = 0;
  const began = Date.now();
  const progress = () => {
    const mem = usedMb();
    console.log(`[density] made ${from + done}/${to} (${(done / ((Date.now() - began) / 1000)).toFixed(2)}/s), ${asleep.length} asleep, ${running.length} running, ${failed} failed; memory used ${mem.used} MB; load ${loadavg()}`);
  };
  const timer = setInterval(progress, 10_000);
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next < to && !interrupted) {
        const i = next++;
        try {
          await make(i);
          done++;
        } catch (err) {
          failed++;
          const cause = (err as Error & { cause?: Error }).cause;
          console.error(`[density] sandbox ${i}: ${(err as Error).message}${cause ? ` (${cause.message})` : ''}`);
          if (failed > Math.max(5, (to - from) / 20)) { interrupted = true; throw new Error('too many creates failed'); }
        }
      }
    }));
  } finally {
    clearInterval(timer);
  }
  progress();
  checkInterrupted();
  if (failed > 0) await recount();
}

/**
 * The sandboxes as the API lists them: a create whose answer was lost (the connection closed under
 * it) may have made one all the same; it counts as the API shows it.
 */
async function recount(): Promise<void> {
  const res = await api('GET', '/api/sandboxes');
  if (res.status !== 200) throw new Error(`list: ${answerOf(res)}`);
  const listed = res.body as Array<{ name: string; status: string }>;
  names.splice(0, names.length, ...listed.map((s) => s.name));
  asleep.splice(0, asleep.length, ...listed.filter((s) => s.status === 'exited').map((s) => s.name));
  running.splice(0, running.length, ...listed.filter((s) => s.status === 'running').map((s) => s.name));
  console.log(`[density] as the API lists them: ${names.length} sandboxes, ${asleep.length} asleep, ${running.length} running`);
}

/** The API's answers and wakes with the sandboxes made so far. */
async function measure(label: string): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = { list: [], one: [], create: [], delete: [], wake: [], running: [] };
  for (let i = 0; i < SAMPLES; i++) {
    checkInterrupted();
    const [took, res] = await timed(() => api('GET', '/api/sandboxes'));
    if (res.status !== 200 || res.body.length !== names.length) throw new Error(`list: ${answerOf(res)}, ${res.body.length} of ${names.length}`);
    const up = (res.body as Array<{ status: string }>).filter((s) => s.status === 'running').length;
    if (up !== running.length) throw new Error(`list: ${up} running, ${running.length} made to run`);
    out.list!.push(took);
  }
  for (let i = 0; i < SAMPLES; i++) {
    checkInterrupted();
    const [took, res] = await timed(() => api('GET', `/api/sandboxes/${names[i % names.length]}`));
    if (res.status !== 200) throw new Error(`get: ${answerOf(res)}`);
    out.one!.push(took);
  }
  for (let i = 0; i < CREATES; i++) {
    checkInterrupted();
    const [created, res] = await timed(() => api('POST', '/api/sandboxes', {}));
    if (res.status !== 201) throw new Error(`create: ${answerOf(res)}`);
    out.create!.push(created);
    const [deleted, gone] = await timed(() => api('DELETE', `/api/sandboxes/${res.body.name}`));
    if (gone.status !== 200) throw new Error(`delete: ${answerOf(gone)}`);
    out.delete!.push(deleted);
  }
  for (let i = 0; i < WAKES && asleep.length > 0; i++) {
    checkInterrupted();
    const name = asleep[i % asleep.length]!;
    const [took, res] = await timed(() => api('POST', `/api/sandboxes/${name}/start`));
    if (res.status !== 200 || res.body.status !== 'running') throw new Error(`wake: ${answerOf(res)}`);
    out.wake!.push(took);
    await service.service.lifecycle.sleep(name, 'bench');
  }
  // what a wake's admission check listed under its lease before issue 33 (accounts/admission.ts): the running sandboxes
  for (let i = 0; i < WAKES; i++) {
    checkInterrupted();
    const [took, listed] = await timed(() => service.service.runtime.list({ running: true }));
    if (listed.length !== running.length) throw new Error(`running list: ${listed.length}, ${running.length} made to run`);
    out.running!.push(took);
  }
  console.log(`[density] ${label}: load ${loadavg()}`);
  for (const [what, xs] of Object.entries(out)) if (xs.length) console.log(`  ${what.padEnd(7)} ${figures(xs)}`);
  return out;
}

/** RSS (MB) of every running sandbox container, from its memory cgroup (cgroup v1 or v2, cgroupfs driver). */
async function runningRss(): Promise<number[]> {
  const containers = await sandboxDocker().listContainers({ filters: { label: [`${LABEL_INSTANCE}=${service.config.redisPrefix}`], status: ['running'] } });
  return containers.flatMap((c) => {
    for (const [file, key] of [[`/sys/fs/cgroup/memory/svc-sandboxes/${c.Id}/memory.stat`, 'total_rss'], [`/sys/fs/cgroup/svc-sandboxes/${c.Id}/memory.stat`, 'anon']] as const) {
      const stat = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
      const line = stat.split('\n').find((l) => l.startsWith(`${key} `));
      if (line) return [Number(line.split(' ')[1]) / 2 ** 20];
    }
    return [];
  });
}

let failure: unknown;
try {
  await makeMany(0, BASELINE);
  const baseline = await measure(`baseline, ${names.length} sandboxes (${asleep.length} asleep, ${running.length} running)`);
  await makeMany(BASELINE, TOTAL);
  const memoryAll = usedMb();
  const rss = await runningRss();
  const full = await measure(`${names.length} sandboxes (${asleep.length} asleep, ${running.length} running)`);
  console.log(`[density] memory: used ${memoryBefore.used} MB before, ${memoryAll.used} MB with ${names.length} (${running.length} running), ${memoryAll.available} MB available;`
    + ` per running sandbox ${((memoryAll.used - memoryBefore.used) / Math.max(1, running.length)).toFixed(0)} MB of the machine's,`
    + ` RSS p50 ${quantile(rss, 0.5).toFixed(0)} MB, max ${Math.max(...rss).toFixed(0)} MB, total ${rss.reduce((a, b) => a + b, 0).toFixed(0)} MB (${rss.length} cgroups)`);
  const p99 = (xs: number[] | undefined) => quantile(xs ?? [], 0.99);
  console.log(`[density] goal (API p99 < 100 ms, wake < 1 s): list p99 ${ms(p99(full.list))} (baseline ${ms(p99(baseline.list))}), get p99 ${ms(p99(full.one))} (baseline ${ms(p99(baseline.one))}),`
    + ` wake p50 ${ms(quantile(full.wake!, 0.5))} / p99 ${ms(p99(full.wake))} (baseline ${ms(quantile(baseline.wake!, 0.5))} / ${ms(p99(baseline.wake))})`);
  const ratio = (what: string, q: number) => (quantile(full[what]!, q) / quantile(baseline[what]!, q)).toFixed(2);
  console.log(`[density] ratios, ${names.length} / ${BASELINE} sandboxes (p50, p99):`
    + ` ${['list', 'one', 'create', 'delete', 'wake', 'running'].filter((w) => full[w]!.length && baseline[w]!.length).map((w) => `${w} ${ratio(w, 0.5)}×, ${ratio(w, 0.99)}×`).join('; ')}`);
} catch (err) {
  failure = err;
} finally {
  const began = Date.now();
  console.log(`[density] removing ${names.length} sandboxes ...`);
  // seen once after a full run: the service's close did not return (its lifecycle worker, left behind
  // after its 5-s deadline, went on failing reconcile jobs): the sandboxes go all the same
  const closed = await Promise.race([service.close().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), CLOSE_WAIT_MS))]);
  if (!closed) {
    console.log(`[density] the service did not close within ${CLOSE_WAIT_MS / 1000} s: removing its sandboxes without it`);
    await removeInstance(service.config.redisPrefix);
  }
  console.log(`[density] removed in ${((Date.now() - began) / 1000).toFixed(0)} s; load ${loadavg()}`);
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
process.exit(0);
