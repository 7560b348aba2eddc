import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { SingleFlight } from '../core/keyed-lock.ts';
import type { Logger } from '../core/logger.ts';
import { readBounded } from '../core/read-bounded.ts';
import { CONFIG_TYPES, digestOf, IMAGE_MANIFEST_TYPES, LAYER_TYPES, ManifestRejected, MANIFEST_TYPES, parseManifest, platformOf, type Descriptor, type ParsedManifest } from '../oci/manifests.ts';
import type { Finding, LayerScanRecord, Store, VersionRecord } from '../store/index.ts';
import { scanText } from './content-scanner.ts';
import { scanLayer, type LayerLimits, type LayerScanResult } from './layer-reader.ts';
import { builtInRules, type ContentHit, type RuleSet } from './rule-set.ts';
import { ownerSecretFindings, type OwnerSecretHashes } from './owner-secrets.ts';

/** Largest image config read (a config is a few KB; Docker refuses far smaller ones than this). */
const MAX_CONFIG_BYTES = 8 * 1024 * 1024;

/** Content of an image that cannot be scanned: the version is unscannable for this reason. */
class Unscannable extends Error {}

interface ImageResult {
  state: 'clean' | 'flagged' | 'unscannable';
  findings: Finding[];
  reason?: string;
  bytes: number;
}

/**
 * Where a scan records its state and results. The registry's catalogue is one: it stores the
 * version and re-decides the repository's visibility, under its lock.
 */
export interface VersionSink {
  /** Changes a stored version; undefined when it was deleted meanwhile. */
  updateVersion(repo: string, digest: string, change: (v: VersionRecord) => VersionRecord): Promise<VersionRecord | undefined>;
}

/**
 * Where manifests and blobs are read: a distribution API (`/v2/<repo>/manifests/…`, `/blobs/…`).
 * The registry's upstream is one; the scanner reads it directly, never through the front.
 */
export interface BlobSource {
  fetch(path: string, init: { headers: Record<string, string>; signal: AbortSignal }): Promise<Response>;
}

export interface ImageScannerOptions {
  /** Layer results by digest, kept across scans. */
  store: Pick<Store, 'registry'>;
  versions: VersionSink;
  blobs: BlobSource;
  logger: Logger;
  limits?: Partial<LayerLimits>;
  /** The rules (default: the built-in ones; with an operator's file, operator-rules.ts). */
  rules?: RuleSet;
  /** The keyed hashes of each image owner's secrets, looked for in their images (owner-secrets.ts). */
  ownerSecrets?: OwnerSecretHashes;
  /** Where a layer's bytes are read (default: `scanLayer` on this thread; the service: layer-threads.ts). */
  layerScan?: LayerScan;
}

/** Reads one layer blob into its result: `scanLayer`'s contract, whatever thread runs it. */
export type LayerScan = (source: Readable, opts: { digest: string; limits?: Partial<LayerLimits>; rules: RuleSet }) => Promise<LayerScanResult>;

/**
 * Scans one pushed manifest: the image config (Env, history) and every layer of an image, or of
 * every image an index lists. Layer results are kept by digest and reused (a base layer shared by
 * a hundred images is read once). Bad content never throws: the version becomes unscannable with
 * the reason. An unreachable upstream or store, or a scan that cannot run here (no zstd), throws,
 * so the job is retried.
 */
export class ImageScanner {
  private readonly layerReads = new SingleFlight<LayerScanRecord>();
  private readonly log: Logger;
  readonly rules: RuleSet;

  constructor(private readonly opts: ImageScannerOptions) {
    this.log = opts.logger.child({ part: 'scanner' });
    this.rules = opts.rules ?? builtInRules();
  }

