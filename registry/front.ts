import type { TLSSocket } from 'node:tls';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { REGISTRY_VERDICT_HEADER, type RegistryBypassAnswer } from '../edge/index.ts';
import { MAX_MANIFEST_BYTES } from '../oci/manifests.ts';
import type { ScanQueue } from '../queue/index.ts';
import type { Store } from '../store/index.ts';
import { registryRules } from './access-rules.ts';
import { SERVICE_NAME, TOKEN_TTL_SECONDS, type RegistryAuth } from './auth.ts';
import type { Catalog } from './catalog.ts';
import { KeptVerdicts } from './kept-verdicts.ts';
import { manifestWrites, oci } from './manifest-writes.ts';
import type { Upstream } from './upstream.ts';

export { parseV2Path, type V2Route } from './access-rules.ts';

export interface RegistryFrontOptions {
  store: Store;
  upstream: Upstream;
  auth: RegistryAuth;
  catalog: Catalog;
  queue: ScanQueue;
  logger: Logger;
  metrics?: ServiceMetrics;
}

export interface RegistryFront {
  app: FastifyInstance;
  /**
   * May a data plane in front (docs/data-plane.md) send this request straight to the upstream? Yes
   * only for a blob's bytes — GET/HEAD of a blob, PATCH/PUT of an open upload session — that this
   * front would forward unchanged, by the same rules as the front's own requests. Everything else
   * (refusals with their error bodies, manifests, upload starts and mounts) must come to the front.
   */
  mayBypass(method: string, url: string, authorization: string | undefined): Promise<RegistryBypassAnswer>;
}

/**
 * The registry front at `registry.<domain>` (spec 4.4 item 3, 5 item 5): speaks the OCI
 * distribution API to docker, authenticates every request, and forwards to the upstream registry
 * with @fastify/http-proxy, which streams bodies both ways (blobs are never held in memory).
 *
 * - push (POST/PATCH/PUT/DELETE) only into `<project>/<image>` where `<project>` is one of the
 *   caller's sandboxes (a limited token: its own);
 * - manifests are checked here (size, media type, digest), recorded as pending (private) before
 *   the upstream has them, and each accepted push queues a scan;
 * - pull: the owner always; anyone, without logging in, once the repository is public, and then
 *   only blobs that belong to its current versions;
 * - a manifest DELETE that the upstream accepts re-decides the repository's visibility.
 */
export async function buildRegistryFront(opts: RegistryFrontOptions): Promise<RegistryFront> {
  const { store, upstream, auth, catalog, queue } = opts;
  const log = opts.logger.child({ part: 'registry' });
  const app = Fastify({ loggerInstance: log as FastifyBaseLogger, bodyLimit: MAX_MANIFEST_BYTES });

  const { authorize } = registryRules({ store, auth });
  const { putManifest, deleteManifest } = manifestWrites({ store, upstream, catalog, queue, log, ...(opts.metrics ? { metrics: opts.metrics } : {}) });
  /** Verdicts mayBypass gave on requests it did not let by, until each request comes here. */
  const keptVerdicts = new KeptVerdicts();

  const challenge = (request: FastifyRequest, reply: FastifyReply, message: string, scope?: string) => {
    const proto = (request.raw.socket as TLSSocket).encrypted ? 'https' : 'http';
    const realm = `${proto}://${request.headers.host ?? 'registry'}/token`;
    reply.header('www-authenticate', `Bearer realm="${realm}",service="${SERVICE_NAME}"${scope ? `,scope="${scope}"` : ''}`);
    return oci(reply, 401, 'UNAUTHORIZED', message);
  };

  app.get('/token', async (request, reply) => {
    try {
      const { token, principal } = await auth.issue(request.headers.authorization);
      log.debug({ user: principal?.user.name ?? null }, 'registry: token issued');
      return reply.header('cache-control', 'no-store').send({ token, access_token: token, expires_in: TOKEN_TTL_SECONDS, issued_at: new Date().toISOString() });
    } catch (err) {
      return oci(reply, 401, 'UNAUTHORIZED', (err as Error).message);
    }
  });

  await app.register(httpProxy, {
    upstream: upstream.url,
    prefix: '/v2',
    rewritePrefix: '/v2',
    internalRewriteLocationHeader: false,
    undici: upstream.dispatcher, // over the spawned registry's unix socket
    replyOptions: {
      // `Expect: 100-continue` (curl sends it for large bodies) was answered by our server already;
      // undici refuses to forward it.
      rewriteRequestHeaders: (_request, headers) => {
        delete headers.expect;
        delete headers[REGISTRY_VERDICT_HEADER];
        return headers;
      },
      rewriteHeaders: (headers) => {
        // An operator's upstream may answer absolute Locations naming itself: keep clients on the front.
        const location = headers.location;
        if (typeof location === 'string' && location.startsWith(upstream.url)) headers.location = location.slice(upstream.url.length) || '/';
        return headers;
      },
    },
    preHandler: async (request: FastifyRequest, reply: FastifyReply) => {
      const [path, query = ''] = request.raw.url!.split('?', 2) as [string, string?];
      const kept = keptVerdicts.take(request.headers[REGISTRY_VERDICT_HEADER], request.method, request.raw.url!, request.headers.authorization);
      const verdict = kept ?? (await authorize(request.method, path, query, request.headers.authorization));
      switch (verdict.kind) {
        case 'proxy':
          if (verdict.pull) opts.metrics?.registryPull();
          if (verdict.url !== undefined) request.raw.url = verdict.url;
          return; // → proxied
        case 'ping':
          return reply.header('docker-distribution-api-version', 'registry/2.0').send({});
        case 'challenge':
          return challenge(request, reply, verdict.message, verdict.scope);
        case 'refuse':
          return oci(reply, verdict.status, verdict.code, verdict.message);
        case 'put-manifest':
          return putManifest(request, reply, verdict.repo, verdict.reference, query);
        case 'delete-manifest':
          return deleteManifest(request, reply, verdict.repo, verdict.reference);
      }
    },
  });

  async function mayBypass(method: string, url: string, authorization: string | undefined): Promise<RegistryBypassAnswer> {
    if (!url.startsWith('/v2/')) return { bypass: false }; // an absolute-form or odd target: the front sees it
    const [path, query = ''] = url.split('?', 2) as [string, string?];
    const verdict = await authorize(method, path, query, authorization);
    if (verdict.kind === 'proxy' && verdict.blobBytes === true && verdict.url === undefined) return { bypass: true };
    return { bypass: false, verdict: keptVerdicts.keep(method, url, authorization, verdict) };
  }

  return { app, mayBypass };
}

