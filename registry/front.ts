import type { TLSSocket } from 'node:tls';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import { authorizeSandbox, type Principal } from '../accounts/index.ts';
import type { Logger } from '../core/logger.ts';
import { readBounded } from '../core/read-bounded.ts';
import type { ScanQueue } from '../queue/scan-queue.ts';
import type { Store } from '../store/index.ts';
import { splitRepo } from '../store/registry.ts';
import { RegistryAuth, SERVICE_NAME, TOKEN_TTL_SECONDS } from './auth.ts';
import type { Catalog } from './catalog.ts';
import { DIGEST, ManifestRejected, MAX_MANIFEST_BYTES, NAME, parseManifest, TAG } from '../oci/manifests.ts';
import type { Upstream } from './upstream.ts';
import type { ServiceMetrics } from '../ops/metrics.ts';

export interface RegistryFrontOptions {
  store: Store;
  upstream: Upstream;
  auth: RegistryAuth;
  catalog: Catalog;
  queue: ScanQueue;
  logger: Logger;
  metrics?: ServiceMetrics;
}

/** A registry API path, split: `/v2/<repo>/<what>/<ref>`. */
export type V2Route =
  | { kind: 'ping' }
  | { kind: 'catalog' }
  | { kind: 'manifest'; repo: string; reference: string }
  | { kind: 'blob'; repo: string; digest: string }
  | { kind: 'upload'; repo: string; session: string }
  | { kind: 'tags'; repo: string }
  | { kind: 'referrers'; repo: string; digest: string };

const ROUTE = /^\/v2\/(.+)\/(?:(manifests)\/([^/]+)|(blobs)\/uploads\/?([^/]*)|(blobs)\/([^/]+)|(tags)\/list|(referrers)\/([^/]+))$/;

export function parseV2Path(path: string): V2Route | null {
  if (path === '/v2/' || path === '/v2') return { kind: 'ping' };
  if (path === '/v2/_catalog') return { kind: 'catalog' };
  const m = ROUTE.exec(path);
  if (!m) return null;
  const repo = m[1]!;
  if (m[2]) return { kind: 'manifest', repo, reference: m[3]! };
  if (m[4]) return { kind: 'upload', repo, session: m[5]! };
  if (m[6]) return { kind: 'blob', repo, digest: m[7]! };
  if (m[8]) return { kind: 'tags', repo };
  return { kind: 'referrers', repo, digest: m[10]! };
}

