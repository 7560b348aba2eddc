import http from 'node:http';
import type { Duplex } from 'node:stream';

/** A request listener, or a server whose `request`/`upgrade` listeners should get the requests. */
export type HttpHandler = http.RequestListener | http.Server;

export interface HttpLimits {
  /** Complete request headers must arrive within this time (slowloris). */
  headersTimeoutMs: number;
  /** Idle keep-alive connections are closed after this time. */
  keepAliveTimeoutMs: number;
  /** Largest request head (request line and headers). */
  maxHeaderSize: number;
}

/**
 * An HTTP/1.1 server that never listens: the edge hands it TLS sockets it has already
 * terminated (`server.emit('connection', socket)`). Its parser is Node's (llhttp), which refuses
 * ambiguous framing (both Content-Length and Transfer-Encoding, repeated Content-Length, bad
 * chunk sizes) with a 400 before any byte reaches an app.
 *
 * The whole-request timeout is off: uploads and long polls may take as long as they need while
 * bytes flow; only the request head has a deadline.
 */
export function createEdgeHttpServer(limits: HttpLimits, onRequest?: http.RequestListener): http.Server {
  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: 0,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      maxHeaderSize: limits.maxHeaderSize,
      connectionsCheckingInterval: Math.max(250, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
      noDelay: true,
    },
    onRequest,
  );
  // Node starts the timer that enforces headersTimeout when a server starts listening; this one
  // never listens, so start it the same way (the event has no other listener here).
  server.emit('listening');
  return server;
}

/**
 * The server the edge feeds for a handler. For a caller's own server (a Fastify instance's
 * `server`, say) the edge parses the requests with its own limits and re-emits `request` and
 * `upgrade` on that server, which never needs to listen.
 */
export function serverFor(handler: HttpHandler, limits: HttpLimits): http.Server {
  if (typeof handler === 'function') return createEdgeHttpServer(limits, handler);
  const target = handler;
  const server = createEdgeHttpServer(limits, (req, res) => target.emit('request', req, res));
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!target.emit('upgrade', req, socket, head)) socket.destroy();
  });
  server.on('checkContinue', (req, res) => {
    if (target.listenerCount('checkContinue') > 0) target.emit('checkContinue', req, res);
    else {
      res.writeContinue();
      target.emit('request', req, res);
    }
  });
  return server;
}
