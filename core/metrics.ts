import type http from 'node:http';
import type net from 'node:net';

/**
 * The metrics port: what every part of the service reports into, declared at the bottom of the
 * house so that the edge, the lifecycle, the scanner and the registry depend on it without
 * depending on prom-client or on each other. `monitoring/prom-metrics.ts` implements it;
 * service.ts makes one and hands it to the parts (docs/operations.md lists the metrics).
 */

/** Route kinds of the edge (edge/router/host-router.ts); anything else is counted as `unknown`. */
export const EDGE_ROUTES = ['api', 'registry', 'app-http', 'app-tcp', 'engine', 'shell', 'unknown'] as const;
export type EdgeRouteKind = (typeof EDGE_ROUTES)[number];

/** How a wake began: from asleep (container stopped) or from deep sleep (container removed). */
export type WakeKind = 'asleep' | 'deep_sleep';
export type SleepKind = 'sleep' | 'deep_sleep';
export type SandboxCounts = Record<'running' | 'asleep' | 'deep_sleep' | 'archived', number>;
/** What a scan job ended with: its version's scan state (store/registry.ts), or `failed` when it threw. */
export type ScanResult = 'pending' | 'scanning' | 'clean' | 'flagged' | 'unscannable' | 'failed';

/** One route kind's traffic on the public port, as the edge counts it. */
export interface RouteTraffic {
  connections: number;
  /** Connections open now. */
  open: number;
  bytesIn: number;
  bytesOut: number;
  requests: number;
}

/**
 * What the data plane (HAProxy) carried itself since the service started, by route kind; what it
 * handed to Node, Node counts. The edge's metrics are the sum.
 */
export interface DataPlaneTraffic {
  routes: Partial<Record<EdgeRouteKind, RouteTraffic>>;
  waitingPages: number;
}

export interface MetricsSources {
  /** Sandboxes by status, read at each scrape (store records against the engine's containers). */
  sandboxes?: () => Promise<SandboxCounts>;
  /** Scan jobs by state, read at each scrape (BullMQ's counts). */
  scanQueue?: () => Promise<Record<string, number>>;
}

export interface ServiceMetrics {
  /** Where the gauges read at scrape time come from, once those parts exist. */
  observe(sources: MetricsSources): void;
  /** HAProxy owns the public port: its own traffic is read at each scrape and added to the edge's. */
  carriedBy(read: () => Promise<DataPlaneTraffic>): void;
  /** The scrape: Prometheus text format. */
  scrape(): Promise<{ contentType: string; body: string }>;
  wakeDone(kind: WakeKind, ms: number): void;
  slept(kind: SleepKind): void;
  wakeLimitHit(): void;
  /** A connection the edge dispatched: counted, held open until it closes, its bytes added then. */
  edgeConnection(kind: string, socket: net.Socket): void;
  /** Counts the HTTP requests one of the edge's own servers gets. */
  edgeHttpServer(route: EdgeRouteKind, server: http.Server): void;
  waitingPage(): void;
  /** A scan job ended: its result and the rules of its findings (none for a failed job). */
  scanDone(ms: number, result: ScanResult, rules?: readonly string[]): void;
  registryPush(): void;
  registryPull(): void;
  /** `route`: the route pattern (`/api/sandboxes/:name`), or undefined when no route matched. */
  apiRequest(method: string, route: string | undefined, status: number, ms: number): void;
  storeError(): void;
  redisError(): void;
}