  async scanVersion(repo: string, digest: string, pushedAt?: number): Promise<VersionRecord | undefined> {
    const { versions } = this.opts;
    const started = Date.now();
    const version = await versions.updateVersion(repo, digest, (v) => ({ ...v, state: 'scanning', scan_started_at: new Date().toISOString(), findings: [], reason: undefined }));
    if (!version) return undefined; // deleted before its scan
    this.log.info({ repo, digest, kind: version.kind }, 'scan started');
    let result: ImageResult;
    try {
      const manifest = await this.manifest(repo, digest);
      if (manifest.kind === 'image') {
        result = await this.scanImage(repo, digest, manifest);
      } else {
        result = await this.scanIndex(repo, digest, manifest);
      }
    } catch (err) {
      if (!(err instanceof Unscannable)) throw err;
      result = { state: 'unscannable', findings: [], reason: err.message, bytes: 0 };
    }
    const done = await versions.updateVersion(repo, digest, (v) => ({
      ...v,
      state: result.state,
      findings: result.findings,
      ...(result.reason ? { reason: result.reason } : { reason: undefined }),
      scanned_at: new Date().toISOString(),
    }));
    this.log.info({
      repo, digest, state: result.state, findings: result.findings.length, reason: result.reason,
      ms: Date.now() - started, pushToReportMs: pushedAt ? Date.now() - pushedAt : undefined,
    }, 'scan finished');
    return done;
  }

  /** Marks a version unscannable after its job failed for good (upstream gone, say). */
  async giveUp(repo: string, digest: string, message: string): Promise<void> {
    await this.opts.versions.updateVersion(repo, digest, (v) => ({ ...v, state: 'unscannable', reason: `scan failed: ${message}`, scanned_at: new Date().toISOString() }));
  }

  private async manifest(repo: string, digest: string): Promise<ParsedManifest & { digest: string }> {
    const res = await this.fetch(repo, `manifests/${digest}`, { accept: MANIFEST_TYPES.join(', ') });
    if (res.status === 404) {
      await res.body?.cancel();
      throw new Unscannable(`manifest ${digest} is not in the registry storage`);
    }
    const bytes = await readAll(res, 4 * 1024 * 1024 + 1);
    try {
      return parseManifest(bytes, res.headers.get('content-type') ?? undefined, digest);
    } catch (err) {
      if (err instanceof ManifestRejected) throw new Unscannable(err.message);
      throw err;
    }
  }

  private async scanIndex(repo: string, digest: string, index: Extract<ParsedManifest, { kind: 'index' }>): Promise<ImageResult> {
    const findings: Finding[] = [];
    let bytes = 0;
    const reasons: string[] = [];
    await this.progress(repo, digest, { layers_total: index.manifests.length, layers_done: 0, bytes_read: 0 });
    let i = 0;
    for (const child of index.manifests) {
      i += 1;
      const platform = platformOf(child);
      if (!IMAGE_MANIFEST_TYPES.includes(child.mediaType)) {
        reasons.push(`child ${child.digest} has media type ${child.mediaType.slice(0, 100)}, not an image manifest`);
        continue;
      }
      if (platform) {
        await this.opts.versions.updateVersion(repo, child.digest, (v) => ({ ...v, platform }));
      }
      let r: ImageResult;
      try {
        const m = await this.manifest(repo, child.digest);
        if (m.kind !== 'image') throw new Unscannable(`child ${child.digest} is an index inside an index`);
        r = await this.scanImage(repo, child.digest, m, true);
      } catch (err) {
        if (!(err instanceof Unscannable)) throw err;
        r = { state: 'unscannable', findings: [], reason: err.message, bytes: 0 };
      }
      bytes += r.bytes;
      findings.push(...r.findings.map((f) => ({ ...f, manifest: child.digest })));
      if (r.state === 'unscannable') reasons.push(`${platform ?? child.digest}: ${r.reason}`);
      await this.progress(repo, digest, { layers_total: index.manifests.length, layers_done: i, bytes_read: bytes });
    }
    if (reasons.length) return { state: 'unscannable', findings, reason: reasons.join('; '), bytes };
    return { state: findings.length ? 'flagged' : 'clean', findings, bytes };
  }

