import type http from 'node:http';
import type { Dispatcher } from 'undici';
import type { AppRoute } from '../backend.ts';
import { responseHeadersObject } from './headers.ts';

/** What the listener learnt about a terminated app connection. */
export interface AppConnection {
  /** The SNI: the only host this connection may ask for. */
  serverName: string;
  /** Route label (`serverName` without `.<domain>`). */
  label: string;
  clientIp: string;
}

/** What the app proxy (services/http-proxy.ts) gives the exchanges it starts. */
export interface ExchangeOwner {
  /** The activity callback for a sandbox. */
  activityFor(sandbox: string): () => void;
  /** The connections to apps; an Exchange releases their held ends after a resume. */
  readonly sockets: { release(): void };
  /** The app's answer started. */
  answered(label: string, target: AppRoute): void;
  /** The request failed before any answer: sent again, or answered with a page. */
  retryOrFail(x: Exchange, err: Error & { code?: string }): void;
}

function requestHasBody(req: http.IncomingMessage): boolean {
  if (req.headers['transfer-encoding'] !== undefined) return true;
  const cl = req.headers['content-length'];
  return cl !== undefined && cl !== '0';
}

// Listeners shared by all responses (EventEmitter calls them with `this` = the response): no
// closure per request.
const kExchange = Symbol('edge.exchange');
type ExchangeResponse = http.ServerResponse & { [kExchange]?: Exchange };
function onResponseClose(this: ExchangeResponse): void {
  this[kExchange]?.clientGone();
}
function onResponseDrain(this: ExchangeResponse): void {
  this[kExchange]?.drained();
}

/**
 * One request to an app, as undici's dispatch handler: streams the answer to the client with
 * backpressure. A class rather than a handful of closures: fewer allocations per request.
 */
export class Exchange implements Dispatcher.DispatchHandler {
  readonly hasBody: boolean;
  readonly onBytes: () => void;
  private controller: Dispatcher.DispatchController | null = null;
  private started = false;

  constructor(
    private readonly proxy: ExchangeOwner,
    readonly req: http.IncomingMessage,
    readonly res: http.ServerResponse,
    readonly conn: AppConnection,
    readonly sandbox: string,
    readonly target: AppRoute,
    readonly retried: boolean,
  ) {
    this.hasBody = requestHasBody(req);
    this.onBytes = proxy.activityFor(sandbox);
    this.onBytes();
  }

  /** The response's close and drain go to this exchange (listeners shared by all responses). */
  follow(): void {
    (this.res as ExchangeResponse)[kExchange] = this;
    this.res.once('close', onResponseClose);
  }

  /** The client went away before the answer was complete: stop the app's work too. */
  clientGone(): void {
    if (!this.res.writableFinished) this.controller?.abort(new Error('client went away'));
  }

  drained(): void {
    this.controller?.resume();
    this.proxy.sockets.release();
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>, statusMessage?: string): void {
    if (statusCode < 200) return; // 1xx: Node answered 100-continue to the client already
    this.started = true;
    this.proxy.answered(this.conn.label, this.target);
    this.res.writeHead(statusCode, statusMessage, responseHeadersObject(headers));
    // Streams without a length (SSE, chunked) must show their head at once, not with the first chunk.
    if (headers['content-length'] === undefined) this.res.flushHeaders();
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.onBytes();
    if (!this.res.write(chunk)) {
      c.pause(); // backpressure: the app waits for a slow client instead of filling our memory
      this.res.once('drain', onResponseDrain);
    }
  }

  onResponseEnd(): void {
    this.res.off('close', onResponseClose);
    this.res.end();
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error & { code?: string }): void {
    this.res.off('close', onResponseClose);
    if (this.started || this.res.headersSent) return void this.res.destroy(); // a cut, not an end
    if (this.res.destroyed) return;
    this.proxy.retryOrFail(this, err);
  }
}
