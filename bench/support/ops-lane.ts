/**
 * One lane of bench/ops.ts in a process of its own, driven by the bench over IPC. A process per lane
 * because prom-client's default metrics (the GC observer, the event-loop-delay monitor) act on the
 * whole process: lanes sharing one process would all pay for them, the "off" lane included.
 *
 *   ops-lane.ts edge PORT LABEL on|off an edge (with the service's metrics or none) in front of the app
 *                                      on loopback PORT, as app LABEL
 *   ops-lane.ts service on|off         a whole service (SVC_METRICS on or off) with one sandbox
 *   ops-lane.ts load                   the load generator (autocannon), away from the processes it measures
 *
 * Every lane answers {id, cpuUs} to {id, op: 'cpu'} (its process's CPU time so far), and 'ready' once
 * up. 'profile-start' and 'profile-stop' sample its CPU (V8's profiler) and answer which share of
 * the busy samples ran metrics code (prom-client, monitoring/prom-metrics.ts, the GC observer's callbacks) and
 * which share went to garbage collection.
 */
import inspector from 'node:inspector/promises';
import autocannon from 'autocannon';
import { PromMetrics } from '../../monitoring/index.ts';
import { startTestEdge, TestBackend } from '../../harness/edge.ts';
import { openEdgeSandbox } from '../../harness/edge-sandbox.ts';
import { startTestService } from '../../harness/service.ts';

export type LaneOp =
  | { op: 'cpu' }
  | { op: 'wake' }
  | { op: 'load'; port: number; host: string; seconds: number; connections: number }
  | { op: 'profile-start' }
  | { op: 'profile-stop' }
  | { op: 'close' };
type LaneRequest = LaneOp & { id: number };

export interface LoadResult { requests: number; errors: number; non2xx: number }
export interface ProfileShares { busyMs: number; metrics: number; gc: number }

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string }; children?: number[] }>;
  samples: number[];
  timeDeltas: number[];
}

const METRICS_CODE = /\/node_modules\/prom-client\/|\/ops\/metrics\.ts|^node:internal\/perf\//;

/** Shares of the busy samples: with metrics code anywhere on the stack, and in the garbage collector. */
function shares(profile: CpuProfile): ProfileShares {
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const inMetrics = new Map<number, boolean>();
  const metricsOnStack = (id: number): boolean => {
    let known = inMetrics.get(id);
    if (known === undefined) {
      const up = parent.get(id);
      known = METRICS_CODE.test(byId.get(id)!.callFrame.url) || (up !== undefined && metricsOnStack(up));
      inMetrics.set(id, known);
    }
    return known;
  };
  let busy = 0;
  let metrics = 0;
  let gc = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    const name = byId.get(id)!.callFrame.functionName;
    if (name === '(idle)') return;
    busy += dt;
    if (name === '(garbage collector)') gc += dt;
    else if (metricsOnStack(id)) metrics += dt;
  });
  return { busyMs: busy / 1000, metrics: metrics / busy, gc: gc / busy };
}

type Handler = (req: LaneRequest) => Promise<object>;

const reply = (id: number, body: object) => process.send!({ id, ...body });
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

async function main(): Promise<void> {
  const [kind, ...args] = process.argv.slice(2);
  // a bench that dies (an error, Ctrl-C), even while this lane starts, leaves no service, sandbox or
  // edge behind: the lane closes what it has set up and exits
  let close: () => Promise<void> = async () => undefined;
  let closing: Promise<void> | undefined;
  const closeOnce = () => (closing ??= close());
  let started = false;
  let gone = false;
  process.once('disconnect', () => {
    gone = true;
    if (started) closeOnce().finally(() => process.exit(0));
  });
  let ready: object = {};
  let handle: Handler;
  if (kind === 'edge') {
    const [appPort, label, mode] = args;
    const backend = new TestBackend();
    backend.addApp(label!, 'svc-bench', { host: '127.0.0.1', port: Number(appPort) });
    const edge = await startTestEdge(backend, mode === 'on' ? { metrics: new PromMetrics() } : {});
    handle = async () => ({});
    close = () => edge.close();
    ready = { port: edge.port };
  } else if (kind === 'service') {
    const t = await startTestService({ metrics: args[0] === 'on' });
    close = () => t.close();
    const sb = await openEdgeSandbox(t, 'bench-ops');
    const { lifecycle } = t.service;
    handle = async (req) => {
      if (req.op !== 'wake') return {};
      await lifecycle.sleep(sb.name, 'bench');
      const t0 = performance.now();
      await lifecycle.start(sb.name);
      return { ms: performance.now() - t0 };
    };
    close = async () => {
      sb.close();
      await t.close();
    };
  } else if (kind === 'load') {
    handle = async (req) => {
      if (req.op !== 'load') return {};
      const r = await autocannon({
        url: `https://127.0.0.1:${req.port}/`,
        connections: req.connections,
        duration: req.seconds,
        headers: { host: req.host },
        servername: req.host,
      } as autocannon.Options);
      return { requests: r.requests.total, errors: r.errors, non2xx: r.non2xx } satisfies LoadResult;
    };
  } else {
    throw new Error(`unknown lane ${kind}`);
  }
  const session = new inspector.Session();
  session.connect();
  await session.post('Profiler.enable');
  process.on('message', (req: LaneRequest) => {
    if (req.op === 'profile-start') {
      session.post('Profiler.start').then(() => reply(req.id, {}));
      return;
    }
    if (req.op === 'profile-stop') {
      session.post('Profiler.stop').then(({ profile }) => reply(req.id, shares(profile as CpuProfile)));
      return;
    }
    if (req.op === 'close') {
      closeOnce().finally(() => {
        reply(req.id, {});
        process.disconnect();
      });
      return;
    }
    const before = cpuUs();
    handle(req).then(
      (body) => reply(req.id, { ...body, cpuUs: cpuUs(), opCpuUs: cpuUs() - before }),
      (err: Error) => reply(req.id, { error: err.message }),
    );
  });
  started = true;
  if (gone) {
    await closeOnce();
    process.exit(0);
  }
  process.send!({ id: 0, ...ready });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
