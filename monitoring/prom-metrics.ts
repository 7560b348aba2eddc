import type http from 'node:http';
import type net from 'node:net';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import {
  EDGE_ROUTES, type DataPlaneTraffic, type EdgeRouteKind, type MetricsSources, type RouteTraffic, type ScanResult, type ServiceMetrics, type SleepKind, type WakeKind,
} from '../core/metrics.ts';
import { builtInRuleList, PATH_RULES } from '../scanner/index.ts';
import type { ScanState } from '../store/index.ts';

/**
 * Every metric of the service, defined here once (docs/operations.md lists them): the prom-client
 * implementation of the metrics port (core/metrics.ts). service.ts makes one and hands it to the
 * parts; each part's instrumentation point is one call.
 *
 * Labels are bounded by construction: route kinds, wake kinds and statuses are closed sets of the
 * code; API routes are Fastify's route patterns (never the path a client sent); rule families are
 * the scanner catalogue's own (cloud, payment, private-key, …). No sandbox, user or repository name is ever a
 * label: those grow with the users, and per-sandbox figures are the API's business.
 */

const routeSlot = (kind: string) => {
  const i = (EDGE_ROUTES as readonly string[]).indexOf(kind);
  return i < 0 ? EDGE_ROUTES.indexOf('unknown') : i;
};
/**
 * The edge's figures as plain numbers, one slot per route kind: every connection and request only
 * adds to them, and the edge's metrics read them at each scrape. prom-client's inc() hashes its
 * label object on every call (a child from labels() too): a share of the edge's CPU profile.
 */
class EdgeCounts {
  readonly connections = new Float64Array(EDGE_ROUTES.length);
  readonly closed = new Float64Array(EDGE_ROUTES.length);
  readonly bytesIn = new Float64Array(EDGE_ROUTES.length);
  readonly bytesOut = new Float64Array(EDGE_ROUTES.length);
  readonly requests = new Float64Array(EDGE_ROUTES.length);
}

/** The results a scan job is counted under from the start (failed: it threw; after the last attempt the version is unscannable). */
const SCAN_RESULTS = ['clean', 'flagged', 'unscannable', 'failed'] as const satisfies ReadonlyArray<ScanState | 'failed'>;

const HTTP_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

const FAMILIES = new Map<string, string>([...PATH_RULES.map((r) => [r.rule, 'file'] as const), ...builtInRuleList().map((r) => [r.id, r.family] as const)]);

/** A finding's rule family: the scanner catalogue's, `file` for file-name rules, `other` for an operator's rules. */
export function ruleFamily(rule: string): string {
  return FAMILIES.get(rule) ?? 'other';
}

export class PromMetrics implements ServiceMetrics {
  readonly registry = new Registry();
  private sources: MetricsSources = {};
  private readonly wakes: Counter<'kind'>;
  private readonly wakeSeconds: Histogram<'kind'>;
  private readonly sleeps: Counter<'kind'>;
  private readonly wakeLimits: Counter;
  private readonly edge = new EdgeCounts();
  /** Read at each scrape from the data plane, when HAProxy owns the public port. */
  private dataPlane: (() => Promise<DataPlaneTraffic>) | null = null;
  private carried: DataPlaneTraffic = { routes: {}, waitingPages: 0 };
  private waitingPages = 0;
  private readonly scans: Counter<'result'>;
  private readonly scanSeconds: Histogram;
  private readonly findings: Counter<'family'>;
  private readonly pushes: Counter;
  private readonly pulls: Counter;
  /** API requests by method, status and route pattern, counted as plain numbers read at each scrape (as the edge's). */
  private readonly api = new Map<string, { labels: { method: string; route: string; status: string }; n: number }>();
  private readonly apiSeconds: Histogram<'route'>;
  private readonly storeErrors: Counter;
  private readonly redisErrors: Counter;

