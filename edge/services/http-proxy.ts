import type http from 'node:http';
import type net from 'node:net';
import type { Duplex } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { retryAfterOf } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { TOO_MANY_WAKES, type AppRoute, type EdgeBackend, type ResolvedApp, type WakeUnderWay } from '../backend.ts';
import {
  badGatewayPage,
  hostUnavailablePage,
  loopbackOnlyPage,
  misdirectedPage,
  notFoundPage,
  tooManyWakesPage,
  unavailablePage,
  waitingPage,
  WAITING_HEADER,
  type Page,
} from '../pages/pages.ts';
import type { ServiceMetrics } from '../../core/metrics.ts';
import { sendPage, writeRawPage } from '../pages/respond.ts';
import type { ActivityMeter } from './activity.ts';
import { hostWithoutPort, requestHeadersForApp, type ForwardedFor } from './headers.ts';
import { createEdgeHttpServer, type HttpLimits } from './http-server.ts';
import { AppSockets } from './app-sockets.ts';
import { proxyUpgrade } from './upgrade.ts';
import { Exchange, type AppConnection, type ExchangeOwner } from './app-exchange.ts';
import type { AppAccess } from '../app-access.ts';
import { gateRequest, withoutServiceCredentials } from './app-gate.ts';
import type { WakeGate } from './wake-gate.ts';
import type { WakeHold } from './wake-hold.ts';

export interface AppProxyOptions {
  backend: EdgeBackend;
  activity: ActivityMeter;
  wakes: WakeGate;
  /** Holds requests while their sandbox wakes or their app starts (0 ms: the waiting page at once). */
  holds: WakeHold;
  limits: HttpLimits;
  /** The public HTTPS port, for X-Forwarded-Port. */
  publicPort: number;
  connectTimeoutMs: number;
  /** Websockets without a byte for this long are closed. */
  tunnelIdleMs: number;
  logger: Logger;
  metrics?: ServiceMetrics;
  /**
   * An app answered a request at this address (HAProxy's route mirror takes an app over only then:
   * until its app answers, a waking sandbox's requests stay here, held and retried).
   */
  onAnswered?: (label: string, target: AppRoute) => void;
  /** Who may reach a private app (tunnel.visibility); without it private apps answer 403. */
  access?: AppAccess;
}

/** A private app's target: its requests lose the user's bearer token on the way. */
function isGated(target: AppRoute): boolean {
  return target.visibility !== undefined && target.visibility !== 'public';
}

/** Methods Node sends with chunked framing by default; a body-less one gets `content-length: 0` instead. */
const BODY_BY_DEFAULT = new Set(['POST', 'PUT', 'PATCH']);
const RETRYABLE = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Errors of a kept-alive connection that the app closed while we picked it. */
const STALE_SOCKET = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);
/**
 * An app address that did not answer: maybe the sandbox stopped or was removed since the backend
 * last looked (it may answer from memory), so its state is looked at again before any error page.
 */
const NO_ANSWER = new Set([...STALE_SOCKET, 'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT']);
/**
 * No host at the sandbox's address at all (no ARP answer): when the sandbox runs by a fresh look,
 * it stopped and started again since the address was picked (a wake while the request was on its
 * way), so the request waits for its app like any during a wake rather than getting a 502.
 */
const NO_HOST = new Set(['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN']);

type Decision =
  | { kind: 'page'; page: Page }
  | { kind: 'forward'; sandbox: string; target: AppRoute };

/**
 * The reverse proxy for app addresses: routes by the connection's SNI label, streams bodies both
 * ways without buffering (a slow side pauses the other), keeps connections to apps alive, upgrades
 * (websockets) become a raw TCP splice once the app answers 101, and every chunk counts as activity.
 */
export class AppHttpProxy implements ExchangeOwner {
  readonly server: http.Server;
  private readonly conns = new WeakMap<object, AppConnection>();
  private readonly agent: Agent;
  /** @internal The connections to apps; an Exchange releases their held ends after a resume. */
  readonly sockets = new AppSockets();

