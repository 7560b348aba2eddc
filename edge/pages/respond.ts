import type http from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Page } from './pages.ts';

/**
 * Answers with a page. When the request carries a body we did not read, the connection is closed
 * afterwards instead of reading (maybe many megabytes of) a body nobody wants.
 */
export function sendPage(req: http.IncomingMessage, res: http.ServerResponse, page: Page): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = Buffer.from(page.body);
  const headers: Record<string, string | number> = { ...page.headers, 'content-length': body.length };
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (hasBody && !req.readableEnded) headers.connection = 'close';
  res.writeHead(page.status, headers);
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** The head of a page as a raw HTTP/1.1 response, with the given extra header lines. */
export function rawPageHead(page: Page, ...extra: string[]): string {
  const lines = [`HTTP/1.1 ${page.status} ${STATUS_CODES[page.status] ?? ''}`];
  for (const [k, v] of Object.entries(page.headers)) lines.push(`${k}: ${v}`);
  lines.push(`content-length: ${Buffer.byteLength(page.body)}`, ...extra, '', '');
  return lines.join('\r\n');
}

/** Writes a page as a raw HTTP/1.1 response on a socket (upgrade requests) and closes it. */
export function writeRawPage(socket: Duplex, page: Page, method = 'GET'): void {
  const head = rawPageHead(page, 'connection: close');
  socket.end(method === 'HEAD' ? head : Buffer.concat([Buffer.from(head), Buffer.from(page.body)]));
}