type OciCode = 'UNAUTHORIZED' | 'DENIED' | 'NAME_INVALID' | 'NAME_UNKNOWN' | 'MANIFEST_INVALID' | 'DIGEST_INVALID' | 'SIZE_INVALID' | 'UNSUPPORTED' | 'MANIFEST_UNKNOWN' | 'TAG_INVALID';

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
export async function buildRegistryFront(opts: RegistryFrontOptions): Promise<FastifyInstance> {
  const { store, upstream, auth, catalog, queue } = opts;
  const log = opts.logger.child({ part: 'registry' });
  const app = Fastify({ loggerInstance: log as FastifyBaseLogger, bodyLimit: MAX_MANIFEST_BYTES });

  const oci = (reply: FastifyReply, status: number, code: OciCode, message: string, detail?: unknown) =>
    reply
      .status(status)
      .header('docker-distribution-api-version', 'registry/2.0')
      .type('application/json')
      .send({ errors: [{ code, message, ...(detail !== undefined ? { detail } : {}) }] });

  const challenge = (request: FastifyRequest, reply: FastifyReply, message: string, scope?: string) => {
    const proto = (request.raw.socket as TLSSocket).encrypted ? 'https' : 'http';
    const realm = `${proto}://${request.headers.host ?? 'registry'}/token`;
    reply.header('www-authenticate', `Bearer realm="${realm}",service="${SERVICE_NAME}"${scope ? `,scope="${scope}"` : ''}`);
    return oci(reply, 401, 'UNAUTHORIZED', message);
  };

  const owns = async (principal: Principal | null, project: string): Promise<boolean> => {
    if (!principal) return false;
    try {
      await authorizeSandbox(store, principal, project, 'use');
      return true;
    } catch {
      return false;
    }
  };

  /** May the caller read this blob (or manifest) of this repository? */
  const mayPull = async (principal: Principal | null, repo: string, blob?: string): Promise<boolean> => {
    const [project] = splitRepo(repo);
    if (await owns(principal, project)) return true;
    const record = await store.registry.getRepo(repo);
    if (!record?.public) return false;
    return blob === undefined || record.blobs.includes(blob);
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
      const route = parseV2Path(path);
      let principal: Principal | null;
      try {
        principal = await auth.principal(request.headers.authorization);
      } catch (err) {
        return challenge(request, reply, (err as Error).message);
      }
      if (!route) return oci(reply, 404, 'UNSUPPORTED', `not a registry API path: ${path.slice(0, 200)}`);
      if (route.kind === 'ping') {
        if (!request.headers.authorization) return challenge(request, reply, 'log in with any user name and an access token (svc_…) as password');
        return reply.header('docker-distribution-api-version', 'registry/2.0').send({});
      }
      if (route.kind === 'catalog') return oci(reply, 403, 'DENIED', 'the catalog is not listed; see GET /api/sandboxes/<name>/registry');
      const { repo } = route;
      if (!NAME.test(repo) || repo.length > 255) {
        return oci(reply, 400, 'NAME_INVALID', `invalid repository name "${repo.slice(0, 100)}": push to <sandbox>/<image>, lowercase`);
      }
      const [project] = splitRepo(repo);
      const method = request.method;
      const reading = method === 'GET' || method === 'HEAD';
      const scope = `repository:${repo}:${reading ? 'pull' : 'pull,push'}`;

      if (reading) {
        const blob = route.kind === 'blob' ? route.digest : undefined;
        if (await mayPull(principal, repo, blob)) {
          if (route.kind === 'manifest' && method === 'GET') opts.metrics?.registryPull();
          return; // → proxied
        }
        if (!principal) return challenge(request, reply, `authentication required: ${repo} is private or does not exist`, scope);
        return oci(reply, 404, 'NAME_UNKNOWN', `repository ${repo} not found`);
      }

      if (!principal) return challenge(request, reply, 'authentication required to push: log in with an access token', scope);
      if (!(await owns(principal, project))) {
        const hint = principal.sandbox ? `this token may only push to ${principal.sandbox}/<image>` : 'push to <one of your sandboxes>/<image>';
        return oci(reply, 403, 'DENIED', `"${project}" is not one of your sandboxes: ${hint}`);
      }

      if (route.kind === 'manifest' && method === 'PUT') return putManifest(request, reply, repo, route.reference, query);
      if (route.kind === 'manifest' && method === 'DELETE') return deleteManifest(request, reply, repo, route.reference);
      if (route.kind === 'upload' && method === 'POST') {
        // A cross-repository mount reads a blob of another repository: only one the caller may pull.
        const params = new URLSearchParams(query);
        const from = params.get('from');
        const mount = params.get('mount');
        if (from !== null || mount !== null) {
          if (!from || !mount || !NAME.test(from) || !(await mayPull(principal, from, mount))) {
            params.delete('from');
            params.delete('mount');
            const rest = params.toString();
            request.raw.url = rest ? `${path}?${rest}` : path;
          }
        }
      }
      if (route.kind === 'tags' || route.kind === 'referrers') return oci(reply, 405, 'UNSUPPORTED', `${method} is not allowed here`);
      // blob uploads, blob deletes: proxied as they are
    },
  });

  async function putManifest(request: FastifyRequest, reply: FastifyReply, repo: string, reference: string, query: string) {
    const isDigest = reference.includes(':');
    if (isDigest ? !DIGEST.test(reference) : !TAG.test(reference)) {
      return oci(reply, 400, isDigest ? 'DIGEST_INVALID' : 'TAG_INVALID', `invalid manifest reference "${reference.slice(0, 150)}"`);
    }
    if (Number(request.headers['content-length'] ?? 0) > MAX_MANIFEST_BYTES * 16) {
      reply.header('connection', 'close');
      return oci(reply, 413, 'SIZE_INVALID', `manifest is larger than ${MAX_MANIFEST_BYTES} bytes`);
    }
    // Past the limit, bytes are read and dropped up to 16× it (a client still sending gets its
    // 413, not a reset); then the connection goes.
    const body = await readBounded(request.body as AsyncIterable<Uint8Array> | undefined, MAX_MANIFEST_BYTES, MAX_MANIFEST_BYTES * 16);
    if (!body) return oci(reply, 413, 'SIZE_INVALID', `manifest is larger than ${MAX_MANIFEST_BYTES} bytes`);
    let manifest;
    try {
      manifest = parseManifest(body, request.headers['content-type'], reference);
    } catch (err) {
      if (err instanceof ManifestRejected) {
        log.info({ repo, reference, code: err.code, reason: err.message }, 'registry: manifest refused');
        return oci(reply, err.status, err.code, err.message);
      }
      throw err;
    }
    const tag = isDigest ? undefined : reference;
    const { previous } = await catalog.beginPush(repo, manifest, body.length, tag);
    let res: Response;
    try {
      res = await upstream.fetch(`/v2/${repo}/manifests/${encodeURIComponent(reference)}${query ? `?${query}` : ''}`, {
        method: 'PUT',
        headers: { 'content-type': manifest.mediaType },
        body: new Uint8Array(body),
        signal: AbortSignal.timeout(120_000),
      });
    } catch (err) {
      await catalog.abortPush(repo, manifest.digest, previous);
      log.error({ err, repo }, 'registry: upstream unreachable on manifest push');
      return oci(reply, 503, 'UNSUPPORTED', 'the registry storage is unavailable; try again');
    }
    const text = await res.text();
    if (res.status !== 201) {
      await catalog.abortPush(repo, manifest.digest, previous);
      log.info({ repo, reference, status: res.status }, 'registry: upstream refused the manifest');
      return relay(reply, res, text);
    }
    await catalog.commitPush(repo, manifest.digest, tag);
    await queue.enqueue({ repo, digest: manifest.digest, pushed_at: Date.now() });
    opts.metrics?.registryPush();
    log.info({ repo, digest: manifest.digest, tag }, 'registry: manifest pushed, scan queued');
    return relay(reply, res, text);
  }

  async function deleteManifest(_request: FastifyRequest, reply: FastifyReply, repo: string, reference: string) {
    if (!DIGEST.test(reference)) return oci(reply, 400, 'DIGEST_INVALID', 'delete a manifest by its digest (sha256:…), not by tag');
    const version = await store.registry.getVersion(repo, reference);
    const res = await upstream.fetch(`/v2/${repo}/manifests/${reference}`, { method: 'DELETE', signal: AbortSignal.timeout(60_000) });
    const text = await res.text();
    if (res.status === 202 || res.status === 404) {
      await catalog.deleted(repo, reference);
      // An index takes its untagged children with it, unless another index still lists them.
      if (version?.kind === 'index' && res.status === 202) {
        const others = (await store.registry.listVersions(repo)).filter((v) => v.kind === 'index').flatMap((v) => v.children ?? []);
        for (const child of version.children ?? []) {
          const record = await store.registry.getVersion(repo, child);
          if (!record || record.tags.length || others.includes(child)) continue;
          const r = await upstream.fetch(`/v2/${repo}/manifests/${child}`, { method: 'DELETE', signal: AbortSignal.timeout(60_000) });
          await r.arrayBuffer();
          if (r.status === 202 || r.status === 404) await catalog.deleted(repo, child);
        }
      }
    }
    return relay(reply, res, text);
  }

  return app;
}

const RELAYED = ['location', 'docker-content-digest', 'docker-distribution-api-version', 'content-type', 'oci-subject', 'oci-tag', 'docker-upload-uuid', 'range'];

function relay(reply: FastifyReply, res: Response, text: string) {
  reply.status(res.status);
  for (const name of RELAYED) {
    const value = res.headers.get(name);
    if (value !== null) reply.header(name, value);
  }
  return reply.send(text);
}

