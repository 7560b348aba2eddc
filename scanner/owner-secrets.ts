import { once } from 'node:events';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';
import { readBounded } from '../core/read-bounded.ts';
import type { Descriptor } from '../oci/manifests.ts';
import type { Finding } from '../store/index.ts';

/**
 * The secrets of an image's owner as the scan may know them: their keyed hashes and lengths, never
 * the values (issue 35). The store answers it (store/secrets.ts), wired in service.ts.
 */
export interface OwnerSecretHashes {
  /** What to look for in `repo`'s images; undefined when its owner keeps no secret long enough to look for. */
  forRepo(repo: string): Promise<SecretLookup | undefined>;
}

export interface SecretLookup {
  /** How many bytes `head` reads: values are at least this long (shorter ones are not looked for). */
  headBytes: number;
  /** A keyed fingerprint of the `headBytes` bytes at `at` (cheap: it runs at every word). */
  head(bytes: Uint8Array, at: number): number;
  /** The lengths of the values that begin with bytes of this fingerprint. */
  lengthsByHead: ReadonlyMap<number, readonly number[]>;
  /** The name of the secret whose value is exactly `candidate`, by its keyed hash. */
  find(candidate: Buffer): string | undefined;
}
/** Files past this size are not read for the owner's secrets (the rules' scan reads them as it does). */
const MAX_FILE_BYTES = 32 * 1024 * 1024;

/**
 * Bytes a value stands between where it is written: the start or end of a file, whitespace,
 * quotes, an assignment, a separator, a bracket, a URL's punctuation. A candidate is any run of a
 * known length from just after one of them to just before another, so a value holding spaces
 * (a phrase) is found too; only candidates of the right length on both ends are hashed.
 */
const DELIMITERS = new Uint8Array(256);
for (const c of ' \t\r\n\v\f"\'`=:,;()[]{}<>@/&?#|\\\0') DELIMITERS[c.charCodeAt(0)] = 1;

export interface SecretHit {
  name: string;
  /** 1-based line of the first place it stands. */
  line: number;
}

/**
 * The owner's secrets that stand in `bytes`, each once, by exact keyed-hash match (no false alarm).
 * At each word (a byte that is no delimiter, after one or at the start) the keyed fingerprint of the
 * next bytes picks the lengths to try; only those candidates that also end at a delimiter are hashed.
 */
export function findSecrets(lookup: SecretLookup, bytes: Buffer): SecretHit[] {
  const hits = new Map<string, number>();
  const end = bytes.length;
  for (let start = 0; start + lookup.headBytes <= end; start++) {
    if (DELIMITERS[bytes[start]!] || (start > 0 && !DELIMITERS[bytes[start - 1]!])) continue;
    const lengths = lookup.lengthsByHead.get(lookup.head(bytes, start));
    if (!lengths) continue;
    for (const length of lengths) {
      const stop = start + length;
      if (stop > end || (stop < end && !DELIMITERS[bytes[stop]!])) continue;
      const name = lookup.find(bytes.subarray(start, stop));
      if (name && !hits.has(name)) hits.set(name, lineAt(bytes, start));
    }
  }
  return [...hits].map(([name, line]) => ({ name, line }));
}

function lineAt(bytes: Buffer, at: number): number {
  let line = 1;
  for (let i = bytes.indexOf(10); i >= 0 && i < at; i = bytes.indexOf(10, i + 1)) line += 1;
  return line;
}

export interface LayerSecretHit extends SecretHit {
  path: string;
}

/**
 * The owner's secrets in each file of a layer (gzip or plain tar; the rules' scan has read and
 * bounded the same blob before this runs). `zstd` layers answer `undefined`: not searched.
 */
export async function secretsInLayer(source: Readable, lookup: SecretLookup): Promise<LayerSecretHit[] | undefined> {
  const hits: LayerSecretHit[] = [];
  const tar = extract();
  tar.on('entry', (header, stream, next) => {
    const path = header.name.replace(/^(\.\/|\/)+/, '');
    if (header.type !== 'file' || (header.size ?? 0) > MAX_FILE_BYTES || path.split('/').pop()!.startsWith('.wh.')) {
      stream.on('end', next).resume();
      return;
    }
    const chunks: Buffer[] = [];
    stream.on('data', (c: unknown) => chunks.push(c as Buffer));
    stream.on('end', () => {
      for (const hit of findSecrets(lookup, Buffer.concat(chunks))) hits.push({ path, ...hit });
      next();
    });
  });
  const head = await firstChunk(source);
  if (head.length >= 4 && head.readUInt32BE(0) === 0x28b52ffd) {
    source.destroy();
    return undefined;
  }
  if (head.length) source.unshift(head);
  if (head[0] === 0x1f && head[1] === 0x8b) await pipeline(source, createGunzip(), tar);
  else await pipeline(source, tar);
  return hits;
}

/** The stream's first chunk, read without consuming the stream (it is put back by the caller). */
async function firstChunk(source: Readable): Promise<Buffer> {
  for (;;) {
    const chunk = source.read() as Buffer | null;
    if (chunk) return chunk;
    if (source.readableEnded || source.destroyed) return Buffer.alloc(0);
    await Promise.race([once(source, 'readable'), once(source, 'end')]);
  }
}

/** Largest image config read for the owner's secrets (the rules' scan bounds it the same). */
const MAX_CONFIG_BYTES = 8 * 1024 * 1024;

/**
 * Where the owner's secrets stand in one image: its config (Env, history) and every layer, as
 * findings `owner-secret` naming the secret, its file, line and layer (1-based). Layers are read
 * again for this, per image (the rules' results are kept by layer digest and shared by every owner;
 * these depend on the owner's secrets of the day).
 */
export async function ownerSecretFindings(
  port: OwnerSecretHashes,
  repo: string,
  image: { config: Descriptor; layers: readonly Descriptor[] },
  blob: (digest: string) => Promise<Readable | undefined>,
): Promise<Finding[]> {
  const lookup = await port.forRepo(repo);
  if (!lookup) return [];
  const findings: Finding[] = [];
  const found = (f: Omit<Finding, 'rule'>) => findings.push({ rule: 'owner-secret', ...f });
  const configBytes = await readBounded((await blob(image.config.digest)) ?? null, MAX_CONFIG_BYTES);
  if (configBytes) {
    let config: { config?: { Env?: unknown }; history?: unknown } = {};
    try { config = JSON.parse(configBytes.toString('utf8')); } catch { /* the rules' scan said so already */ }
    const env = Array.isArray(config?.config?.Env) ? config.config.Env : [];
    for (const entry of env) {
      if (typeof entry !== 'string') continue;
      for (const hit of findSecrets(lookup, Buffer.from(entry))) found({ path: `config:Env/${entry.split('=', 1)[0]!.slice(0, 100)}`, layer: image.config.digest, secret: hit.name });
    }
    const history = Array.isArray(config?.history) ? config.history : [];
    history.forEach((h: unknown, i: number) => {
      const createdBy = (h as { created_by?: unknown })?.created_by;
      if (typeof createdBy !== 'string') return;
      for (const hit of findSecrets(lookup, Buffer.from(createdBy))) found({ path: `config:history[${i}]`, layer: image.config.digest, secret: hit.name });
    });
  }
  for (const [i, layer] of image.layers.entries()) {
    const source = await blob(layer.digest);
    if (!source) continue;
    for (const hit of (await secretsInLayer(source, lookup)) ?? []) {
      found({ path: hit.path, layer: layer.digest, line: hit.line, secret: hit.name, layer_index: i + 1 });
    }
  }
  return findings;
}
