import http from 'node:http';
import net from 'node:net';
import type { Config } from '../core/config.ts';
import { logger as defaultLogger, type Logger } from '../core/logger.ts';
import type { EdgeBackend } from './backend.ts';
import { loadEdgeCertificates, type EdgeCertificates } from './certs/edge-certificates.ts';
import type { SealedKeys } from './certs/service-ca.ts';
import { listenHttpRedirect, type RedirectPort } from './listener/http-redirect.ts';
import type { PeekedHello } from './listener/sni-peek.ts';
import { listenTlsPort } from './listener/tls-port.ts';
import { notFoundPage } from './pages/pages.ts';
import { sendPage } from './pages/respond.ts';
import { routeFor } from './router/host-router.ts';
import { ActivityMeter } from './services/activity.ts';
import { plainIp } from './services/headers.ts';
import { AppHttpProxy } from './services/http-proxy.ts';
import { createEdgeHttpServer, serverFor, type HttpHandler, type HttpLimits } from './services/http-server.ts';
import { forwardTcp } from './services/tcp-forward.ts';
import { terminateTls } from './services/tls-terminate.ts';
import { TlsProof } from './services/tls-proof.ts';
import { WakeGate } from './services/wake-gate.ts';
import { WakeHold } from './services/wake-hold.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { REGISTRY_VERDICT_HEADER } from './dataplane/haproxy-config.ts';
import type { RegistryBypassAnswer } from './registry-bypass.ts';
import type { AppAccess } from './app-access.ts';
import { haproxyDataPlane, type HaproxyDataPlane } from './dataplane/haproxy-data-plane.ts';
import { readProxyHeader } from './listener/proxy-header.ts';
import { bindPort, type BoundPort } from './listener/bound-port.ts';
import { DEFAULT_LIMITS, DEFAULT_TIMEOUTS, type EdgeLimits, type EdgeTimeouts } from './limits.ts';

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
  registryBypass?: { upstreamSocket: string; mayBypass(method: string, url: string, authorization: string | undefined): Promise<RegistryBypassAnswer> };
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

const HTTP_ALPN = ['http/1.1'];
/**
 * TLS socket buffer for the registry (pushes and pulls of layers of hundreds of MB): with Node's
 * 16 KiB a pull paused and resumed the upstream body per 64 KiB chunk and encrypted chunk by chunk;
 * 1 MiB lets writes queue and go out together (bench/registry: about 20% less CPU per pulled byte).
 */
const REGISTRY_SOCKET_BUFFER = 1024 * 1024;

/**
 * Starts the edge: the service's one public TLS port (plus the port-80 redirect).
 *
 * Each connection is dispatched on its SNI (router/host-router.ts):
 * - `<domain>` (or no SNI) → TLS off → `api`; `registry.<domain>` → TLS off → `registry`;
 * - `<sb>-engine.<domain>` → the TLS bytes, untouched, to `<address>:2376` while the sandbox runs;
 *   otherwise the connection is reset (spec 3 rule 1: an engine connection never wakes);
 * - `<sb>-shell-tcp.<domain>` → TLS off → `<address>:22` while running, else reset (no wake);
 * - `<label>-tcp.<domain>` → TLS off → the app's TCP port; an asleep sandbox is woken and the
 *   connection reset (retry in a few seconds);
 * - `<label>.<domain>` → TLS off → HTTP reverse proxy (services/http-proxy.ts);
 * - anything else → TLS off → a 404 page.
 */
