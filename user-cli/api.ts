import https from 'node:https';
import http from 'node:http';
import type { Readable } from 'node:stream';
import { UsageError, type Settings } from './settings.ts';

/** An answer of the API that is an error: its code and message say what to do. */
export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

export interface Call {
  method?: string;
  json?: unknown;
  /** A streamed body (uploads). */
  body?: Readable;
  length?: number;
  headers?: Record<string, string>;
}

/**
 * The service's API over https (node's own client: runs on Node 18 without a package, trusts the
 * export folder's service CA). The token goes only into the Authorization header.
 */
export class Api {
  constructor(readonly settings: Settings) {}

  /** The response stream of a 2xx answer; an error answer is thrown as ApiError. */
  async open(route: string, call: Call = {}): Promise<http.IncomingMessage> {
    const { token } = this.settings;
    if (!token) throw new UsageError('no token: set SVC_TOKEN, or run in an export folder (svc.env), or pass --env FILE');
    const url = new URL(route.replace(/^\//, ''), this.settings.url);
    const headers: Record<string, string | number> = { authorization: `Bearer ${token}`, ...call.headers };
    const payload = call.json === undefined ? undefined : Buffer.from(JSON.stringify(call.json));
    if (payload) Object.assign(headers, { 'content-type': 'application/json', 'content-length': payload.length });
    if (call.body) Object.assign(headers, { 'content-type': 'application/octet-stream', ...(call.length !== undefined ? { 'content-length': call.length } : {}) });
    const client = url.protocol === 'http:' ? http : https;
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = client.request(url, { method: call.method ?? (payload || call.body ? 'POST' : 'GET'), headers, ca: this.settings.ca }, resolve);
      req.on('error', (err) => reject(reachError(err as NodeJS.ErrnoException, this.settings.url)));
      if (call.body) call.body.pipe(req);
      else req.end(payload);
    });
    if ((res.statusCode ?? 0) < 300) return res;
    const text = await readAll(res);
    let body: { error?: { code?: string; message?: string } } = {};
    try { body = JSON.parse(text); } catch { /* not JSON: a proxy's page */ }
    const code = body.error?.code ?? `HTTP_${res.statusCode}`;
    if (res.statusCode === 401) throw new ApiError(401, code, 'the token was refused (missing, wrong or revoked): export the sandbox again for a new svc.env, or set SVC_TOKEN');
    throw new ApiError(res.statusCode ?? 0, code, body.error?.message ?? `the service answered ${res.statusCode} ${res.statusMessage ?? ''} at ${url.origin}${url.pathname}: is SVC_URL the API address (https://<domain>/api)?`);
  }

  async json<T = any>(route: string, call: Call = {}): Promise<T> {
    return JSON.parse(await readAll(await this.open(route, call))) as T;
  }
}

export async function readAll(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function reachError(err: NodeJS.ErrnoException, url: URL): Error {
  const where = url.origin;
  if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') return new UsageError(`cannot resolve ${url.hostname} (SVC_URL): check the address, or make the name resolve to the service (see the export folder's README)`);
  if (err.code === 'ECONNREFUSED') return new UsageError(`nothing answers at ${where} (SVC_URL): check the address and port`);
  if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY/.test(err.code ?? '')) return new UsageError(`the certificate of ${where} is not trusted: run in the export folder (its service-ca.pem is trusted) or pass --env <folder>/svc.env`);
  return new UsageError(`cannot reach ${where}: ${err.message}`);
}
