import type { Config } from '../core/config.ts';
import { logger as defaultLogger, type Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import type { AppAccess } from './app-access.ts';
import type { EdgeBackend } from './backend.ts';
import { loadEdgeCertificates, type EdgeCertificates } from './certs/edge-certificates.ts';
import type { SealedKeys } from './certs/service-ca.ts';
import { listenForHandBacks, type RegistryBypass } from './dataplane/hand-back.ts';
import { haproxyDataPlane, type HaproxyDataPlane } from './dataplane/haproxy-data-plane.ts';
import { ConnectionDispatch } from './dispatch.ts';
import { DEFAULT_LIMITS, DEFAULT_TIMEOUTS, type EdgeLimits, type EdgeTimeouts } from './limits.ts';
import { listenHttpRedirect, type RedirectPort } from './listener/http-redirect.ts';
import { listenTlsPort } from './listener/tls-port.ts';
import { notFoundPage } from './pages/pages.ts';
import { sendPage } from './pages/respond.ts';
import { ActivityMeter } from './services/activity.ts';
import { AppHttpProxy } from './services/http-proxy.ts';
import { createEdgeHttpServer, serverFor, type HttpHandler, type HttpLimits } from './services/http-server.ts';
import { TunnelPlaces } from './services/tunnel-places.ts';
import { WakeGate } from './services/wake-gate.ts';
import { WakeHold } from './services/wake-hold.ts';

export type { HttpHandler } from './services/http-server.ts';
export { DEFAULT_LIMITS, DEFAULT_TIMEOUTS, SHELL_PROOF_MS, SSHD_LOGIN_GRACE_MS, type EdgeLimits, type EdgeTimeouts } from './limits.ts';

export interface StartEdgeOptions {
  config: Pick<Config, 'domain' | 'httpsPort' | 'httpPort' | 'dataDir' | 'tlsCertFile' | 'tlsKeyFile'>;
  backend: EdgeBackend;
  /** Gets `https://<domain>/…` and connections without SNI. Without it those answer 404. */
  api?: HttpHandler;
  /** Gets `https://registry.<domain>/…`. Without it those answer 404. */
  registry?: HttpHandler;
  /**
   * With HAProxy as the data plane: a blob's bytes go from HAProxy straight to the upstream
   * registry's unix socket when `mayBypass` (the registry front's own rules, asked per request)
   * allows; every other registry request, and every refused one, goes to `registry` as before.
   */
  registryBypass?: RegistryBypass;
  /** Who may reach a private app address (tunnel.visibility); without it such apps answer 403. */
  appAccess?: AppAccess;
  logger?: Logger;
  /** Listen address of both ports (default: all interfaces). */
  host?: string;
  timeouts?: Partial<EdgeTimeouts>;
  /** Ports inside a sandbox: dockerd with --tlsverify (2376) and sshd (22). Tests point them elsewhere. */
  sandboxPorts?: { engine?: number; shell?: number };
  /** Largest HTTP request head (default 16 KiB, Node's). */
  maxHeaderSize?: number;
  limits?: Partial<EdgeLimits>;
  /** Where the service CA is kept (the store's sealed keys); without it, in `<dataDir>/ca/`. */
  caKeys?: SealedKeys;
  metrics?: ServiceMetrics;
  /**
   * Who owns the public port: `haproxy` (the service's default, docs/data-plane.md: HAProxy passes
   * engines through and serves running apps itself, and hands everything else to this edge over a
   * unix socket) or `node` (this process alone: the reference the tests compare against).
   */
  dataPlane: 'node' | 'haproxy';
}

export interface Edge {
  /** The bound HTTPS port (useful with `httpsPort: 0`). */
  readonly httpsPort: number;
  /** The bound redirect port, or null when `httpPort` is 0. */
  readonly httpPort: number | null;
  readonly certificates: EdgeCertificates;
  /** HAProxy's process while it is the data plane (its pid changes when it is restarted), else null. */
  readonly dataPlane: Pick<HaproxyDataPlane, 'pid' | 'files' | 'traffic' | 'ping'> | null;
  /** Stops listening and drops every open connection. */
  close(): Promise<void>;
}

/**
 * Starts the edge: the service's one public TLS port (plus the port-80 redirect). Each connection
 * goes by its SNI to what serves it (dispatch.ts); with HAProxy as the data plane, HAProxy owns the
 * port and hands Node what it does not serve itself (dataplane/).
 */
export async function startEdge(opts: StartEdgeOptions): Promise<Edge> {
  const log = (opts.logger ?? defaultLogger).child({ component: 'edge' });
  const t: EdgeTimeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
  const caps: EdgeLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const { config } = opts;
  const domain = config.domain.toLowerCase();
  const enginePort = opts.sandboxPorts?.engine ?? 2376;
  const limits: HttpLimits = {
    headersTimeoutMs: t.headersMs,
    keepAliveTimeoutMs: t.keepAliveMs,
    bodyIdleTimeoutMs: t.bodyIdleMs,
    maxHeaderSize: opts.maxHeaderSize ?? 16 * 1024,
  };

  const certificates = await loadEdgeCertificates(config, log, opts.caKeys);
  const dataPlane: HaproxyDataPlane | null = opts.dataPlane === 'haproxy'
    ? haproxyDataPlane({
      domain,
      backend: opts.backend,
      certificates,
      logger: log,
      port: config.httpsPort,
      host: opts.host,
      enginePort,
      limits: caps,
      timeouts: t,
      registryUpstream: opts.registryBypass?.upstreamSocket,
    })
    : null;
  // with HAProxy, every route this edge resolves is mirrored into HAProxy's maps
  const mirror = dataPlane?.backend ?? null;
  const backend = mirror ?? opts.backend;
  const activity = new ActivityMeter(backend, t.activityIntervalMs, log);
  const wakes = new WakeGate(backend, t.wakeHoldMs);
  const notFound = createEdgeHttpServer(limits, (req, res) => sendPage(req, res, notFoundPage(req.headers.host ?? domain)));
  const servers = { api: opts.api ? serverFor(opts.api, limits) : notFound, registry: opts.registry ? serverFor(opts.registry, limits) : notFound, notFound };
  let publicPort = config.httpsPort;
  const apps = new AppHttpProxy({
    backend,
    activity,
    wakes,
    holds: new WakeHold(backend, t.heldRequestMs),
    limits,
    get publicPort() {
      return publicPort;
    },
    connectTimeoutMs: t.upstreamConnectMs,
    tunnelIdleMs: t.tunnelIdleMs,
    logger: log,
    metrics: opts.metrics,
    onAnswered: mirror ? (label, target) => mirror.maps.appAnswered(label, target) : undefined,
    access: opts.appAccess,
  });
  opts.metrics?.edgeHttpServer('api', servers.api);
  opts.metrics?.edgeHttpServer('registry', servers.registry);
  opts.metrics?.edgeHttpServer('app-http', apps.server);
  if (dataPlane) opts.metrics?.carriedBy(() => dataPlane.traffic());

  const { dispatch } = new ConnectionDispatch({
    domain,
    backend,
    mirror,
    certificates,
    timeouts: t,
    sandboxPorts: { engine: enginePort, shell: opts.sandboxPorts?.shell ?? 22 },
    servers,
    apps,
    activity,
    wakes,
    places: new TunnelPlaces(caps, mirror ? (sandbox, shell, c) => mirror.tunnels.admit(sandbox, shell, c) : undefined),
    logger: log,
    metrics: opts.metrics,
  });
  const tlsPort = await listenTlsPort({
    port: dataPlane ? dataPlane.files.nodeSocket : config.httpsPort,
    proxyProtocol: dataPlane !== null,
    host: opts.host,
    clientHelloTimeoutMs: t.clientHelloMs,
    connectionsPerClient: caps.connectionsPerClient,
    logger: log,
    dispatch,
  });
  let handBacks: { close(): Promise<void> } | null = null;
  let redirect: RedirectPort | null = null;
  try {
    if (dataPlane) {
      handBacks = await listenForHandBacks({
        files: dataPlane.files, domain, headerTimeoutMs: t.clientHelloMs, apps, registry: servers.registry, registryBypass: opts.registryBypass, logger: log,
      });
      publicPort = (await dataPlane.start()).port;
    } else {
      publicPort = tlsPort.port;
    }
    if (config.httpPort !== 0) {
      redirect = await listenHttpRedirect({ port: config.httpPort, host: opts.host, domain, httpsPort: publicPort });
    }
  } catch (err) {
    await Promise.all([tlsPort.close(), handBacks?.close(), dataPlane?.close()]);
    throw err;
  }
  log.info({ httpsPort: publicPort, httpPort: redirect?.port ?? null, domain, certificates: certificates.mode, dataPlane: dataPlane ? 'haproxy' : 'node' }, 'edge: listening');

  return {
    httpsPort: publicPort,
    httpPort: redirect?.port ?? null,
    certificates,
    dataPlane,
    async close() {
      await dataPlane?.close();
      await Promise.all([tlsPort.close(), handBacks?.close(), redirect?.close()]);
      apps.close();
      activity.close();
      certificates.close();
    },
  };
}