  private async scanImage(repo: string, digest: string, manifest: Extract<ParsedManifest, { kind: 'image' }>, child = false): Promise<ImageResult> {
    const findings: Finding[] = [];
    const total = manifest.layers.length;
    let bytes = 0;
    if (!child) await this.progress(repo, digest, { layers_total: total, layers_done: 0, bytes_read: 0 });

    if (!CONFIG_TYPES.includes(manifest.config.mediaType)) {
      throw new Unscannable(`config media type ${manifest.config.mediaType.slice(0, 100)} is not an image config (an artifact, not an image)`);
    }
    findings.push(...(await this.scanConfig(repo, manifest.config)));
    for (const layer of manifest.layers) {
      if (!LAYER_TYPES.includes(layer.mediaType)) {
        throw new Unscannable(`layer ${layer.digest} has media type ${layer.mediaType.slice(0, 100)}, not a filesystem layer`);
      }
    }
    let done = 0;
    for (const layer of manifest.layers) {
      const result = await this.layer(repo, layer);
      bytes += result.compressed_bytes;
      done += 1;
      if (result.state === 'unscannable') throw new Unscannable(`layer ${layer.digest}: ${result.reason}`);
      if (result.compressed_bytes !== layer.size) {
        throw new Unscannable(`layer ${layer.digest}: size mismatch: the blob has ${result.compressed_bytes} bytes, the manifest says ${layer.size}`);
      }
      findings.push(...result.findings.map((f) => ({ ...f, layer: layer.digest })));
      if (!child) await this.progress(repo, digest, { layers_total: total, layers_done: done, bytes_read: bytes });
    }
    if (this.opts.ownerSecrets) findings.push(...(await ownerSecretFindings(this.opts.ownerSecrets, repo, manifest, (blob) => this.blob(repo, blob))));
    return { state: findings.length ? 'flagged' : 'clean', findings, bytes };
  }

  /** Env values and history commands (BuildKit and the classic builder both record ENV there). */
  private async scanConfig(repo: string, desc: Descriptor): Promise<Finding[]> {
    if (desc.size > MAX_CONFIG_BYTES) throw new Unscannable(`image config is larger than ${MAX_CONFIG_BYTES} bytes`);
    const res = await this.fetch(repo, `blobs/${desc.digest}`);
    if (res.status === 404) {
      await res.body?.cancel();
      throw new Unscannable(`config blob ${desc.digest} is not in the registry storage`);
    }
    const bytes = await readAll(res, MAX_CONFIG_BYTES);
    if (digestOf(bytes, desc.digest.split(':')[0]) !== desc.digest) throw new Unscannable(`config blob does not match its digest ${desc.digest}`);
    let config: { config?: { Env?: unknown }; container_config?: { Env?: unknown }; history?: unknown };
    try {
      config = JSON.parse(bytes.toString('utf8'));
    } catch (err) {
      throw new Unscannable(`image config is not JSON: ${(err as Error).message}`);
    }
    const findings: Finding[] = [];
    const envs = [config?.config?.Env, config?.container_config?.Env];
    for (const env of envs) {
      if (!Array.isArray(env)) continue;
      for (const entry of env) {
        if (typeof entry !== 'string') continue;
        const name = entry.split('=', 1)[0]!;
        for (const hit of scanText(this.rules, entry)) findings.push({ path: `config:Env/${name.slice(0, 100)}`, layer: desc.digest, ...configHit(hit) });
      }
    }
    if (Array.isArray(config?.history)) {
      config.history.forEach((h: unknown, i: number) => {
        const createdBy = (h as { created_by?: unknown })?.created_by;
        if (typeof createdBy !== 'string') return;
        for (const hit of scanText(this.rules, createdBy)) findings.push({ path: `config:history[${i}]`, layer: desc.digest, ...configHit(hit) });
      });
    }
    const unique = new Map(findings.map((f) => [`${f.path}\0${f.rule}\0${f.fingerprint}`, f]));
    return [...unique.values()];
  }

