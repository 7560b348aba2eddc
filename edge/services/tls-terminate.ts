import type net from 'node:net';
import tls from 'node:tls';

export interface TerminateOptions {
  secureContext: tls.SecureContext;
  /** ALPN protocols we accept, in our order of preference (`['http/1.1']` for HTTP routes). */
  alpn?: string[];
  /** The handshake must finish within this time (a stalled handshake holds a socket, nothing more). */
  handshakeTimeoutMs: number;
}

/**
 * Takes TLS off a connection whose ClientHello was peeked and put back (the TLS socket reads the
 * replayed bytes first: Node feeds a wrapped socket's buffered data into the TLS engine).
 * Resolves with the server-side TLS socket once the handshake is done.
 */
export function terminateTls(raw: net.Socket, opts: TerminateOptions): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = new tls.TLSSocket(raw, {
      isServer: true,
      secureContext: opts.secureContext,
      ALPNProtocols: opts.alpn,
      requestCert: false,
    });
    const timer = setTimeout(() => fail(new Error(`TLS handshake not done within ${opts.handshakeTimeoutMs} ms`)), opts.handshakeTimeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.off('secure', onSecure);
      socket.destroy();
      raw.destroy();
      reject(err);
    };
    const onError = (err: Error) => fail(err);
    const onSecure = () => {
      clearTimeout(timer);
      socket.off('error', onError);
      socket.off('close', onClose);
      resolve(socket);
    };
    const onClose = () => fail(new Error('connection closed during the TLS handshake'));
    socket.once('secure', onSecure);
    socket.once('error', onError);
    socket.once('close', onClose);
  });
}
