import http from 'node:http';
import type { Duplex } from 'node:stream';

/** A request listener, or a server whose `request`/`upgrade` listeners should get the requests. */
export type HttpHandler = http.RequestListener | http.Server;

export interface HttpLimits {
  /** Complete request headers must arrive within this time (slowloris). */
  headersTimeoutMs: number;
  /** Idle keep-alive connections are closed after this time. */
  keepAliveTimeoutMs: number;
  /** A request body we are waiting for gets no byte for this long: the connection is closed. */
  bodyIdleTimeoutMs: number;
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
 * bytes flow. The request head has a deadline, and a body has an idle deadline (bodyIdle).
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
  server.prependListener('request', (req: http.IncomingMessage) => bodyIdle(req, limits.bodyIdleTimeoutMs));
  // Node starts the timer that enforces headersTimeout when a server starts listening; this one
  // never listens, so start it the same way (the event has no other listener here).
  server.emit('listening');
  return server;
}

/**
 * Closes the connection of a client that stops sending a body it announced (a slowloris on the
 * body rather than the head). Only the client's silence counts: while whoever reads the body has
 * not started, or has paused it (an app reading slowly), or has bytes left to read, the deadline
 * starts over. Uses the socket's idle timer, which every byte either way resets.
 */
function bodyIdle(req: http.IncomingMessage, ms: number): void {
  const announced = req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0';
  if (!announced || ms <= 0) return;
  const socket = req.socket;
  const onTimeout = () => {
    if (req.complete) return;
    const waitingForClient = req.readableFlowing === true && req.readableLength === 0;
    if (waitingForClient) socket.destroy();
    else socket.setTimeout(ms);
  };
  const done = () => {
    req.off('timeout', onTimeout);
    // unless Node has set its own since (the keep-alive timeout after an early answer)
    if (!socket.destroyed && socket.timeout === ms) socket.setTimeout(0);
  };
  // A `timeout` listener on the request replaces Node's own reaction (destroying the socket).
  req.on('timeout', onTimeout);
  req.once('end', done);
  req.once('close', done);
  socket.setTimeout(ms);
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
