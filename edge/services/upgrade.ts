import http, { STATUS_CODES } from 'node:http';
import type net from 'node:net';
import type { AppRoute } from '../backend.ts';
import { responseHeadersObject } from './headers.ts';
import { splice } from './splice.ts';

export interface UpgradeRequest {
  method: string;
  url: string;
  /** The handshake's headers for the app, a flat raw list (requestHeadersForApp with keepUpgrade). */
  headers: string[];
  /** Bytes the client sent after its handshake: tunnel bytes, sent up only after a 101. */
  head: Buffer;
}

export interface UpgradeOptions {
  /** Connecting and waiting for the app's answer head. */
  timeoutMs: number;
  onBytes: () => void;
  /** Closes the websocket (or other tunnel) after this long without a byte. */
  idleMs: number;
  /** Nothing was answered yet (the app was unreachable or silent); the client socket is still open. */
  onError(err: NodeJS.ErrnoException): void;
}

/**
 * Asks the app to upgrade a connection (a websocket handshake). Only a 101 turns the client's
 * connection into a tunnel; any other answer goes back as a response with `connection: close` and
 * the connection ends with it. Until then the client's socket stays paused, so bytes it sent
 * after its handshake — maybe a second request with forged X-Forwarded-* headers, meant to slip
 * past the edge's parser inside the "tunnel" — never reach the app.
 */
export function proxyUpgrade(client: net.Socket, target: AppRoute, request: UpgradeRequest, opts: UpgradeOptions): void {
  client.pause();
  const req = http.request({
    host: target.host,
    port: target.port,
    method: request.method,
    path: request.url,
    headers: request.headers,
    setHost: false,
    agent: false,
  });
  let answered = false;
  const timer = setTimeout(() => {
    const err: NodeJS.ErrnoException = new Error(`the app at ${target.host}:${target.port} did not answer the upgrade in time`);
    err.code = 'ETIMEDOUT';
    req.destroy(err);
  }, opts.timeoutMs);
  const clientGone = () => req.destroy();
  client.once('close', clientGone);
  const answer = () => {
    answered = true;
    clearTimeout(timer);
    client.off('close', clientGone);
    opts.onBytes();
  };

  req.once('upgrade', (res: http.IncomingMessage, upstream: net.Socket, upstreamHead: Buffer) => {
    answer();
    client.write(headText(res, res.rawHeaders));
    if (upstreamHead.length) client.write(upstreamHead);
    if (request.head.length) upstream.write(request.head);
    upstream.setNoDelay(true);
    splice(client, upstream, opts.onBytes, opts.idleMs);
  });

  req.once('response', (res: http.IncomingMessage) => {
    answer();
    const headers = responseHeadersObject(res.headers);
    const raw = Object.entries(headers).flatMap(([k, v]) => (Array.isArray(v) ? v.flatMap((x) => [k, x]) : [k, v]));
    client.write(headText(res, [...raw, 'connection', 'close']));
    client.once('close', () => res.destroy());
    res.on('data', opts.onBytes);
    res.pipe(client, { end: false });
    // The body ends where the connection does (no chunked framing to rebuild); nothing else is read.
    res.once('end', () => client.destroySoon());
    res.once('error', () => client.destroy());
  });

  req.once('error', (err: NodeJS.ErrnoException) => {
    clearTimeout(timer);
    client.off('close', clientGone);
    if (answered) client.destroy();
    else if (!client.destroyed) opts.onError(err);
  });
  req.end();
}

function headText(res: http.IncomingMessage, raw: string[]): string {
  let text = `HTTP/1.1 ${res.statusCode} ${res.statusMessage || STATUS_CODES[res.statusCode ?? 0] || ''}\r\n`;
  for (let i = 0; i < raw.length; i += 2) text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  return text + '\r\n';
}