export async function startEdge(opts: StartEdgeOptions): Promise<Edge> {
  const log = (opts.logger ?? defaultLogger).child({ component: 'edge' });
  const t: EdgeTimeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
  const caps: EdgeLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const { config } = opts;
  const domain = config.domain.toLowerCase();
  const enginePort = opts.sandboxPorts?.engine ?? 2376;
  const shellPort = opts.sandboxPorts?.shell ?? 22;
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
  const backend = dataPlane?.backend ?? opts.backend;
  const activity = new ActivityMeter(backend, t.activityIntervalMs, log);
  const wakes = new WakeGate(backend, t.wakeHoldMs);
  const holds = new WakeHold(backend, t.heldRequestMs);
  const notFound = createEdgeHttpServer(limits, (req, res) => sendPage(req, res, notFoundPage(req.headers.host ?? domain)));
  const apiServer = opts.api ? serverFor(opts.api, limits) : notFound;
  const registryServer = opts.registry ? serverFor(opts.registry, limits) : notFound;
  let publicPort = config.httpsPort;
  const apps = new AppHttpProxy({
    backend,
    activity,
    wakes,
    holds,
    limits,
    get publicPort() {
      return publicPort;
    },
    connectTimeoutMs: t.upstreamConnectMs,
    tunnelIdleMs: t.tunnelIdleMs,
    logger: log,
    metrics: opts.metrics,
    onAnswered: dataPlane ? (label, target) => dataPlane.backend.appAnswered(label, target) : undefined,
    access: opts.appAccess,
  });
  opts.metrics?.edgeHttpServer('api', apiServer);
  opts.metrics?.edgeHttpServer('registry', registryServer);
  opts.metrics?.edgeHttpServer('app-http', apps.server);
  if (dataPlane) opts.metrics?.carriedBy(() => dataPlane.traffic());

  /**
   * A TCP reset to the client. A connection HAProxy handed over comes on a unix socket, which has
   * no reset (Node throws on it): it is closed, and HAProxy closes the client's connection in turn.
   */
  const reset = (socket: net.Socket) => {
    if (socket.destroyed) return;
    if (dataPlane) socket.destroy();
    else socket.resetAndDestroy();
  };

  /** One of at most `cap` places under `key`; returns its release (idempotent), or null when all are taken. */
  const takePlace = (counts: Map<string, number>, key: string, cap: number): (() => void) | null => {
    const taken = counts.get(key) ?? 0;
    if (taken >= cap) return null;
    counts.set(key, taken + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (counts.get(key) ?? 1) - 1;
      if (left > 0) counts.set(key, left);
      else counts.delete(key);
    };
  };

  /**
   * A raw tunnel holds one of its client's handshake places for the sandbox until it is carried
   * (released then, or when it closes), and only a carried one takes a place of the sandbox's: a
   * stranger's hanging handshakes use up the stranger's own places, never the owner's.
   */
  const handshakes = new Map<string, number>();
  const admitHandshake = (sandbox: string, socket: net.Socket): (() => void) | null => {
    if (socket.destroyed) return null;
    const release = takePlace(handshakes, `${plainIp(socket.remoteAddress)}|${sandbox}`, caps.tunnelHandshakesPerClient);
    if (release) socket.once('close', release);
    return release;
  };
  /**
   * One of the sandbox's places for a carried tunnel, until it closes; a shell or TCP twin (`shell`)
   * also one of the shells' share and of its client's places for the sandbox. With HAProxy the
   * sandbox's places are taken in its counts, which hold the tunnels of both processes; each
   * process counts a client's own.
   */
  const tunnels = new Map<string, number>();
  const shellTunnels = new Map<string, number>();
  const clientShells = new Map<string, number>();
  const carry = async (sandbox: string, socket: net.Socket, shell: boolean): Promise<boolean> => {
    const places: (() => void)[] = [];
    const take = (release: (() => void) | null) => {
      if (release) places.push(release);
      return release !== null;
    };
    const releaseAll = () => {
      for (const release of places) release();
    };
    const taken = (!shell || take(takePlace(clientShells, `${plainIp(socket.remoteAddress)}|${sandbox}`, caps.shellTunnelsPerClient)))
      && (dataPlane
        ? take(await dataPlane.backend.admitNodeTunnel(sandbox, shell, caps))
        : take(takePlace(tunnels, sandbox, caps.tunnelsPerSandbox)) && (!shell || take(takePlace(shellTunnels, sandbox, caps.shellTunnelsPerSandbox))));
    if (!taken) {
      releaseAll();
      return false;
    }
    socket.once('close', releaseAll);
    if (!socket.destroyed) return true;
    releaseAll();
    return false;
  };

  const terminate = async (socket: net.Socket, serverName: string | null, alpn?: string[], highWaterMark?: number) => {
    const tlsSocket = await terminateTls(socket, {
      secureContext: await certificates.contextFor(serverName),
      alpn,
      handshakeTimeoutMs: t.handshakeMs,
      highWaterMark,
    });
    tlsSocket.on('error', (err) => log.debug({ err, serverName }, 'edge: TLS socket error'));
    return tlsSocket;
  };

  const handHttp = async (socket: net.Socket, serverName: string | null, server: http.Server, highWaterMark?: number) => {
    const tlsSocket = await terminate(socket, serverName, HTTP_ALPN, highWaterMark);
    server.emit('connection', tlsSocket);
  };

  /**
   * TLS off, then the bytes to a TCP service in a sandbox (its sshd, an app's port); returns the
   * upstream socket, or null when the client's handshake places or the sandbox's places are all taken.
   */
  const terminateAndForward = async (
    socket: net.Socket,
    serverName: string | null,
    target: { host: string; port: number },
    sandbox: string,
    what: string,
    onBytes: () => void = activity.listener(sandbox),
  ) => {
    const handshake = admitHandshake(sandbox, socket);
    if (!handshake) {
      reset(socket);
      return null;
    }
    const tlsSocket = await terminate(socket, serverName);
    handshake();
    if (!(await carry(sandbox, socket, true))) {
      reset(socket);
      return null;
    }
    return forwardTcp(tlsSocket, target, {
      connectTimeoutMs: t.upstreamConnectMs,
      idleMs: t.tunnelIdleMs,
      onBytes,
      onConnectError: (err) => {
        log.debug({ err, sandbox, serverName }, `edge: ${what} unreachable`);
        tlsSocket.destroy();
      },
    });
  };

  /** Where a sandbox's engine and sshd listen, only while it runs (spec 3 rule 1: never wake for these). */
  const runningAddress = async (sandbox: string): Promise<string | null> => {
    const sb = await backend.resolveSandbox(sandbox).catch((err) => {
      log.warn({ err, sandbox }, 'edge: resolveSandbox failed');
      return null;
    });
    return sb?.status === 'running' && sb.address ? sb.address : null;
  };

  const dispatch = async (socket: net.Socket, hello: PeekedHello): Promise<void> => {
    const route = routeFor(hello.serverName, domain);
    const serverName = hello.serverName;
    opts.metrics?.edgeConnection(route.kind, socket);
    switch (route.kind) {
      case 'api':
        return handHttp(socket, serverName, apiServer);
      case 'registry':
        return handHttp(socket, serverName, registryServer, REGISTRY_SOCKET_BUFFER);
      case 'unknown':
        return handHttp(socket, serverName, notFound);

      case 'app-http': {
        const clientIp = plainIp(socket.remoteAddress);
        const tlsSocket = await terminate(socket, serverName, HTTP_ALPN);
        apps.accept(tlsSocket, { serverName: serverName!, label: route.label, clientIp });
        return;
      }

      case 'engine': {
        // Passthrough: the edge never sees the engine's TLS (mutual TLS ends at the inner dockerd).
        const address = await runningAddress(route.sandbox);
        if (!address) return reset(socket);
        const handshake = admitHandshake(route.sandbox, socket);
        if (!handshake) return reset(socket);
        // Bytes count as activity, and the connection as carried, only once the engine has accepted the client's certificate.
        const proof = new TlsProof();
        const touch = activity.listener(route.sandbox);
        const client = plainIp(socket.remoteAddress);
        let carried = false;
        const upstream = forwardTcp(socket, { host: address, port: enginePort }, {
          connectTimeoutMs: t.upstreamConnectMs,
          idleMs: t.tunnelIdleMs,
          onBytes: () => {
            if (!proof.proven) return;
            touch();
            if (carried) return;
            carried = true;
            handshake();
            carry(route.sandbox, socket, false).then((ok) => {
              if (!ok) reset(socket);
            }, () => reset(socket));
            // HAProxy carries this client's next connections to the engine itself
            dataPlane?.backend.engineProven(route.sandbox, proof.flightBytes, client);
          },
          onConnectError: (err) => {
            log.debug({ err, sandbox: route.sandbox }, 'edge: engine unreachable');
            reset(socket);
          },
        });
        // before splice's listeners: a record that proves the client counts at once
        socket.on('data', proof.fromClient);
        upstream.on('data', proof.fromServer);
        return;
      }

      case 'shell': {
        const address = await runningAddress(route.sandbox);
        // HAProxy takes the name's next connections while the sandbox runs
        dataPlane?.backend.shellResolved(route.sandbox, address, shellPort);
        if (!address) return reset(socket);
        // sshd drops a connection that has not signed in within its login grace time: one that
        // lived longer has, and only its bytes count (the edge never sees inside SSH).
        // sshd's clock starts when it accepts, after the client's (client-paced) TLS handshake.
        const touch = activity.listener(route.sandbox);
        let proven = Infinity;
        const upstream = await terminateAndForward(socket, serverName, { host: address, port: shellPort }, route.sandbox, 'sshd', () => {
          if (Date.now() >= proven) touch();
        });
        upstream?.once('connect', () => {
          proven = Date.now() + t.shellProofMs;
        });
        return;
      }

      case 'app-tcp': {
        const app = await backend.resolveApp(route.label).catch((err) => {
          log.warn({ err, label: route.label }, 'edge: resolveApp failed');
          return null;
        });
        dataPlane?.backend.tcpResolved(route.label, app);
        // a private app's twin is refused: raw TCP carries no user to check (docs/apps-and-edge.md)
        if (!app || (app.visibility !== undefined && app.visibility !== 'public')) return reset(socket);
        if (app.status !== 'running' || !app.target) {
          // asleep: woken for the retry; unavailable: its host does not answer, nothing to wake
          if (app.status === 'exited' || app.status === 'deep_sleep') {
            wakes.wake(app.sandbox).catch((err) => log.info({ err, sandbox: app.sandbox }, 'edge: no wake for a TCP connection'));
          }
          return reset(socket);
        }
        wakes.awake(app.sandbox);
        await terminateAndForward(socket, serverName, app.target, app.sandbox, 'app TCP port');
        return;
      }
    }
  };

  const tlsPort = await listenTlsPort({
    port: dataPlane ? dataPlane.files.nodeSocket : config.httpsPort,
    proxyProtocol: dataPlane !== null,
    host: opts.host,
    clientHelloTimeoutMs: t.clientHelloMs,
    connectionsPerClient: caps.connectionsPerClient,
    logger: log,
    dispatch,
  });
  let appsFallback: BoundPort | null = null;
  let registryPlain: BoundPort | null = null;
  let registryBypass: BoundPort | null = null;
  let redirect: RedirectPort | null = null;
  try {
    if (dataPlane) {
      // Decrypted app requests HAProxy hands back (the app went to sleep, Host ≠ SNI): the SNI
      // comes as the PROXY header's authority.
      appsFallback = await bindPort(net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
        socket.on('error', (err) => log.debug({ err }, 'edge: data plane app socket error'));
        readProxyHeader(socket, t.clientHelloMs).then((h) => {
          const route = routeFor(h.authority, domain);
          if (route.kind !== 'app-http') return void socket.destroy();
          apps.accept(socket, { serverName: h.authority!, label: route.label, clientIp: plainIp(socket.remoteAddress) });
          socket.resume(); // the bytes after the PROXY header, put back, flow to the HTTP parser
        }, () => socket.destroy());
      }), dataPlane.files.nodeAppsSocket);
      // registry.<domain> with TLS ended by HAProxy: the front gets plain HTTP (Node no longer encrypts layers)
      registryPlain = await bindPort(net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
        socket.on('error', (err) => log.debug({ err }, 'edge: data plane registry socket error'));
        readProxyHeader(socket, t.clientHelloMs).then(() => {
          // the client's connection is TLS (ended by HAProxy): the front builds https:// token realms from this
          Object.defineProperty(socket, 'encrypted', { value: true });
          registryServer.emit('connection', socket);
          socket.resume();
        }, () => socket.destroy());
      }), dataPlane.files.nodeRegistrySocket);
      const bypass = opts.registryBypass;
      if (bypass) {
        // HAProxy's question per blob request (registry-bypass.lua): 204 lets it through, anything else sends it to the front
        registryBypass = await bindPort(http.createServer((req, res) => {
          const method = req.headers['x-svc-method'];
          const url = req.headers['x-svc-url'];
          const answer = typeof method === 'string' && typeof url === 'string' ? bypass.mayBypass(method, url, req.headers.authorization) : Promise.resolve<RegistryBypassAnswer>({ bypass: false });
          answer.then((a) => {
            if (a.verdict) res.setHeader(REGISTRY_VERDICT_HEADER, a.verdict);
            res.writeHead(a.bypass ? 204 : 403).end();
          }, (err) => {
            log.warn({ err }, 'edge: the registry front could not decide on a blob request; the front gets it');
            res.writeHead(500).end();
          });
        }), dataPlane.files.nodeRegistryBypassSocket);
      }
      publicPort = (await dataPlane.start()).port;
    } else {
      publicPort = tlsPort.port;
    }
    if (config.httpPort !== 0) {
      redirect = await listenHttpRedirect({ port: config.httpPort, host: opts.host, domain, httpsPort: publicPort });
    }
  } catch (err) {
    await Promise.all([tlsPort.close(), appsFallback?.close(), registryPlain?.close(), registryBypass?.close(), dataPlane?.close()]);
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
      await Promise.all([tlsPort.close(), appsFallback?.close(), registryPlain?.close(), registryBypass?.close(), redirect?.close()]);
      apps.close();
      activity.close();
      certificates.close();
    },
  };
}
