import http from 'node:http';
import { hostWithoutPort } from '../services/headers.ts';
import { bindPort, type BoundPort } from './bound-port.ts';

export type RedirectPort = BoundPort;

const HOST = /^([a-z0-9-]+(\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])$/;

/**
 * Port 80: every request is sent to the same host and path over HTTPS (301). The HTTPS port is
 * kept in the address when it is not 443. A request without a usable Host goes to `<domain>`.
 */
export async function listenHttpRedirect(opts: { port: number; host?: string; domain: string; httpsPort: number }): Promise<RedirectPort> {
  const server = http.createServer({ headersTimeout: 10_000, requestTimeout: 15_000, keepAliveTimeout: 2_000, maxHeaderSize: 8192 }, (req, res) => {
    let host = hostWithoutPort(req.headers.host);
    if (!HOST.test(host)) host = opts.domain;
    const port = opts.httpsPort === 443 ? '' : `:${opts.httpsPort}`;
    const path = req.url?.startsWith('/') ? req.url : '/';
    const location = `https://${host}${port}${path}`;
    res.writeHead(301, { location, 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(location) + 1 });
    res.end(req.method === 'HEAD' ? undefined : `${location}\n`);
  });
  return bindPort(server, opts.port, opts.host);
}
