import tls from 'node:tls';
import type { Readable } from 'node:stream';
import { createSvcClient, must, SvcError, type Answer, type SvcClient } from '../sdk/index.ts';
import { UsageError, type Settings } from './settings.ts';

/** An answer of the API that is an error: its code and message say what to do. */
export { SvcError as ApiError } from '../sdk/index.ts';

/**
 * The service's API through the SDK (sdk/: types generated from the OpenAPI document), over Node's
 * own https client so that the export folder's service CA is trusted (Node 18 or later, nothing to
 * install). The token goes only into the Authorization header.
 */
export class Api {
  private sdk?: SvcClient;

  constructor(readonly settings: Settings) {}

  /** The typed client; without a token, a usage error saying where one comes from. */
  get client(): SvcClient {
    const { token } = this.settings;
    if (!token) throw new UsageError('no token: set SVC_TOKEN, or run in an export folder (svc.env), or pass --env FILE');
    this.sdk ??= createSvcClient({ url: this.settings.url, token, ca: this.settings.ca ?? [...tls.rootCertificates] });
    return this.sdk;
  }

  /** The data of a call's answer; an unreachable service or an error answer is thrown with what to do. */
  async call<D>(request: Promise<Answer<D>>): Promise<NonNullable<D>> {
    return (await this.answer(request)).data;
  }

  /** The data and the response (its headers) of a call's answer, errors thrown as `call` throws them. */
  async answer<D>(request: Promise<Answer<D>>): Promise<{ data: NonNullable<D>; response: Response }> {
    let result: Answer<D>;
    try {
      result = await request;
    } catch (err) {
      throw reachError(err as NodeJS.ErrnoException, this.settings.url);
    }
    try {
      return { data: must(result), response: result.response };
    } catch (err) {
      if (!(err instanceof SvcError)) throw err;
      if (err.status === 401) throw new SvcError(401, err.code, 'the token was refused (missing, wrong or revoked): export the sandbox again for a new svc.env, or set SVC_TOKEN');
      if (err.code.startsWith('HTTP_')) throw new SvcError(err.status, err.code, `the service answered ${err.status} at ${this.settings.url.origin}: is SVC_URL the API address (https://<domain>/api)?`);
      throw err;
    }
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
