import type net from 'node:net';
import tls from 'node:tls';
import { adoptClientAddress, adoptedClientAddress } from '../listener/proxy-header.ts';

export interface TerminateOptions {
  secureContext: tls.SecureContext;
  /** ALPN protocols we accept, in our order of preference (`['http/1.1']` for HTTP routes). */
  alpn?: string[];
  /** The handshake must finish within this time (a stalled handshake holds a socket, nothing more). */
  handshakeTimeoutMs: number;
  /**
   * Stream buffer of the TLS socket, each way (Node's default: 16 KiB). Bulk routes set it higher:
   * with 16 KiB every 64 KiB chunk written fills it, so the source is paused and resumed per chunk
   * and each chunk is encrypted and sent alone; a larger buffer lets writes queue and go out together.
   */
  highWaterMark?: number;
}

/**
 * A handshake the client did not finish: it aborted (a browser that does not trust the certificate
 * yet sends `certificate unknown`), stalled or closed. Routine on a public port, so logged at debug.
 */
export class HandshakeFailed extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'HandshakeFailed';
  }
}

/**
 * Takes TLS off a connection whose ClientHello was peeked and put back (the TLS socket reads the
 * replayed bytes first: Node feeds a wrapped socket's buffered data into the TLS engine).
 * Resolves with the server-side TLS socket once the handshake is done.
 */
export function terminateTls(raw: net.Socket, opts: TerminateOptions): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    // `highWaterMark` is passed on to the socket's streams by Node; @types/node does not list it.
    const options: tls.TLSSocketOptions & { highWaterMark?: number } = {
      isServer: true,
      secureContext: opts.secureContext,
      ALPNProtocols: opts.alpn,
      requestCert: false,
    };
    if (opts.highWaterMark) options.highWaterMark = opts.highWaterMark;
    const socket = new tls.TLSSocket(raw, options);
    const client = adoptedClientAddress(raw); // a connection handed over by the data plane
    if (client) adoptClientAddress(socket, client.address, client.port);
    const timer = setTimeout(() => fail(new HandshakeFailed(`TLS handshake not done within ${opts.handshakeTimeoutMs} ms`)), opts.handshakeTimeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.off('secure', onSecure);
      socket.destroy();
      raw.destroy();
      reject(err);
    };
    const onError = (err: Error) => fail(new HandshakeFailed(`TLS handshake failed: ${err.message}`, { cause: err }));
    const onSecure = () => {
      clearTimeout(timer);
      socket.off('error', onError);
      socket.off('close', onClose);
      resolve(socket);
    };
    const onClose = () => fail(new HandshakeFailed('connection closed during the TLS handshake'));
    socket.once('secure', onSecure);
    socket.once('error', onError);
    socket.once('close', onClose);
  });
}