  constructor() {
    const registers = [this.registry];
    const sources = () => this.sources;
    const edge = this.edge;
    const carried = (route: EdgeRouteKind, what: keyof RouteTraffic) => this.carried.routes[route]?.[what] ?? 0;
    collectDefaultMetrics({ register: this.registry });
    // prom-client's nodejs_active_{handles,requests,resources}_total are gauges, which promtool (and
    // the naming rules) refuse: a _total suffix means a counter. Each is the sum of its per-type
    // gauge without the suffix, which stays, so nothing is lost.
    for (const metric of this.registry.getMetricsAsArray()) {
      if (metric.name.endsWith('_total') && !(metric instanceof Counter)) this.registry.removeSingleMetric(metric.name);
    }
    new Gauge({
      name: 'svc_sandboxes', help: 'Sandboxes by status (archived: deleted, name kept)', labelNames: ['status'], registers,
      async collect() {
        const read = sources().sandboxes;
        if (read) for (const [status, n] of Object.entries(await read())) this.set({ status }, n);
      },
    });
    this.wakes = new Counter({ name: 'svc_wakes_total', help: 'Sandboxes woken, by the state they woke from', labelNames: ['kind'], registers });
    this.wakeSeconds = new Histogram({
      name: 'svc_wake_duration_seconds', help: 'Time from a wake request to a sandbox whose engine answers', labelNames: ['kind'], registers,
      buckets: [0.5, 1, 2, 3, 5, 8, 13, 20, 30, 45, 60, 90],
    });
    this.sleeps = new Counter({ name: 'svc_sleeps_total', help: 'Sandboxes put to sleep (sleep) or taken down (deep_sleep)', labelNames: ['kind'], registers });
    this.wakeLimits = new Counter({ name: 'svc_wake_limits_hit_total', help: "Wakes by app traffic refused by the owner's hourly wake limit", registers });
    // the edge's metrics are set from its plain counts at each scrape (reset, then one series per route kind)
    new Counter({
      name: 'svc_edge_connections_total', help: 'Connections the public port dispatched, by route kind', labelNames: ['route'], registers,
      collect() {
        this.reset();
        EDGE_ROUTES.forEach((route, i) => this.inc({ route }, edge.connections[i]! + carried(route, 'connections')));
      },
    });
    new Gauge({
      name: 'svc_edge_open_connections', help: 'Connections open on the public port, by route kind', labelNames: ['route'], registers,
      collect() {
        EDGE_ROUTES.forEach((route, i) => this.set({ route }, edge.connections[i]! - edge.closed[i]! + carried(route, 'open')));
      },
    });
    new Counter({
      name: 'svc_edge_bytes_total', help: 'Bytes on the public port by route kind and direction (in: from clients), counted when a connection closes',
      labelNames: ['route', 'direction'], registers,
      collect() {
        this.reset();
        EDGE_ROUTES.forEach((route, i) => {
          if (!edge.connections[i] && !carried(route, 'connections')) return;
          this.inc({ route, direction: 'in' }, edge.bytesIn[i]! + carried(route, 'bytesIn'));
          this.inc({ route, direction: 'out' }, edge.bytesOut[i]! + carried(route, 'bytesOut'));
        });
      },
    });
    new Counter({
      name: 'svc_edge_http_requests_total', help: 'HTTP requests through the public port, by route kind', labelNames: ['route'], registers,
      collect() {
        this.reset();
        EDGE_ROUTES.forEach((route, i) => {
          const n = edge.requests[i]! + carried(route, 'requests');
          if (n) this.inc({ route }, n);
        });
      },
    });
    const waitingPages = () => this.waitingPages + this.carried.waitingPages;
    new Counter({
      name: 'svc_edge_waiting_pages_total', help: 'Waiting pages served for apps whose sandbox is waking or starting', registers,
      collect() {
        this.reset();
        this.inc(waitingPages());
      },
    });
    this.scans = new Counter({ name: 'svc_scans_total', help: 'Scan job attempts finished, by result (failed: the attempt threw and is retried, twice at most)', labelNames: ['result'], registers });
    this.scanSeconds = new Histogram({
      name: 'svc_scan_duration_seconds', help: 'Duration of one image scan job', registers,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    });
    this.findings = new Counter({ name: 'svc_scan_findings_total', help: 'Scan findings by rule family (the scanner catalogue\'s; file: file-name rules; other: operator rules)', labelNames: ['family'], registers });
    new Gauge({
      name: 'svc_scan_queue_jobs', help: 'Scan jobs in the queue by state', labelNames: ['state'], registers,
      async collect() {
        const read = sources().scanQueue;
        if (read) for (const [state, n] of Object.entries(await read())) this.set({ state }, n);
      },
    });
    this.pushes = new Counter({ name: 'svc_registry_pushes_total', help: 'Image manifests pushed (accepted by the upstream)', registers });
    this.pulls = new Counter({ name: 'svc_registry_pulls_total', help: 'Image manifests pulled (GET of a manifest the caller may read)', registers });
    const api = this.api;
    new Counter({
      name: 'svc_api_requests_total', help: 'API requests by method, route pattern and status (both ports)', labelNames: ['method', 'route', 'status'], registers,
      collect() {
        this.reset();
        for (const { labels, n } of api.values()) this.inc(labels, n);
      },
    });
    this.apiSeconds = new Histogram({
      name: 'svc_api_request_duration_seconds', help: 'API response time by route pattern', labelNames: ['route'], registers,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    });
    this.storeErrors = new Counter({ name: 'svc_store_errors_total', help: 'Store operations that failed (database unreachable, query errors)', registers });
    this.redisErrors = new Counter({ name: 'svc_redis_errors_total', help: 'Errors reported by Redis connections (lost, refused, command errors)', registers });
    for (const result of SCAN_RESULTS) this.scans.inc({ result }, 0);
    for (const kind of ['asleep', 'deep_sleep'] as const) this.wakes.inc({ kind }, 0);
    for (const kind of ['sleep', 'deep_sleep'] as const) this.sleeps.inc({ kind }, 0);
  }

