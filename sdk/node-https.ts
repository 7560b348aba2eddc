import http from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';

/**
 * A fetch over Node's own https client, for a service whose certificate is signed by its own CA
 * (an export folder's service-ca.pem): `ca` is trusted besides the system's CAs (pass both, as
 * `[...tls.rootCertificates, pem]`). Request and response bodies stream both ways.
 */
export function fetchTrusting(ca: string[]): (request: Request) => Promise<Response> {
  return (request) => new Promise<Response>((resolve, reject) => {
    const url = new URL(request.url);
    const client = url.protocol === 'http:' ? http : https;
    const headers = Object.fromEntries(request.headers);
    const req = client.request(url, { method: request.method, headers, ca, signal: request.signal }, (res) => {
      const empty = res.statusCode === 204 || res.statusCode === 304 || request.method === 'HEAD';
      const body = empty ? null : (Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>);
      if (empty) res.resume();
      const answer = new Headers();
      for (const [name, value] of Object.entries(res.headers)) {
        for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) answer.append(name, v);
      }
      resolve(new Response(body, { status: res.statusCode ?? 502, statusText: res.statusMessage ?? '', headers: answer }));
    });
    req.on('error', reject);
    if (request.body) Readable.fromWeb(request.body as unknown as WebReadableStream<Uint8Array>).pipe(req);
    else req.end();
  });
}