  constructor(private readonly opts: AppProxyOptions) {
    // undici keeps connections to apps alive (honouring their Keep-Alive hints) and costs about a
    // quarter less CPU per request than node:http's client (bench/edge.ts). No response timeouts:
    // long polls and quiet SSE streams are legitimate; only the connect is bounded.
    this.agent = new Agent({
      connect: this.sockets.connector(opts.connectTimeoutMs),
      headersTimeout: 0,
      bodyTimeout: 0,
      pipelining: 1,
      keepAliveTimeout: 4_000,
    });
    this.server = createEdgeHttpServer(opts.limits, (req, res) => void this.onRequest(req, res));
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      this.onUpgrade(req, socket as net.Socket, head).catch((err) => {
        opts.logger.error({ err }, 'edge: app upgrade failed');
        socket.destroy();
      });
    });
  }

  /** Takes a terminated TLS connection for an app host. */
  accept(socket: net.Socket, conn: AppConnection): void {
    this.conns.set(socket, conn);
    this.server.emit('connection', socket);
  }

  close(): void {
    this.agent.destroy().catch(() => {});
  }

  /** Decides what a request gets: a page, or the app. */
  private async decide(req: http.IncomingMessage): Promise<{ conn: AppConnection; decision: Decision } | null> {
    const conn = this.conns.get(req.socket);
    if (!conn) return null;
    // The connection was opened (and its certificate chosen) for one host: it serves no other.
    if (hostWithoutPort(req.headers.host) !== conn.serverName) {
      return { conn, decision: { kind: 'page', page: misdirectedPage(conn.serverName) } };
    }
    let app: ResolvedApp | null;
    try {
      app = await this.opts.backend.resolveApp(conn.label);
    } catch (err) {
      this.opts.logger.warn({ err, label: conn.label }, 'edge: resolveApp failed');
      return { conn, decision: { kind: 'page', page: unavailablePage(conn.serverName, 'the route lookup failed') } };
    }
    if (!app) return { conn, decision: { kind: 'page', page: notFoundPage(conn.serverName) } };
    // its host does not answer: a wake would need it, so none is tried
    if (app.status === 'unavailable') return { conn, decision: { kind: 'page', page: hostUnavailablePage(conn.serverName) } };
    // a private app: who may not reach it gets its page before anything wakes
    const refused = await gateRequest(this.opts.access, req, app, conn.serverName, conn.label, this.appUrl(conn, req));
    if (refused) return { conn, decision: { kind: 'page', page: refused } };
    if (app.status === 'running') {
      this.opts.wakes.awake(app.sandbox);
      if (app.target) return { conn, decision: { kind: 'forward', sandbox: app.sandbox, target: app.target } };
      return { conn, decision: await this.holdOrWait(conn, app.sandbox, 'starting') };
    }
    const woken = await this.wake(conn.serverName, app.sandbox);
    return { conn, decision: 'page' in woken ? { kind: 'page', page: woken.page } : await this.holdOrWait(conn, app.sandbox, 'waking', woken.running) };
  }

  /**
   * Holds the request while the sandbox wakes (`running`: the wake) or its app starts: the app's
   * answer if it comes within the hold, else the waiting page (which then notices by itself when the app answers).
   */
  private async holdOrWait(conn: AppConnection, sandbox: string, why: 'waking' | 'starting', running?: Promise<void>): Promise<Decision> {
    const target = await this.opts.holds.hold(conn.label, running);
    if (!target) return { kind: 'page', page: waitingPage(conn.serverName, why) };
    this.opts.wakes.awake(sandbox);
    return { kind: 'forward', sandbox, target };
  }

  /** Wakes an asleep sandbox (within the owner's limit): the wake under way, or the page saying why not. */
  private async wake(host: string, sandbox: string): Promise<WakeUnderWay | { page: Page }> {
    try {
      return await this.opts.wakes.wake(sandbox);
    } catch (err) {
      if (err instanceof Error && 'code' in err && err.code === TOO_MANY_WAKES) return { page: tooManyWakesPage(host, err.message, retryAfterOf(err) ?? 60) };
      this.opts.logger.warn({ err, sandbox }, 'edge: requestWake failed');
      return { page: unavailablePage(host, 'the sandbox could not be woken') };
    }
  }

  /** @internal The activity callback for a sandbox. */
  activityFor(sandbox: string): () => void {
    return this.opts.activity.listener(sandbox);
  }

  /** The address the request asked for (where a browser comes back to after signing in). */
  private appUrl(conn: AppConnection, req: http.IncomingMessage): string {
    const port = this.opts.publicPort;
    return `https://${conn.serverName}${port === 443 ? '' : `:${port}`}${req.url ?? '/'}`;
  }

  private forwarded(conn: AppConnection, req: http.IncomingMessage): ForwardedFor {
    return { clientIp: conn.clientIp, host: req.headers.host ?? conn.serverName, port: this.opts.publicPort };
  }

  /**
   * The page for an app that could not be reached. When its address did not answer, the sandbox's
   * state is looked up afresh first: one stopped or removed since the last look gets the waiting
   * page and a wake, like any asleep sandbox, rather than a 502 (`running`: that wake).
   */
  private async connectErrorPage(conn: AppConnection, target: AppRoute, err: Error & { code?: string }): Promise<{ page: Page; running?: Promise<void> }> {
    const host = conn.serverName;
    if (NO_ANSWER.has(err.code ?? '')) {
      const app = await this.opts.backend.resolveApp(conn.label, { fresh: true }).catch((e: unknown) => {
        this.opts.logger.warn({ err: e, label: conn.label }, 'edge: resolveApp failed');
        return undefined;
      });
      if (app === null) return { page: notFoundPage(host) };
      if (app?.status === 'unavailable') return { page: hostUnavailablePage(host) };
      if (app && app.status !== 'running') {
        const woken = await this.wake(host, app.sandbox);
        return 'page' in woken ? woken : { page: waitingPage(host, 'waking'), running: woken.running };
      }
      if (app?.status === 'running' && NO_HOST.has(err.code ?? '')) return { page: waitingPage(host, 'starting') };
    }
    if (err.code === 'ECONNREFUSED') return { page: target.loopbackOnly ? loopbackOnlyPage(host, target.port) : waitingPage(host, 'starting') };
    const timedOut = err.code === 'ETIMEDOUT' || err.code === 'UND_ERR_CONNECT_TIMEOUT';
    return { page: badGatewayPage(host, timedOut ? 'the connection timed out' : `the connection failed (${err.code ?? err.message})`) };
  }

  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    try {
      const d = await this.decide(req);
      if (!d) return void res.destroy();
      const { conn, decision } = d;
      if (decision.kind === 'page') return this.page(req, res, decision.page);
      if (res.destroyed) return; // the client left while we looked the route up
      this.forward(req, res, conn, decision.sandbox, decision.target, false);
    } catch (err) {
      this.opts.logger.error({ err }, 'edge: app request failed');
      if (!res.headersSent) sendPage(req, res, unavailablePage(req.headers.host ?? '', 'internal error'));
      else res.destroy();
    }
  }

  private page(req: http.IncomingMessage, res: http.ServerResponse, page: Page): void {
    if (page.headers[WAITING_HEADER]) this.opts.metrics?.waitingPage();
    sendPage(req, res, page);
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    conn: AppConnection,
    sandbox: string,
    target: AppRoute,
    retried: boolean,
  ): void {
    const exchange = new Exchange(this, req, res, conn, sandbox, target, retried);
    const headers = requestHeadersForApp(withoutServiceCredentials(req.rawHeaders, isGated(target)), this.forwarded(conn, req));
    if (!exchange.hasBody && BODY_BY_DEFAULT.has(req.method ?? '')) headers.push('content-length', '0');
    if (exchange.hasBody) {
      req.on('data', exchange.onBytes);
      req.pause(); // undici resumes the body when it starts sending it; no chunk may flow past it before
    }
    exchange.follow();
    this.agent.dispatch(
      {
        origin: target.host.includes(':') ? `http://[${target.host}]:${target.port}` : `http://${target.host}:${target.port}`,
        path: req.url ?? '/',
        method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
        headers, // a flat raw list: order, case and repeats kept
        body: exchange.hasBody ? req : null,
      },
      exchange,
    );
  }

  /** @internal Called by an Exchange when the app's answer starts. */
  answered(label: string, target: AppRoute): void {
    this.opts.onAnswered?.(label, target);
  }

  /** @internal Called by an Exchange whose request failed before any answer. */
  retryOrFail(x: Exchange, err: Error & { code?: string }): void {
    // A kept-alive connection the app closed meanwhile: safe to try once more when nothing was sent.
    if (!x.retried && !x.hasBody && RETRYABLE.has(x.req.method ?? '') && STALE_SOCKET.has(err.code ?? '')) {
      return this.forward(x.req, x.res, x.conn, x.sandbox, x.target, true);
    }
    void this.connectErrorPage(x.conn, x.target, err).then(async ({ page, running }) => {
      // stopped since the last look, or its app not up yet: a request without a body (nothing of
      // it was sent) is held like any request for a waking sandbox, and sent again once the app answers
      if (page.headers[WAITING_HEADER] && !x.retried && !x.hasBody && !x.res.destroyed) {
        const target = await this.opts.holds.hold(x.conn.label, running);
        // it runs again: its next sleep's first request must wake it, not join this finished wake
        if (target) this.opts.wakes.awake(x.sandbox);
        if (target && !x.res.destroyed) return this.forward(x.req, x.res, x.conn, x.sandbox, target, true);
      }
      if (!x.res.destroyed) this.page(x.req, x.res, page);
    });
  }

  private async onUpgrade(req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const d = await this.decide(req);
    if (!d) return void socket.destroy();
    const { conn, decision } = d;
    if (decision.kind === 'page') return writeRawPage(socket, decision.page, req.method);
    const { sandbox, target } = decision;
    const onBytes = this.opts.activity.listener(sandbox);
    onBytes();
    proxyUpgrade(socket, target, {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      headers: requestHeadersForApp(withoutServiceCredentials(req.rawHeaders, isGated(target)), this.forwarded(conn, req), true),
      head,
    }, {
      timeoutMs: this.opts.connectTimeoutMs,
      idleMs: this.opts.tunnelIdleMs,
      onBytes,
      onError: (err) => void this.connectErrorPage(conn, target, err).then(({ page }) => {
        if (!socket.destroyed) writeRawPage(socket, page, req.method);
      }),
    });
  }
}
