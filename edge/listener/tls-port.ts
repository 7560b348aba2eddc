import net from 'node:net';
import type { Logger } from '../../core/logger.ts';
import { plainHttpOnTlsPage } from '../pages/pages.ts';
import { writeRawPage } from '../pages/respond.ts';
import { HandshakeFailed } from '../services/tls-terminate.ts';
import { bindPort, type BoundPort } from './bound-port.ts';
import { readProxyHeader } from './proxy-header.ts';
import { PeekError, peekClientHello, type PeekedHello } from './sni-peek.ts';

export interface TlsPortOptions {
  /** A TCP port, or a unix socket path the data plane hands connections to (with `proxyProtocol`). */
  port: number | string;
  /** Every connection starts with a PROXY v2 header (HAProxy's `send-proxy-v2`): the client is read from it. */
  proxyProtocol?: boolean;
  host?: string;
  /** The ClientHello must arrive within this time. */
  clientHelloTimeoutMs: number;
  /** Connections one client address may hold open at once; more are closed at once. */
  connectionsPerClient: number;
  logger: Logger;
  /** Takes a connection whose ClientHello was read and put back; the socket is paused. */
  dispatch(socket: net.Socket, hello: PeekedHello): void | Promise<void>;
}

export type TlsPort = BoundPort;

const HTTP_METHOD = /^(GET|HEAD|POST|PUT|DELETE|OPTIONS|PATCH|CONNECT|TRACE) /;

/**
 * The one public port. Every connection starts here: read the ClientHello (SNI, ALPN) without
 * answering it, then hand the connection, bytes put back, to `dispatch`. Garbage is closed;
 * a plain-HTTP request gets a short "use HTTPS" answer first.
 */
export async function listenTlsPort(opts: TlsPortOptions): Promise<TlsPort> {
  const perClient = new Map<string, number>();
  const server = net.createServer({ allowHalfOpen: true, noDelay: true, keepAlive: true, keepAliveInitialDelay: 60_000 }, (socket) => {
    socket.on('error', (err) => opts.logger.debug({ err }, 'edge: client socket error'));
    if (!opts.proxyProtocol) return accept(socket);
    readProxyHeader(socket, opts.clientHelloTimeoutMs).then(
      () => {
        accept(socket); // the ClientHello peek listens first, then the bytes after the header flow
        socket.resume();
      },
      (err: Error) => {
        opts.logger.warn({ err }, 'edge: bad PROXY header from the data plane');
        socket.destroy();
      },
    );
  });
  const accept = (socket: net.Socket) => {
    const client = socket.remoteAddress ?? '';
    const open = perClient.get(client) ?? 0;
    if (open >= opts.connectionsPerClient) {
      opts.logger.info({ client }, 'edge: too many connections from one client; closed');
      return void socket.destroy();
    }
    perClient.set(client, open + 1);
    socket.once('close', () => {
      const left = (perClient.get(client) ?? 1) - 1;
      if (left > 0) perClient.set(client, left);
      else perClient.delete(client);
    });
    peekClientHello(socket, opts.clientHelloTimeoutMs).then(
      (hello) => {
        try {
          const r = opts.dispatch(socket, hello);
          if (r) r.catch((err) => fail(socket, err));
        } catch (err) {
          fail(socket, err);
        }
      },
      (err: PeekError) => {
        opts.logger.debug({ reason: err.reason, msg: err.message }, 'edge: no ClientHello');
        if (err.reason === 'not-tls' && HTTP_METHOD.test(err.bytes.subarray(0, 8).toString('latin1')) && !socket.destroyed) {
          writeRawPage(socket, plainHttpOnTlsPage());
          setTimeout(() => socket.destroy(), 1000).unref();
        } else {
          socket.destroy();
        }
      },
    );
  };
  const fail = (socket: net.Socket, err: unknown) => {
    if (err instanceof HandshakeFailed) opts.logger.debug({ err }, 'edge: TLS handshake not finished');
    else opts.logger.warn({ err }, 'edge: dispatch failed');
    socket.destroy();
  };
  server.on('error', (err) => opts.logger.error({ err }, 'edge: TLS port error'));
  return bindPort(server, opts.port, opts.host);
}
