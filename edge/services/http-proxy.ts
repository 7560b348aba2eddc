import http from 'node:http';
import type net from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../core/logger.ts';
import { TOO_MANY_WAKES, type AppRoute, type EdgeBackend, type ResolvedApp } from '../backend.ts';
import {
  badGatewayPage,
  loopbackOnlyPage,
  misdirectedPage,
  notFoundPage,
  tooManyWakesPage,
  unavailablePage,
  waitingPage,
  type Page,
} from '../pages/pages.ts';
import { sendPage, writeRawPage } from '../pages/respond.ts';
import type { ActivityMeter } from './activity.ts';
import { hostWithoutPort, requestHeadersForApp, responseHeadersForClient, type ForwardedFor } from './headers.ts';
import { createEdgeHttpServer, type HttpLimits } from './http-server.ts';
import { forwardTcp } from './tcp-forward.ts';
import type { WakeGate } from './wake-gate.ts';

/** What the listener learnt about a terminated app connection. */
export interface AppConnection {
  /** The SNI: the only host this connection may ask for. */
  serverName: string;
  /** Route label (`serverName` without `.<domain>`). */
  label: string;
  clientIp: string;
}

export interface AppProxyOptions {
  backend: EdgeBackend;
  activity: ActivityMeter;
  wakes: WakeGate;
  limits: HttpLimits;
  /** The public HTTPS port, for X-Forwarded-Port. */
  publicPort: number;
  connectTimeoutMs: number;
  logger: Logger;
}

/** Methods Node sends with chunked framing by default; a body-less one gets `content-length: 0` instead. */
const BODY_BY_DEFAULT = new Set(['POST', 'PUT', 'PATCH']);
const RETRYABLE = new Set(['GET', 'HEAD', 'OPTIONS']);

function requestHasBody(req: http.IncomingMessage): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const cl = req.headers['content-length'];
  return cl !== undefined && cl !== '0';
}

type Decision =
  | { kind: 'page'; page: Page }
  | { kind: 'forward'; sandbox: string; target: AppRoute };

/**
 * The reverse proxy for app addresses: routes by the connection's SNI label, streams bodies both
 * ways without buffering (pipe keeps backpressure), keeps connections to apps alive, upgrades
 * (websockets) become a raw TCP splice, and every chunk counts as activity.
 */
export class AppHttpProxy {
  readonly server: http.Server;
  private readonly conns = new WeakMap<object, AppConnection>();
  private readonly agent = new http.Agent({ keepAlive: true, scheduling: 'lifo', maxFreeSockets: 64 });

  constructor(private readonly opts: AppProxyOptions) {
    this.server = createEdgeHttpServer(opts.limits, (req, res) => {
      this.onRequest(req, res).catch((err) => {
        opts.logger.error({ err }, 'edge: app request failed');
        if (!res.headersSent) sendPage(req, res, unavailablePage(req.headers.host ?? '', 'internal error'));
        else res.destroy();
      });
    });
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
    this.agent.destroy();
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
    if (app.status === 'running') {
      this.opts.wakes.awake(app.sandbox);
      if (app.target) return { conn, decision: { kind: 'forward', sandbox: app.sandbox, target: app.target } };
      return { conn, decision: { kind: 'page', page: waitingPage(conn.serverName, 'starting') } };
    }
    try {
      await this.opts.wakes.wake(app.sandbox);
    } catch (err) {
      const e = err as Error & { code?: string; retryAfter?: number };
      if (e.code === TOO_MANY_WAKES) {
        const retry = Number.isFinite(e.retryAfter) && e.retryAfter! > 0 ? Math.ceil(e.retryAfter!) : 60;
        return { conn, decision: { kind: 'page', page: tooManyWakesPage(conn.serverName, e.message, retry) } };
      }
      this.opts.logger.warn({ err, sandbox: app.sandbox }, 'edge: requestWake failed');
      return { conn, decision: { kind: 'page', page: unavailablePage(conn.serverName, 'the sandbox could not be woken') } };
    }
    return { conn, decision: { kind: 'page', page: waitingPage(conn.serverName, 'waking') } };
  }

