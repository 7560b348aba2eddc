/**
 * What metrics cost (docs/operations.md#metrics): metrics on against metrics off (the baseline) in
 * one run, every lane in a process of its own (bench/support/ops-lane.ts).
 *
 * 1. Edge: three edge processes in front of the same keep-alive app (this process): one with the
 *    service's metrics (prom-client's default metrics included), one without, and a second one
 *    without as the control (the same code twice: how far this machine's noise goes). Each is
 *    loaded by a load generator process of its own (autocannon; they rotate by round), all at the
 *    same time: whatever else the machine runs meanwhile (on a shared 2-core machine, a lot) hits
 *    every lane alike, which runs one after the other do not guarantee. Per round: each edge's
 *    requests/s, its process's CPU time per request (the cost itself; requests/s also depends on
 *    how the scheduler shares the cores), and from V8's profiler the share of its busy time with
 *    metrics code on the stack, which the machine's load hardly moves.
 * 2. Wake: two whole services (SVC_METRICS on and off), one sandbox each, put to sleep and started
 *    again, one after the other, which goes first alternating by round; from the call until the
 *    sandbox's engine answers.
 *
 * Each figure: the median over ROUNDS of each lane with its range, and the median of the rounds'
 * own ratios (on/off, control/off) with their range. Target: within 3 %.
 *
 *   npm run bench:ops            (ROUNDS=9 SECONDS=5 CONNECTIONS=20 by default)
 */
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { LaneOp, LoadResult, ProfileShares } from './support/ops-lane.ts';

const ROUNDS = Number(process.env.ROUNDS ?? 9);
const SECONDS = Number(process.env.SECONDS ?? 5);
const CONNECTIONS = Number(process.env.CONNECTIONS ?? 20);
const APP_LABEL = 'svc-bench-web';
const HOST = `${APP_LABEL}.localhost`;
const BODY = 'hello world\n';
const LANE = path.join(import.meta.dirname, 'support', 'ops-lane.ts');

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const alternate = <T>(round: number, pair: readonly T[]) => (round % 2 ? [...pair].reverse() : [...pair]);

/** A lane process and its requests: one answer per request id. */
class Lane {
  private next = 1;
  private readonly waiting = new Map<number, { resolve: (answer: any) => void; reject: (err: Error) => void }>();
  readonly ready: Promise<any>;
  readonly child: ChildProcess;

  constructor(readonly label: string, args: string[]) {
    this.child = fork(LANE, args, { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.ready = new Promise((resolve, reject) => this.waiting.set(0, { resolve, reject }));
    this.child.on('message', (m: { id: number; error?: string }) => {
      const done = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (m.error) done?.reject(new Error(`${label}: ${m.error}`));
      else done?.resolve(m);
    });
    this.child.once('exit', (code) => {
      for (const { reject } of this.waiting.values()) reject(new Error(`${label}: exited with ${code}`));
    });
  }

  ask<T = any>(req: LaneOp): Promise<T & { cpuUs: number; opCpuUs: number }> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.child.send({ ...req, id });
    });
  }

  async close(): Promise<void> {
    if (this.child.exitCode === null && this.child.connected) await this.ask({ op: 'close' });
  }
}

interface EdgeFigures { rps: number[]; cpuUs: number[]; loadCpuUs: number[]; metricsShare: number[]; gcShare: number[] }
const figures = (): EdgeFigures => ({ rps: [], cpuUs: [], loadCpuUs: [], metricsShare: [], gcShare: [] });

const app = http.createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
  res.end(BODY);
});
await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
const appPort = (app.address() as AddressInfo).port;

const edge = (label: string, mode: 'on' | 'off') => ({ lane: new Lane(label, ['edge', String(appPort), APP_LABEL, mode]), port: 0, f: figures() });
// the second "off" edge is the control: the same code twice shows how far this machine's noise goes
const edges = [edge('edge, metrics off', 'off'), edge('edge, metrics on', 'on'), edge('edge, metrics off (control)', 'off')];
const loads = edges.map((_, i) => new Lane(`load generator ${i + 1}`, ['load']));
const services = [
  { lane: new Lane('service, metrics off', ['service', 'off']), ms: [] as number[] },
  { lane: new Lane('service, metrics on', ['service', 'on']), ms: [] as number[] },
];

