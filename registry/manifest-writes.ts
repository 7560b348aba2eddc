import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { readBounded } from '../core/read-bounded.ts';
import { DIGEST, ManifestRejected, MAX_MANIFEST_BYTES, parseManifest, TAG } from '../oci/manifests.ts';
import type { ScanQueue } from '../queue/index.ts';
import type { Store } from '../store/index.ts';
import type { OciCode } from './access-rules.ts';
import type { Catalog } from './catalog.ts';
import type { Upstream } from './upstream.ts';

/** An OCI error body (distribution spec), as docker prints it. */
export function oci(reply: FastifyReply, status: number, code: OciCode, message: string, detail?: unknown) {
  return reply
    .status(status)
    .header('docker-distribution-api-version', 'registry/2.0')
    .type('application/json')
    .send({ errors: [{ code, message, ...(detail !== undefined ? { detail } : {}) }] });
}

export interface ManifestWrites {
  putManifest(request: FastifyRequest, reply: FastifyReply, repo: string, reference: string, query: string): Promise<FastifyReply>;
  deleteManifest(request: FastifyRequest, reply: FastifyReply, repo: string, reference: string): Promise<FastifyReply>;
}

/**
 * The writes the front does itself rather than forward: a manifest PUT (checked here, recorded as
 * pending before the upstream has it, a scan queued once it does) and a manifest DELETE (the
 * repository's visibility decided again; an index takes its untagged children with it).
 */
export function manifestWrites(parts: { store: Store; upstream: Upstream; catalog: Catalog; queue: ScanQueue; log: Logger; metrics?: ServiceMetrics }): ManifestWrites {
  const { store, upstream, catalog, queue, log } = parts;

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
    parts.metrics?.registryPush();
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

  return { putManifest, deleteManifest };
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

