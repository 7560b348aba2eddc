import { createHash } from 'node:crypto';

/** Manifest media types the registry accepts (OCI image spec and Docker's schema 2). */
export const MEDIA = {
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
} as const;

export const IMAGE_MANIFEST_TYPES: readonly string[] = [MEDIA.dockerManifest, MEDIA.ociManifest];
export const INDEX_TYPES: readonly string[] = [MEDIA.dockerList, MEDIA.ociIndex];
export const MANIFEST_TYPES: readonly string[] = [...IMAGE_MANIFEST_TYPES, ...INDEX_TYPES];

/** Config blobs the scanner can read as an image config. */
export const CONFIG_TYPES: readonly string[] = ['application/vnd.docker.container.image.v1+json', 'application/vnd.oci.image.config.v1+json'];

/** Layer types that are filesystem tars the scanner reads (compression is told by the bytes). */
export const LAYER_TYPES: readonly string[] = [
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.diff.tar.zstd',
  'application/vnd.oci.image.layer.v1.tar',
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd',
];

/** Largest manifest accepted (the OCI spec asks registries to take at least 4 MB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
export const MAX_REFERENCES = 1000;

export const DIGEST = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
export const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
/** OCI repository name; ours is always `<project>/<image>`. */
export const NAME = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)+$/;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
}

export type ParsedManifest =
  | { kind: 'image'; mediaType: string; config: Descriptor; layers: Descriptor[] }
  | { kind: 'index'; mediaType: string; manifests: Descriptor[] };

/** A manifest refused at push: the OCI error code and a message for the docker CLI. */
export class ManifestRejected extends Error {
  constructor(readonly code: 'MANIFEST_INVALID' | 'DIGEST_INVALID' | 'SIZE_INVALID' | 'UNSUPPORTED', message: string, readonly status = 400) {
    super(message);
  }
}

export function digestOf(bytes: Buffer, algorithm = 'sha256'): string {
  return `${algorithm}:${createHash(algorithm).update(bytes).digest('hex')}`;
}

function descriptor(value: unknown, where: string): Descriptor {
  const d = value as Descriptor;
  if (!d || typeof d !== 'object') throw new ManifestRejected('MANIFEST_INVALID', `${where} is not a descriptor`);
  if (typeof d.mediaType !== 'string' || d.mediaType.length > 255) throw new ManifestRejected('MANIFEST_INVALID', `${where} has no mediaType`);
  if (typeof d.digest !== 'string' || !DIGEST.test(d.digest)) throw new ManifestRejected('MANIFEST_INVALID', `${where} has an invalid digest`);
  if (!Number.isSafeInteger(d.size) || d.size < 0) throw new ManifestRejected('MANIFEST_INVALID', `${where} has an invalid size`);
  return d;
}

/**
 * Validates a pushed manifest: size, media type (the Content-Type must be a known manifest type
 * and agree with the body's `mediaType`), JSON shape, and the digest when pushed by digest.
 * Layers of unknown types are accepted here (the registry stores artifacts too) and make the
 * version unscannable, hence private, in the scanner.
 */
export function parseManifest(body: Buffer, contentType: string | undefined, reference: string): ParsedManifest & { digest: string } {
  if (body.length > MAX_MANIFEST_BYTES) throw new ManifestRejected('SIZE_INVALID', `manifest is larger than ${MAX_MANIFEST_BYTES} bytes`, 413);
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (!MANIFEST_TYPES.includes(type)) {
    throw new ManifestRejected('MANIFEST_INVALID', `unsupported manifest media type "${type.slice(0, 100)}": use ${MANIFEST_TYPES.join(', ')}`);
  }
  const digest = digestOf(body, reference.startsWith('sha512:') ? 'sha512' : 'sha256');
  if (reference.includes(':') && reference !== digest) {
    throw new ManifestRejected('DIGEST_INVALID', `the manifest's digest is ${digest}, not ${reference}`);
  }
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new ManifestRejected('MANIFEST_INVALID', `manifest is not JSON: ${(err as Error).message}`);
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) throw new ManifestRejected('MANIFEST_INVALID', 'manifest is not a JSON object');
  if (json.schemaVersion !== 2) throw new ManifestRejected('MANIFEST_INVALID', 'manifest schemaVersion must be 2');
  if (json.mediaType !== undefined && json.mediaType !== type) {
    throw new ManifestRejected('MANIFEST_INVALID', `manifest mediaType "${String(json.mediaType).slice(0, 100)}" differs from its Content-Type "${type}"`);
  }
  if (INDEX_TYPES.includes(type)) {
    if (!Array.isArray(json.manifests)) throw new ManifestRejected('MANIFEST_INVALID', 'an index needs a manifests array');
    if (json.manifests.length > MAX_REFERENCES) throw new ManifestRejected('MANIFEST_INVALID', `an index may list at most ${MAX_REFERENCES} manifests`);
    return { kind: 'index', mediaType: type, digest, manifests: json.manifests.map((m, i) => descriptor(m, `manifests[${i}]`)) };
  }
  const config = descriptor(json.config, 'config');
  if (!Array.isArray(json.layers)) throw new ManifestRejected('MANIFEST_INVALID', 'an image manifest needs a layers array');
  if (json.layers.length > MAX_REFERENCES) throw new ManifestRejected('MANIFEST_INVALID', `an image may have at most ${MAX_REFERENCES} layers`);
  return { kind: 'image', mediaType: type, digest, config, layers: json.layers.map((l, i) => descriptor(l, `layers[${i}]`)) };
}

export function platformOf(d: Descriptor): string | undefined {
  const p = d.platform;
  if (!p || typeof p !== 'object') return undefined;
  return [p.os, p.architecture, p.variant].filter((x) => typeof x === 'string' && x).join('/') || undefined;
}
