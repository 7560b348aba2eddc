import type http from 'node:http';
import type net from 'node:net';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import type { EdgeBackend } from './backend.ts';
import type { EdgeCertificates } from './certs/edge-certificates.ts';
import type { RouteMirror } from './dataplane/route-mirror.ts';
import type { EdgeTimeouts } from './limits.ts';
import type { PeekedHello } from './listener/sni-peek.ts';
import { routeFor } from './router/host-router.ts';
import type { ActivityMeter } from './services/activity.ts';
import { plainIp } from './services/headers.ts';
import type { AppHttpProxy } from './services/http-proxy.ts';
import { forwardTcp } from './services/tcp-forward.ts';
import { terminateTls } from './services/tls-terminate.ts';
import { TlsProof } from './services/tls-proof.ts';
import type { TunnelPlaces } from './services/tunnel-places.ts';
import type { WakeGate } from './services/wake-gate.ts';

const HTTP_ALPN = ['http/1.1'];
/**
 * TLS socket buffer for the registry (pushes and pulls of layers of hundreds of MB): with Node's
 * 16 KiB a pull paused and resumed the upstream body per 64 KiB chunk and encrypted chunk by chunk;
 * 1 MiB lets writes queue and go out together (bench/registry: about 20% less CPU per pulled byte).
 */
const REGISTRY_SOCKET_BUFFER = 1024 * 1024;

/** What the dispatch hands connections to. */
export interface DispatchParts {
  domain: string;
  /** The backend (with HAProxy: the route mirror wrapping it). */
  backend: EdgeBackend;
  /** With HAProxy as the data plane: told what Node resolved, so the next connections go through HAProxy. */
  mirror: RouteMirror | null;
  certificates: EdgeCertificates;
  timeouts: EdgeTimeouts;
  /** Ports inside a sandbox: its dockerd (2376) and sshd (22). */
  sandboxPorts: { engine: number; shell: number };
  /** `<domain>`, `registry.<domain>` and unknown names. */
  servers: { api: http.Server; registry: http.Server; notFound: http.Server };
  apps: AppHttpProxy;
  activity: ActivityMeter;
  wakes: WakeGate;
  places: TunnelPlaces;
  logger: Logger;
  metrics?: ServiceMetrics;
}

/**
 * Each connection, by the route its SNI names (router/host-router.ts), to what serves it:
 * - `<domain>` (or no SNI) → TLS off → `api`; `registry.<domain>` → TLS off → `registry`;
 * - `<sb>-engine.<domain>` → the TLS bytes, untouched, to `<address>:2376` while the sandbox runs;
 *   otherwise the connection is reset (spec 3 rule 1: an engine connection never wakes);
 * - `<sb>-shell-tcp.<domain>` → TLS off → `<address>:22` while running, else reset (no wake);
 * - `<label>-tcp.<domain>` → TLS off → the app's TCP port; an asleep sandbox is woken and the
 *   connection reset (retry in a few seconds);
 * - `<label>.<domain>` → TLS off → HTTP reverse proxy (services/http-proxy.ts);
 * - anything else → TLS off → a 404 page.
 */
export class ConnectionDispatch {
  constructor(private readonly p: DispatchParts) {}

  readonly dispatch = async (socket: net.Socket, hello: PeekedHello): Promise<void> => {
    const route = routeFor(hello.serverName, this.p.domain);
    const serverName = hello.serverName;
    this.p.metrics?.edgeConnection(route.kind, socket);
    switch (route.kind) {
      case 'api':
        return this.handHttp(socket, serverName, this.p.servers.api);
      case 'registry':
        return this.handHttp(socket, serverName, this.p.servers.registry, REGISTRY_SOCKET_BUFFER);
      case 'unknown':
        return this.handHttp(socket, serverName, this.p.servers.notFound);
      case 'app-http': {
        const clientIp = plainIp(socket.remoteAddress);
        const tlsSocket = await this.terminate(socket, serverName, HTTP_ALPN);
        this.p.apps.accept(tlsSocket, { serverName: serverName!, label: route.label, clientIp });
        return;
      }
      case 'engine':
        return this.engine(socket, route.sandbox);
      case 'shell':
        return this.shell(socket, serverName, route.sandbox);
      case 'app-tcp':
        return this.appTcp(socket, serverName, route.label);
    }
  };

  /**
   * A TCP reset to the client. A connection HAProxy handed over comes on a unix socket, which has
   * no reset (Node throws on it): it is closed, and HAProxy closes the client's connection in turn.
   */
  private reset(socket: net.Socket): void {
    if (socket.destroyed) return;
    if (this.p.mirror) socket.destroy();
    else socket.resetAndDestroy();
  }

  private async terminate(socket: net.Socket, serverName: string | null, alpn?: string[], highWaterMark?: number) {
    const tlsSocket = await terminateTls(socket, {
      secureContext: await this.p.certificates.contextFor(serverName),
      alpn,
      handshakeTimeoutMs: this.p.timeouts.handshakeMs,
      highWaterMark,
    });
    tlsSocket.on('error', (err) => this.p.logger.debug({ err, serverName }, 'edge: TLS socket error'));
    return tlsSocket;
  }

  private async handHttp(socket: net.Socket, serverName: string | null, server: http.Server, highWaterMark?: number): Promise<void> {
    const tlsSocket = await this.terminate(socket, serverName, HTTP_ALPN, highWaterMark);
    server.emit('connection', tlsSocket);
  }

