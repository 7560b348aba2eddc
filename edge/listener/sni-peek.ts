import type net from 'node:net';
import { MAX_CLIENT_HELLO, parseClientHello } from './client-hello.ts';

export interface PeekedHello {
  /** Lowercased server name, without a trailing dot; null when the client sent none. */
  serverName: string | null;
  alpn: string[];
}

export class PeekError extends Error {
  constructor(
    message: string,
    /** `timeout`: the client was too slow; `not-tls`: the bytes are no ClientHello; `closed`: it went away. */
    readonly reason: 'timeout' | 'not-tls' | 'closed',
    /** What was read, for a polite answer to a plain-HTTP client. */
    readonly bytes: Buffer,
  ) {
    super(message);
    this.name = 'PeekError';
  }
}

/**
 * Reads the ClientHello from a fresh connection without answering it, then puts every byte back
 * (`socket.unshift`) and pauses the socket: whoever takes the connection next (a TLS server
 * socket, or a passthrough pipe) reads the stream from its first byte.
 *
 * A deadline guards the peek: a client that connects and sends nothing (or dribbles) is dropped
 * after `timeoutMs`. Memory is bounded by MAX_CLIENT_HELLO.
 */
export function peekClientHello(socket: net.Socket, timeoutMs: number): Promise<PeekedHello> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (err: PeekError | null, hello?: PeekedHello) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onGone);
      socket.off('close', onGone);
      socket.off('error', onGone);
      const bytes = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      if (err) return reject(err);
      socket.pause();
      if (bytes.length) socket.unshift(bytes);
      resolve(hello!);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      const r = parseClientHello(all);
      if (r.status === 'ok') {
        let name = r.serverName?.toLowerCase() ?? null;
        if (name?.endsWith('.')) name = name.slice(0, -1);
        finish(null, { serverName: name || null, alpn: r.alpn });
      } else if (r.status === 'not-tls') {
        finish(new PeekError(r.reason, 'not-tls', all));
      } else if (size > MAX_CLIENT_HELLO) {
        finish(new PeekError('ClientHello too large', 'not-tls', all));
      }
    };
    const onGone = () => finish(new PeekError('connection closed before the ClientHello', 'closed', Buffer.alloc(0)));
    const timer = setTimeout(
      () => finish(new PeekError(`no ClientHello within ${timeoutMs} ms`, 'timeout', Buffer.alloc(0))),
      timeoutMs,
    );
    socket.on('data', onData);
    socket.once('end', onGone);
    socket.once('close', onGone);
    socket.once('error', onGone);
  });
}
