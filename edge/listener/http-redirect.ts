import http from 'node:http';
import type net from 'node:net';
import { hostWithoutPort } from '../services/headers.ts';

export interface RedirectPort {
  readonly port: number;
  close(): Promise<void>;
}

const HOST = /^([a-z0-9-]+(\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])$/;

/**
 * Port 80: every request is sent to the same host and path over HTTPS (301). The HTTPS port is
 * kept in the address when it is not 443. A request without a usable Host goes to `<domain>`.
 */
export async function listenHttpRedirect(opts: { port: number; host?: string; domain: string; httpsPort: number }): Promise<RedirectPort> {
  const sockets = new Set<net.Socket>();
  const server = http.createServer({ headersTimeout: 10_000, requestTimeout: 15_000, keepAliveTimeout: 2_000, maxHeaderSize: 8192 }, (req, res) => {
    let host = hostWithoutPort(req.headers.host);
    if (!HOST.test(host)) host = opts.domain;
    const port = opts.httpsPort === 443 ? '' : `:${opts.httpsPort}`;
    const path = req.url?.startsWith('/') ? req.url : '/';
    const location = `https://${host}${port}${path}`;
    res.writeHead(301, { location, 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(location) + 1 });
    res.end(req.method === 'HEAD' ? undefined : `${location}\n`);
  });
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}