/** Every edge under load at once, each from its own generator (they rotate by round), profiled meanwhile. */
async function edgeRound(round: number, record = true): Promise<void> {
  const generators = loads.map((_, i) => loads[(i + round) % loads.length]!);
  await Promise.all(edges.map((e) => e.lane.ask({ op: 'profile-start' })));
  const cpu0 = await Promise.all(edges.map((e) => e.lane.ask({ op: 'cpu' })));
  const results = await Promise.all(edges.map((e, i) =>
    generators[i]!.ask<LoadResult>({ op: 'load', port: e.port, host: HOST, seconds: SECONDS, connections: CONNECTIONS })));
  const cpu1 = await Promise.all(edges.map((e) => e.lane.ask({ op: 'cpu' })));
  const profiles = await Promise.all(edges.map((e) => e.lane.ask<ProfileShares>({ op: 'profile-stop' })));
  edges.forEach(({ lane, f }, i) => {
    const r = results[i]!;
    if (r.errors + r.non2xx > 0) throw new Error(`${lane.label}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
    if (!record) return;
    f.rps.push(r.requests / SECONDS);
    f.cpuUs.push((cpu1[i]!.cpuUs - cpu0[i]!.cpuUs) / r.requests);
    f.loadCpuUs.push(r.opCpuUs / r.requests);
    f.metricsShare.push(profiles[i]!.metrics);
    f.gcShare.push(profiles[i]!.gc);
  });
}

try {
  await Promise.all(loads.map((l) => l.ready));
  for (const e of edges) e.port = (await e.lane.ready).port;
  await Promise.all(services.map((s) => s.lane.ready));
  await edgeRound(0, false); // warm-up: JIT
  for (const s of services) await s.lane.ask({ op: 'wake' });
  for (let round = 0; round < ROUNDS; round++) {
    await edgeRound(round);
    for (const s of alternate(round, services)) s.ms.push((await s.lane.ask<{ ms: number }>({ op: 'wake' })).ms);
    process.stderr.write(`round ${round + 1}/${ROUNDS} done (load average ${os.loadavg()[0]!.toFixed(1)})\n`);
  }

  const [off, on, control] = edges.map((e) => e.f) as [EdgeFigures, EdgeFigures, EdgeFigures];
  const [wakeOff, wakeOn] = services.map((s) => s.ms) as [number[], number[]];
  const pct = (r: number) => `${r >= 1 ? '+' : ''}${((r - 1) * 100).toFixed(1)} %`;
  /** The median of the rounds' own ratios, and their range. */
  const paired = (a: number[], b: number[]) => {
    const ratios = a.map((x, i) => x / b[i]!);
    return `${median(ratios).toFixed(3)} (${pct(median(ratios))}; ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`;
  };
  const spread = (xs: number[], digits = 0) => `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`;
  const share = (xs: number[]) => `${(median(xs) * 100).toFixed(2)} % (${(Math.min(...xs) * 100).toFixed(2)}–${(Math.max(...xs) * 100).toFixed(2)})`;
  const rows = [
    ['', 'metrics off (baseline)', 'metrics on', 'on/off (rounds)', 'control/off (rounds)'],
    ['edge throughput, req/s', spread(off.rps), spread(on.rps), paired(on.rps, off.rps), paired(control.rps, off.rps)],
    ['edge CPU per request, µs', spread(off.cpuUs, 1), spread(on.cpuUs, 1), paired(on.cpuUs, off.cpuUs), paired(control.cpuUs, off.cpuUs)],
    ['wake from asleep, ms', spread(wakeOff), spread(wakeOn), paired(wakeOn, wakeOff), ''],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(`metrics on vs off, ${ROUNDS} rounds: medians (min–max); three edges loaded at once, ${SECONDS} s x ${CONNECTIONS} keep-alive connections each; ` +
    'control: a second edge without metrics');
  for (const row of rows) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  '));
  console.log(`metrics code in the metrics-on edge's CPU profile: ${share(on.metricsShare)} of its busy time (off: ${share(off.metricsShare)}); ` +
    `garbage collection: on ${share(on.gcShare)}, off ${share(off.gcShare)}, control ${share(control.gcShare)}`);
  const perRound = (xs: number[], digits: number) => xs.map((x) => x.toFixed(digits)).join(' ');
  console.log(`by round, metrics on: CPU per request ${perRound(on.cpuUs, 0)} µs, metrics code ${perRound(on.metricsShare.map((x) => x * 100), 2)} %; ` +
    `off: CPU per request ${perRound(off.cpuUs, 0)} µs; wake on ${perRound(wakeOn, 0)}, off ${perRound(wakeOff, 0)} ms`);
  console.log(`load generators' CPU per request: ${spread([...off.loadCpuUs, ...on.loadCpuUs, ...control.loadCpuUs], 1)} µs (processes of their own, on the same ${os.cpus().length} cores); ` +
    `load average at the end ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`);
} finally {
  await Promise.allSettled([...loads, ...edges.map((e) => e.lane), ...services.map((s) => s.lane)].map((l) => l.close()));
  app.close();
}