  private forwarded(conn: AppConnection, req: http.IncomingMessage): ForwardedFor {
    return { clientIp: conn.clientIp, host: req.headers.host ?? conn.serverName, port: this.opts.publicPort };
  }

  /** The page for an app that could not be reached. */
  private connectErrorPage(host: string, target: AppRoute, err: NodeJS.ErrnoException): Page {
    if (err.code === 'ECONNREFUSED') return target.loopbackOnly ? loopbackOnlyPage(host, target.port) : waitingPage(host, 'starting');
    return badGatewayPage(host, err.code === 'ETIMEDOUT' ? 'the connection timed out' : `the connection failed (${err.code ?? err.message})`);
  }

  private async onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const d = await this.decide(req);
    if (!d) return void res.destroy();
    const { conn, decision } = d;
    if (decision.kind === 'page') return sendPage(req, res, decision.page);
    this.forward(req, res, conn, decision.sandbox, decision.target, false);
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    conn: AppConnection,
    sandbox: string,
    target: AppRoute,
    retried: boolean,
  ): void {
    const onBytes = this.opts.activity.listener(sandbox);
    onBytes();
    const hasBody = requestHasBody(req);
    const headers = requestHeadersForApp(req.rawHeaders, this.forwarded(conn, req));
    if (!hasBody && BODY_BY_DEFAULT.has(req.method ?? '')) headers.push('content-length', '0');
    const up = http.request({
      host: target.host,
      port: target.port,
      method: req.method,
      path: req.url,
      headers: headers as unknown as http.OutgoingHttpHeaders, // a flat raw list: order, case and repeats kept
      agent: this.agent,
      timeout: this.opts.connectTimeoutMs,
    });
    let responded = false;
    // The timeout guards the connect and the wait for the response head; once the app answers,
    // a slow stream (SSE, long download) may be quiet as long as it likes.
    up.once('timeout', () => {
      if (!responded) up.destroy(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }));
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (responded || res.headersSent) return void res.destroy();
      // A kept-alive connection the app closed meanwhile: safe to try once more when nothing was sent.
      if (!retried && up.reusedSocket && err.code === 'ECONNRESET' && !hasBody && RETRYABLE.has(req.method ?? '')) {
        return this.forward(req, res, conn, sandbox, target, true);
      }
      if (res.destroyed) return;
      sendPage(req, res, this.connectErrorPage(conn.serverName, target, err));
    });
    up.on('response', (upRes) => {
      responded = true;
      up.setTimeout(0);
      upRes.on('data', onBytes);
      res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, responseHeadersForClient(upRes.rawHeaders));
      // Streams without a length (SSE, chunked) must show their head at once, not with the first chunk.
      if (upRes.headers['content-length'] === undefined) res.flushHeaders();
      upRes.pipe(res);
      upRes.once('close', () => {
        if (!upRes.complete) res.destroy(); // the app died mid-answer: the client must see a cut, not an end
      });
    });
    res.once('close', () => {
      if (!res.writableFinished) up.destroy(); // the client went away: stop the app's work too
    });
    if (!hasBody) {
      up.end();
      return;
    }
    req.on('data', onBytes);
    req.pipe(up);
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
    // Raw splice: the handshake goes up as it came (plus our X-Forwarded-*); whatever the app
    // answers (101, or a plain response) comes back as raw bytes.
    const headers = requestHeadersForApp(req.rawHeaders, this.forwarded(conn, req), true);
    let headText = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`;
    for (let i = 0; i < headers.length; i += 2) headText += `${headers[i]}: ${headers[i + 1]}\r\n`;
    const upstream = forwardTcp(socket, target, {
      connectTimeoutMs: this.opts.connectTimeoutMs,
      onBytes,
      onConnectError: (err) => writeRawPage(socket, this.connectErrorPage(conn.serverName, target, err), req.method),
    });
    upstream.write(headText + '\r\n');
    if (head.length) upstream.write(head);
  }
}