  /**
   * A layer's scan: from the store if this digest was scanned before under the same rules, else read
   * once (per process).
   * Only what the layer's bytes decide (clean, flagged) is kept and reused: an unscannable result may
   * come from a broken read, and another tenant pushing the same layer deserves a fresh look.
   */
  private async layer(repo: string, desc: Descriptor): Promise<LayerScanRecord> {
    const cached = await this.opts.store.registry.getLayer(desc.digest);
    if (cached && cached.state !== 'unscannable' && cached.rules === this.rules.version) {
      this.log.debug({ layer: desc.digest, state: cached.state }, 'layer scan reused');
      return cached;
    }
    return this.layerReads.do(desc.digest, () => this.readLayer(repo, desc));
  }

  private async readLayer(repo: string, desc: Descriptor): Promise<LayerScanRecord> {
    const started = Date.now();
    const res = await this.fetch(repo, `blobs/${desc.digest}`);
    if (res.status === 404 || !res.body) {
      await res.body?.cancel();
      return { digest: desc.digest, state: 'unscannable', findings: [], reason: 'the blob is not in the registry storage', compressed_bytes: 0, bytes: 0, entries: 0, ms: 0, scanned_at: new Date().toISOString() };
    }
    const source = Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>, { highWaterMark: 1024 * 1024 });
    const r = await (this.opts.layerScan ?? scanLayer)(source, { digest: desc.digest, ...(this.opts.limits ? { limits: this.opts.limits } : {}), rules: this.rules });
    const record: LayerScanRecord = {
      digest: desc.digest,
      state: r.state,
      findings: r.findings,
      ...(r.reason ? { reason: r.reason } : {}),
      rules: this.rules.version,
      compressed_bytes: r.compressedBytes,
      bytes: r.bytes,
      entries: r.entries,
      ms: Date.now() - started,
      scanned_at: new Date().toISOString(),
    };
    if (record.state !== 'unscannable') await this.opts.store.registry.putLayer(record);
    const seconds = Math.max(record.ms, 1) / 1000;
    this.log.info({
      layer: desc.digest, state: r.state, findings: r.findings.length, reason: r.reason, compression: r.compression,
      entries: r.entries, mb: +(r.compressedBytes / 1e6).toFixed(1), mbPerS: +(r.compressedBytes / 1e6 / seconds).toFixed(1), ms: record.ms, archives: r.archives,
    }, 'layer scanned');
    return record;
  }

  /** A blob's bytes as a stream; undefined when the storage does not have it. */
  private async blob(repo: string, digest: string): Promise<Readable | undefined> {
    const res = await this.fetch(repo, `blobs/${digest}`);
    if (res.status === 404 || !res.body) {
      await res.body?.cancel();
      return undefined;
    }
    return Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>, { highWaterMark: 1024 * 1024 });
  }

  private async progress(repo: string, digest: string, progress: VersionRecord['progress']): Promise<void> {
    await this.opts.versions.updateVersion(repo, digest, (v) => ({ ...v, progress }));
  }

  private async fetch(repo: string, path: string, headers: Record<string, string> = {}): Promise<Response> {
    const res = await this.opts.blobs.fetch(`/v2/${repo}/${path}`, { headers, signal: AbortSignal.timeout(600_000) });
    if (res.status !== 200 && res.status !== 404) {
      await res.body?.cancel();
      throw new Error(`registry upstream answered ${res.status} for ${repo}/${path}`);
    }
    return res;
  }
}

/** A config finding's rule, fingerprint and confidence (a config entry has no line to name). */
function configHit(hit: ContentHit): Pick<Finding, 'rule' | 'fingerprint' | 'confidence'> {
  return { rule: hit.rule, fingerprint: hit.fingerprint, ...(hit.confidence ? { confidence: hit.confidence } : {}) };
}

async function readAll(res: Response, limit: number): Promise<Buffer> {
  const bytes = await readBounded(res.body as AsyncIterable<Uint8Array> | null, limit);
  if (!bytes) throw new Unscannable(`document is larger than ${limit} bytes`);
  return bytes;
}
