import { createHash, randomBytes } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import httpProxy from '@fastify/http-proxy';
import { authorizeSandbox, type Principal } from '../accounts/index.ts';
import type { Logger } from '../core/logger.ts';
import { readBounded } from '../core/read-bounded.ts';
import type { ScanQueue } from '../queue/index.ts';
import { type Store, splitRepo } from '../store/index.ts';
import { RegistryAuth, SERVICE_NAME, TOKEN_TTL_SECONDS } from './auth.ts';
import type { Catalog } from './catalog.ts';
import { DIGEST, ManifestRejected, MAX_MANIFEST_BYTES, NAME, parseManifest, TAG } from '../oci/manifests.ts';
import type { Upstream } from './upstream.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { REGISTRY_VERDICT_HEADER, type RegistryBypassAnswer } from '../edge/index.ts';

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

/** What the front does with a request: `authorize`'s answer. */
type Verdict =
  /** forwarded to the upstream (under `url` if set); `pull` counts a manifest pull; `blobBytes`: a blob's bytes, see mayBypass */
  | { kind: 'proxy'; url?: string; pull?: boolean; blobBytes?: boolean }
  | { kind: 'ping' }
  | { kind: 'challenge'; message: string; scope?: string }
  | { kind: 'refuse'; status: number; code: OciCode; message: string }
  | { kind: 'put-manifest' | 'delete-manifest'; repo: string; reference: string };

/** How long a verdict mayBypass gave waits for its request (HAProxy hands it to the front at once). */
const KEPT_VERDICT_MS = 10_000;
/**
 * Verdicts kept at most; past it the oldest goes (its request, if it still comes, is decided again).
 * A request the front never sees (the client gone first, a target Fastify refuses before any hook)
 * leaves its verdict for KEPT_VERDICT_MS: without a bound, a client sending such requests fast would
 * grow this memory at will.
 */
export const KEPT_VERDICTS_MAX = 10_000;

/**
 * What a kept verdict is bound to: one digest of the method, target and credentials, so that the
 * map holds a fixed size per verdict whatever a client sends, and no credential.
 */
function requestKey(method: string, url: string, authorization: string | undefined): string {
  return createHash('sha256').update(JSON.stringify([method, url, authorization ?? null])).digest('base64url');
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
export async function buildRegistryFront(opts: RegistryFrontOptions): Promise<RegistryFront> {
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
      const verdict = takeVerdict(request) ?? (await authorize(request.method, path, query, request.headers.authorization));
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

  /** Verdicts mayBypass gave on requests it did not let by, until each request comes here (takeVerdict). */
  const keptVerdicts = new Map<string, { request: string; verdict: Verdict; until: number }>();

  /**
   * Who may do what (the one copy of the front's rules): the verdict on a request from its method,
   * path, query and credentials alone, before any byte of its body is read. Nothing is changed
   * here; the caller carries the verdict out.
   */
  async function authorize(method: string, path: string, query: string, authorization: string | undefined): Promise<Verdict> {
    const route = parseV2Path(path);
    let principal: Principal | null;
    try {
      principal = await auth.principal(authorization);
    } catch (err) {
      return { kind: 'challenge', message: (err as Error).message };
    }
    if (!route) return { kind: 'refuse', status: 404, code: 'UNSUPPORTED', message: `not a registry API path: ${path.slice(0, 200)}` };
    if (route.kind === 'ping') {
      if (!authorization) return { kind: 'challenge', message: 'log in with any user name and an access token (svc_…) as password' };
      return { kind: 'ping' };
    }
    if (route.kind === 'catalog') return { kind: 'refuse', status: 403, code: 'DENIED', message: 'the catalog is not listed; see GET /api/sandboxes/<name>/registry' };
    const { repo } = route;
    if (!NAME.test(repo) || repo.length > 255) {
      return { kind: 'refuse', status: 400, code: 'NAME_INVALID', message: `invalid repository name "${repo.slice(0, 100)}": push to <sandbox>/<image>, lowercase` };
    }
    const [project] = splitRepo(repo);
    const reading = method === 'GET' || method === 'HEAD';
    const scope = `repository:${repo}:${reading ? 'pull' : 'pull,push'}`;

    if (reading) {
      const blob = route.kind === 'blob' ? route.digest : undefined;
      if (await mayPull(principal, repo, blob)) {
        return { kind: 'proxy', pull: route.kind === 'manifest' && method === 'GET', blobBytes: route.kind === 'blob' };
      }
      if (!principal) return { kind: 'challenge', message: `authentication required: ${repo} is private or does not exist`, scope };
      return { kind: 'refuse', status: 404, code: 'NAME_UNKNOWN', message: `repository ${repo} not found` };
    }

    if (!principal) return { kind: 'challenge', message: 'authentication required to push: log in with an access token', scope };
    if (!(await owns(principal, project))) {
      const hint = principal.sandbox ? `this token may only push to ${principal.sandbox}/<image>` : 'push to <one of your sandboxes>/<image>';
      return { kind: 'refuse', status: 403, code: 'DENIED', message: `"${project}" is not one of your sandboxes: ${hint}` };
    }

    if (route.kind === 'manifest' && method === 'PUT') return { kind: 'put-manifest', repo, reference: route.reference };
    if (route.kind === 'manifest' && method === 'DELETE') return { kind: 'delete-manifest', repo, reference: route.reference };
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
          return { kind: 'proxy', url: rest ? `${path}?${rest}` : path };
        }
      }
    }
    if (route.kind === 'tags' || route.kind === 'referrers') return { kind: 'refuse', status: 405, code: 'UNSUPPORTED', message: `${method} is not allowed here` };
    // blob uploads, blob deletes: proxied as they are; the bytes of an open upload session
    return { kind: 'proxy', blobBytes: route.kind === 'upload' && route.session !== '' && (method === 'PATCH' || method === 'PUT') };
  }

  async function mayBypass(method: string, url: string, authorization: string | undefined): Promise<RegistryBypassAnswer> {
    if (!url.startsWith('/v2/')) return { bypass: false }; // an absolute-form or odd target: the front sees it
    const [path, query = ''] = url.split('?', 2) as [string, string?];
    const verdict = await authorize(method, path, query, authorization);
    if (verdict.kind === 'proxy' && verdict.blobBytes === true && verdict.url === undefined) return { bypass: true };
    const now = Date.now();
    for (const [id, kept] of keptVerdicts) { // in the order kept, so in the order they run out
      if (kept.until > now && keptVerdicts.size < KEPT_VERDICTS_MAX) break;
      keptVerdicts.delete(id);
    }
    // 128 random bits, never shown to a client: nobody can name another request's verdict
    const id = randomBytes(16).toString('base64url');
    keptVerdicts.set(id, { request: requestKey(method, url, authorization), verdict, until: now + KEPT_VERDICT_MS });
    return { bypass: false, verdict: id };
  }

  /**
   * The verdict mayBypass gave HAProxy on this very request (named by REGISTRY_VERDICT_HEADER), once:
   * the same function's answer on the same method, target and credentials a moment ago. Anything
   * else (no such verdict, run out, another request) is decided afresh.
   */
  function takeVerdict(request: FastifyRequest): Verdict | undefined {
    const id = request.headers[REGISTRY_VERDICT_HEADER];
    const kept = typeof id === 'string' ? keptVerdicts.get(id) : undefined;
    if (!kept) return undefined;
    keptVerdicts.delete(id as string);
    const same = kept.request === requestKey(request.method, request.raw.url!, request.headers.authorization);
    return same && kept.until > Date.now() ? kept.verdict : undefined;
  }

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

  return { app, mayBypass };
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

