import net from 'node:net';
import { splice } from './splice.ts';

export interface TcpTarget {
  host: string;
  port: number;
}

export interface ForwardOptions {
  connectTimeoutMs: number;
  /** Runs for every chunk in either direction (activity). */
  onBytes?: () => void;
  /** Closes the tunnel after this long without a byte. */
  idleMs?: number;
  /** The upstream could not be reached; the client socket is still open (answer or reset it). */
  onConnectError(err: NodeJS.ErrnoException): void;
}

/**
 * Opens a TCP connection to `target` and splices `client` to it once connected. Until then the
 * client socket stays paused, so its buffered bytes (a replayed ClientHello, say) go upstream
 * first and nothing is lost or half-sent if the upstream cannot be reached.
 *
 * Used by every TCP route: the engine passthrough (raw client socket), the shell and the TCP
 * twins (TLS already taken off).
 */
export function forwardTcp(client: net.Socket, target: TcpTarget, opts: ForwardOptions): net.Socket {
  client.pause();
  const upstream = net.connect({ host: target.host, port: target.port, allowHalfOpen: true, noDelay: true });
  let settled = false;
  const timer = setTimeout(() => {
    const err: NodeJS.ErrnoException = new Error(`connect to ${target.host}:${target.port} timed out`);
    err.code = 'ETIMEDOUT';
    fail(err);
  }, opts.connectTimeoutMs);
  const fail = (err: NodeJS.ErrnoException) => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    upstream.destroy();
    client.off('close', onClientGone);
    opts.onConnectError(err);
  };
  const onClientGone = () => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    upstream.destroy();
  };
  client.once('close', onClientGone);
  upstream.once('error', fail);
  upstream.once('connect', () => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    client.off('close', onClientGone);
    upstream.off('error', fail);
    upstream.setKeepAlive(true, 60_000); // the client side gets it from the listener
    splice(client, upstream, opts.onBytes, opts.idleMs);
  });
  return upstream;
}