  /** Where a sandbox's engine and sshd listen, only while it runs (spec 3 rule 1: never wake for these). */
  private async runningAddress(sandbox: string): Promise<string | null> {
    const sb = await this.p.backend.resolveSandbox(sandbox).catch((err) => {
      this.p.logger.warn({ err, sandbox }, 'edge: resolveSandbox failed');
      return null;
    });
    return sb?.status === 'running' && sb.address ? sb.address : null;
  }

  /** Passthrough: the edge never sees the engine's TLS (mutual TLS ends at the inner dockerd). */
  private async engine(socket: net.Socket, sandbox: string): Promise<void> {
    const address = await this.runningAddress(sandbox);
    if (!address) return this.reset(socket);
    const handshake = this.p.places.admitHandshake(sandbox, socket);
    if (!handshake) return this.reset(socket);
    // Bytes count as activity, and the connection as carried, only once the engine has accepted the client's certificate.
    const proof = new TlsProof();
    const touch = this.p.activity.listener(sandbox);
    const client = plainIp(socket.remoteAddress);
    let carried = false;
    const upstream = forwardTcp(socket, { host: address, port: this.p.sandboxPorts.engine }, {
      connectTimeoutMs: this.p.timeouts.upstreamConnectMs,
      idleMs: this.p.timeouts.tunnelIdleMs,
      onBytes: () => {
        if (!proof.proven) return;
        touch();
        if (carried) return;
        carried = true;
        handshake();
        this.p.places.carry(sandbox, socket, false).then((ok) => {
          if (!ok) this.reset(socket);
        }, () => this.reset(socket));
        // HAProxy carries this client's next connections to the engine itself
        this.p.mirror?.engineProven(sandbox, proof.flightBytes, client);
      },
      onConnectError: (err) => {
        this.p.logger.debug({ err, sandbox }, 'edge: engine unreachable');
        this.reset(socket);
      },
    });
    // before splice's listeners: a record that proves the client counts at once
    socket.on('data', proof.fromClient);
    upstream.on('data', proof.fromServer);
  }

  private async shell(socket: net.Socket, serverName: string | null, sandbox: string): Promise<void> {
    const address = await this.runningAddress(sandbox);
    // HAProxy takes the name's next connections while the sandbox runs
    this.p.mirror?.maps.shellResolved(sandbox, address, this.p.sandboxPorts.shell);
    if (!address) return this.reset(socket);
    // sshd drops a connection that has not signed in within its login grace time: one that
    // lived longer has, and only its bytes count (the edge never sees inside SSH).
    // sshd's clock starts when it accepts, after the client's (client-paced) TLS handshake.
    const touch = this.p.activity.listener(sandbox);
    let proven = Infinity;
    const upstream = await this.terminateAndForward(socket, serverName, { host: address, port: this.p.sandboxPorts.shell }, sandbox, 'sshd', () => {
      if (Date.now() >= proven) touch();
    });
    upstream?.once('connect', () => {
      proven = Date.now() + this.p.timeouts.shellProofMs;
    });
  }

  private async appTcp(socket: net.Socket, serverName: string | null, label: string): Promise<void> {
    const app = await this.p.backend.resolveApp(label).catch((err) => {
      this.p.logger.warn({ err, label }, 'edge: resolveApp failed');
      return null;
    });
    this.p.mirror?.maps.tcpResolved(label, app);
    // a private app's twin is refused: raw TCP carries no user to check (docs/apps-and-edge.md)
    if (!app || (app.visibility !== undefined && app.visibility !== 'public')) return this.reset(socket);
    if (app.status !== 'running' || !app.target) {
      // asleep: woken for the retry; unavailable: its host does not answer, nothing to wake
      if (app.status === 'exited' || app.status === 'deep_sleep') {
        this.p.wakes.wake(app.sandbox).catch((err) => this.p.logger.info({ err, sandbox: app.sandbox }, 'edge: no wake for a TCP connection'));
      }
      return this.reset(socket);
    }
    this.p.wakes.awake(app.sandbox);
    await this.terminateAndForward(socket, serverName, app.target, app.sandbox, 'app TCP port');
  }

  /**
   * TLS off, then the bytes to a TCP service in a sandbox (its sshd, an app's port); returns the
   * upstream socket, or null when the client's handshake places or the sandbox's places are all taken.
   */
  private async terminateAndForward(
    socket: net.Socket,
    serverName: string | null,
    target: { host: string; port: number },
    sandbox: string,
    what: string,
    onBytes: () => void = this.p.activity.listener(sandbox),
  ): Promise<net.Socket | null> {
    const handshake = this.p.places.admitHandshake(sandbox, socket);
    if (!handshake) {
      this.reset(socket);
      return null;
    }
    const tlsSocket = await this.terminate(socket, serverName);
    handshake();
    if (!(await this.p.places.carry(sandbox, socket, true))) {
      this.reset(socket);
      return null;
    }
    return forwardTcp(tlsSocket, target, {
      connectTimeoutMs: this.p.timeouts.upstreamConnectMs,
      idleMs: this.p.timeouts.tunnelIdleMs,
      onBytes,
      onConnectError: (err) => {
        this.p.logger.debug({ err, sandbox, serverName }, `edge: ${what} unreachable`);
        tlsSocket.destroy();
      },
    });
  }
}
