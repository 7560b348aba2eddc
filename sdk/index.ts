/**
 * svc-sdk: a typed client of the sandbox service's API. The types (`paths`, `components`) are
 * generated from the service's OpenAPI document (sdk/schema.d.ts, `npm run sdk:generate`); the
 * client is openapi-fetch over them: every route, its parameters, body and answers checked by
 * TypeScript. README.md shows one example per call.
 */
import createClient, { type Client } from 'openapi-fetch';
import type { components, paths } from './schema.d.ts';
import { fetchTrusting } from './node-https.ts';

export type { components, paths };
export type SvcClient = Client<paths>;
/** A schema of the API by name: `Schema<'Secret'>`, `Schema<'RegistryReport'>`. */
export type Schema<Name extends keyof components['schemas']> = components['schemas'][Name];

export interface SvcClientOptions {
  /** The service's address, `https://<domain>` (a trailing `/api` is taken off). */
  url: string | URL;
  /** A personal access token (`svc_…`); sent only in the Authorization header. */
  token: string;
  /** CAs to trust (Node): the system's plus e.g. an export folder's service-ca.pem. */
  ca?: string[];
  /** Another fetch (tests, proxies); by default the platform's, or Node's https with `ca`. */
  fetch?: (request: Request) => Promise<Response>;
}

/** An answer of the API that is an error: its stable code (`SVC_…`) and message say what to do. */
export class SvcError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
    this.name = 'SvcError';
  }
}

export function createSvcClient(options: SvcClientOptions): SvcClient {
  const base = new URL(options.url);
  base.pathname = base.pathname.replace(/\/+$/, '').replace(/\/api$/, '');
  return createClient<paths>({
    baseUrl: base.toString().replace(/\/+$/, ''),
    headers: { authorization: `Bearer ${options.token}` },
    ...(options.fetch ? { fetch: options.fetch } : options.ca ? { fetch: fetchTrusting(options.ca) } : {}),
  });
}

/** What every call of the client resolves with (openapi-fetch's FetchResponse, as far as `must` reads it). */
export interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The data of a successful answer; an error answer is thrown as SvcError. */
export function must<D>(result: Answer<D>): NonNullable<D> {
  const { response } = result;
  if (response.ok) return result.data as NonNullable<D>;
  const body = result.error as { error?: { code?: string; message?: string } } | string | undefined;
  const error = typeof body === 'object' ? body?.error : undefined;
  throw new SvcError(response.status, error?.code ?? `HTTP_${response.status}`, error?.message ?? `the service answered ${response.status} ${response.statusText} at ${new URL(response.url || 'http://x').pathname}`);
}