  /** Where the gauges read at scrape time come from, once those parts exist. */
  observe(sources: MetricsSources): void {
    this.sources = sources;
  }

  /** HAProxy owns the public port: its own traffic is read at each scrape and added to the edge's. */
  carriedBy(read: () => Promise<DataPlaneTraffic>): void {
    this.dataPlane = read;
  }

  /** The scrape: Prometheus text format. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    // HAProxy restarting: its last counts stand (they only grow)
    if (this.dataPlane) this.carried = await this.dataPlane().catch(() => this.carried);
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  wakeDone(kind: WakeKind, ms: number): void {
    this.wakes.inc({ kind });
    this.wakeSeconds.observe({ kind }, ms / 1000);
  }

  slept(kind: SleepKind): void {
    this.sleeps.inc({ kind });
  }

  wakeLimitHit(): void {
    this.wakeLimits.inc();
  }

  /** A connection the edge dispatched: counted, held open until it closes, its bytes added then. */
  edgeConnection(kind: string, socket: net.Socket): void {
    const i = routeSlot(kind);
    const edge = this.edge;
    edge.connections[i]! += 1;
    const closed = () => {
      edge.closed[i]! += 1;
      edge.bytesIn[i]! += socket.bytesRead;
      edge.bytesOut[i]! += socket.bytesWritten;
    };
    // a client gone between its ClientHello and the dispatch: its close was before, no listener would hear it
    if (socket.closed) closed();
    else socket.once('close', closed);
  }

  /** Counts the HTTP requests one of the edge's own servers gets. */
  edgeHttpServer(route: EdgeRouteKind, server: http.Server): void {
    const i = routeSlot(route);
    const requests = this.edge.requests;
    server.on('request', () => {
      requests[i]! += 1;
    });
  }

  waitingPage(): void {
    this.waitingPages += 1;
  }

  /** A scan job ended: its result and findings (none for a failed job). */
  scanDone(ms: number, result: ScanResult, rules: readonly string[] = []): void {
    this.scans.inc({ result });
    this.scanSeconds.observe(ms / 1000);
    for (const rule of rules) this.findings.inc({ family: ruleFamily(rule) });
  }

  registryPush(): void {
    this.pushes.inc();
  }

  registryPull(): void {
    this.pulls.inc();
  }

  /** `route`: the route pattern (`/api/sandboxes/:name`), or undefined when no route matched. */
  apiRequest(method: string, route: string | undefined, status: number, ms: number): void {
    const pattern = route ?? '(unmatched)';
    const known = HTTP_METHODS.has(method) ? method : 'other';
    const key = `${known} ${status} ${pattern}`;
    const counted = this.api.get(key);
    if (counted) counted.n += 1;
    else this.api.set(key, { labels: { method: known, route: pattern, status: String(status) }, n: 1 });
    this.apiSeconds.observe({ route: pattern }, ms / 1000);
  }

  storeError(): void {
    this.storeErrors.inc();
  }

  redisError(): void {
    this.redisErrors.inc();
  }
}
