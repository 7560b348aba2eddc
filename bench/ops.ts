/**
 * What metrics cost (docs/operations.md): metrics on against metrics off (the baseline), side by side
 * in one run, rounds alternating between the two so a busy moment of the machine hits both alike.
 *
 * 1. Edge throughput: two edges in this process, one given the service's metrics and one without,
 *    in front of the same keep-alive app on loopback; requests/s with autocannon (CONNECTIONS
 *    connections, SECONDS seconds) through each edge's TLS port to the app's address, and the
 *    process's CPU time per request (edge, app and load generator alike: the difference is the
 *    edge's), which a busy machine disturbs less than requests/s. One warm-up run each first.
 * 2. Wake time: two whole services (SVC_METRICS on and off), one sandbox each, put to sleep and
 *    started again; from the call until the sandbox's engine answers.
 *
 * Medians over ROUNDS; the figure is on/off. Target: within 3 %.
 *
 *   npm run bench:ops            (ROUNDS=5 SECONDS=5 CONNECTIONS=20 by default)
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import autocannon from 'autocannon';
import { ServiceMetrics } from '../ops/metrics.ts';
import { startTestEdge, TestBackend, type TestEdge } from '../harness/edge.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../harness/edge-sandbox.ts';
import { startTestService, type TestService } from '../harness/service.ts';

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const SECONDS = Number(process.env.SECONDS ?? 5);
const CONNECTIONS = Number(process.env.CONNECTIONS ?? 20);
const LABEL = 'svc-bench-web';
const HOST = `${LABEL}.localhost`;
const BODY = 'hello world\n';

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const alternate = <T>(round: number, pair: T[]) => (round % 2 ? [...pair].reverse() : pair);

interface EdgeLane { label: string; edge: TestEdge; rps: number[]; cpuUs: number[] }
interface WakeLane { label: string; t: TestService; sb: EdgeSandbox; ms: number[] }

async function throughput(lane: EdgeLane, record = true): Promise<void> {
  const cpu0 = process.cpuUsage();
  const r = await autocannon({
    url: `https://127.0.0.1:${lane.edge.port}/`,
    connections: CONNECTIONS,
    duration: SECONDS,
    headers: { host: HOST },
    servername: HOST,
  } as autocannon.Options);
  if (r.errors + r.non2xx > 0) throw new Error(`${lane.label}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
  const cpu = process.cpuUsage(cpu0);
  if (!record) return;
  lane.rps.push(r.requests.average);
  lane.cpuUs.push((cpu.user + cpu.system) / Math.max(1, r.requests.total));
}

async function wake(lane: WakeLane): Promise<void> {
  const { lifecycle } = lane.t.service;
  await lifecycle.sleep(lane.sb.name, 'bench');
  const t0 = performance.now();
  await lifecycle.start(lane.sb.name);
  lane.ms.push(performance.now() - t0);
}

const app = http.createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
  res.end(BODY);
});
await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
const backend = new TestBackend();
backend.addApp(LABEL, 'svc-bench', { host: '127.0.0.1', port: (app.address() as AddressInfo).port });
const edges: EdgeLane[] = [
  { label: 'metrics off', edge: await startTestEdge(backend), rps: [], cpuUs: [] },
  { label: 'metrics on', edge: await startTestEdge(backend, { metrics: new ServiceMetrics() }), rps: [], cpuUs: [] },
];
const wakes: WakeLane[] = [];
try {
  for (const [label, metrics] of [['metrics off', false], ['metrics on', true]] as const) {
    const t = await startTestService({ metrics });
    wakes.push({ label, t, sb: await openEdgeSandbox(t, 'bench-ops'), ms: [] });
  }
  for (const lane of edges) await throughput(lane, false);
  for (let round = 0; round < ROUNDS; round++) {
    for (const lane of alternate(round, edges)) await throughput(lane);
    for (const lane of alternate(round, wakes)) await wake(lane);
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }
  const [offEdge, onEdge] = edges as [EdgeLane, EdgeLane];
  const [offWake, onWake] = wakes as [WakeLane, WakeLane];
  const ratio = (on: number, off: number) => `${(on / off).toFixed(3)} (${((on / off - 1) * 100).toFixed(1)} %)`;
  const rows = [
    ['', 'metrics off (baseline)', 'metrics on', 'on/off'],
    ['edge throughput, req/s', median(offEdge.rps).toFixed(0), median(onEdge.rps).toFixed(0), ratio(median(onEdge.rps), median(offEdge.rps))],
    ['CPU per request, µs', median(offEdge.cpuUs).toFixed(0), median(onEdge.cpuUs).toFixed(0), ratio(median(onEdge.cpuUs), median(offEdge.cpuUs))],
    ['wake from asleep, ms', median(offWake.ms).toFixed(0), median(onWake.ms).toFixed(0), ratio(median(onWake.ms), median(offWake.ms))],
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(`metrics on vs off: medians of ${ROUNDS} rounds; throughput ${SECONDS} s x ${CONNECTIONS} keep-alive connections per run`);
  for (const row of rows) console.log(row.map((cell, i) => cell.padEnd(widths[i]!)).join('  '));
  console.log(`every round: throughput off ${offEdge.rps.map((x) => x.toFixed(0)).join(' ')}, on ${onEdge.rps.map((x) => x.toFixed(0)).join(' ')}; ` +
    `wake off ${offWake.ms.map((x) => x.toFixed(0)).join(' ')}, on ${onWake.ms.map((x) => x.toFixed(0)).join(' ')}`);
} finally {
  for (const lane of wakes) {
    lane.sb.close();
    await lane.t.close();
  }
  for (const lane of edges) await lane.edge.close();
  app.close();
}
