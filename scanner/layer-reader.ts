import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { PassThrough, Transform, type Readable, type TransformCallback } from 'node:stream';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import { ArchiveBudget, DEFAULT_ARCHIVE_LIMITS, firstBytes, openArchive, type ArchiveContext, type ArchiveLimits } from './archives.ts';
import { FileScan, pathMatches, UnscannableLayer, type Flag } from './file-scan.ts';
import { gitObjectFile, GitStores } from './git-history.ts';
import { builtInRules, type RuleSet } from './rule-set.ts';
import { isVendored, type PathMatch } from './rules.ts';

export { UnscannableLayer } from './file-scan.ts';

/** Bounds that keep a hostile layer (gzip bomb, absurd tar) from hurting a worker. */
export interface LayerLimits {
  /** Largest uncompressed layer, whatever its compressed size (default 32 GiB). */
  maxBytes: number;
  /** Largest uncompressed/compressed ratio once past `ratioFloor` bytes (default 200). */
  maxRatio: number;
  /** The ratio limit applies only beyond this many uncompressed bytes (default 256 MiB). */
  ratioFloor: number;
  /** Most tar entries in one layer (default 2 000 000). */
  maxEntries: number;
  /** Longest entry path in bytes (default 4096, Linux's PATH_MAX). */
  maxPathLength: number;
  /** Largest single entry (default 64 GiB). */
  maxEntrySize: number;
}

export const DEFAULT_LAYER_LIMITS: LayerLimits = {
  maxBytes: 32 * 1024 ** 3,
  maxRatio: 200,
  ratioFloor: 256 * 1024 ** 2,
  maxEntries: 2_000_000,
  maxPathLength: 4096,
  maxEntrySize: 64 * 1024 ** 3,
};

/** One finding in a layer: never the secret, only where it is and a short hash of it. */
export interface LayerFinding {
  path: string;
  rule: string;
  /** 1-based line of a content finding. */
  line?: number;
  /** Short hash of the secret (of the whole file for a file-name rule): one secret, one fingerprint, in every layer. */
  fingerprint?: string;
  /** Under node_modules, site-packages, vendor and the like: a package's file, not the image owner's. */
  vendored?: true;
  /** The generic rule was not sure (a bare hash, a UUID, a name that only says `key`): still a finding. */
  confidence?: 'low';
}

/** Most findings kept for one layer (the rest would say nothing new). */
const MAX_FINDINGS = 1000;

export interface LayerScanResult {
  state: 'clean' | 'flagged' | 'unscannable';
  findings: LayerFinding[];
  reason?: string;
  compressedBytes: number;
  bytes: number;
  entries: number;
  compression: 'gzip' | 'zstd' | 'none' | 'unknown';
  /** What archives and `.git` folders in the layer cost: members and objects read, bytes inflated, time spent opening them. */
  archives: { members: number; bytes: number; ms: number };
}

/**
 * The scan could not run, for a reason outside the layer (no `zstd` on this machine, zstd killed):
 * the job fails and is retried; nothing about the layer is decided or kept.
 */
export class ScanEnvironmentError extends Error {
  override name = 'ScanEnvironmentError';
}

/**
 * Reads one layer blob as it streams (never held in memory): checks its digest, decompresses it
 * (gzip, zstd or none, told by its first bytes, not by the media type a client claims), walks the
 * tar with tar-stream and applies the rules to every entry's path and every regular file's bytes.
 * Whiteouts are ignored: a file deleted by a later layer is still in this one, and still counts.
 *
 * Never throws for bad content: a layer that cannot be read is `unscannable` with the reason.
 * Throws when `source` itself fails (the upstream went away) or the scan cannot run here
 * (`ScanEnvironmentError`), so the job can be retried. The size a manifest declares is not an input:
 * the same digest may be declared with different sizes, and only that manifest is wrong.
 */
export async function scanLayer(
  source: Readable,
  opts: { digest: string; limits?: Partial<LayerLimits>; archiveLimits?: Partial<ArchiveLimits>; rules?: RuleSet; onProgress?: (compressedBytes: number) => void },
): Promise<LayerScanResult> {
  const limits = { ...DEFAULT_LAYER_LIMITS, ...opts.limits };
  const rules = opts.rules ?? builtInRules();
  const [algorithm, expectedHex] = opts.digest.split(':') as [string, string];
  if ((algorithm !== 'sha256' && algorithm !== 'sha512') || !/^[a-f0-9]+$/.test(expectedHex ?? '')) {
    source.destroy();
    return { state: 'unscannable', findings: [], reason: `unsupported digest "${opts.digest}"`, compressedBytes: 0, bytes: 0, entries: 0, compression: 'unknown', archives: { members: 0, bytes: 0, ms: 0 } };
  }
  const hash = createHash(algorithm);
  let compressedBytes = 0;
  let bytes = 0;
  let entries = 0;
  let compression: LayerScanResult['compression'] = 'unknown';
  let sourceError: Error | undefined;
  let lastProgress = 0;

  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      hash.update(chunk);
      compressedBytes += chunk.length;
      if (opts.onProgress && compressedBytes - lastProgress >= 8 * 1024 * 1024) {
        lastProgress = compressedBytes;
        opts.onProgress(compressedBytes);
      }
      cb(null, chunk);
    },
  });
  source.on('error', (err) => {
    sourceError = err;
    tap.destroy(err);
  });
  source.pipe(tap);

  const findings = new Map<string, LayerFinding>();
  const flag: Flag = (path, rule, hit = {}) => {
    if (findings.size >= MAX_FINDINGS) return;
    const f: LayerFinding = {
      path, rule, ...(hit.line ? { line: hit.line } : {}), ...(hit.fingerprint ? { fingerprint: hit.fingerprint } : {}),
      ...(isVendored(path) ? { vendored: true as const } : {}), ...(hit.confidence ? { confidence: hit.confidence } : {}),
    };
    findings.set(`${path}\0${rule}\0${hit.fingerprint ?? ''}`, f);
  };

  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      bytes += chunk.length;
      if (bytes > limits.maxBytes) return cb(new UnscannableLayer(`the layer decompresses to more than ${limits.maxBytes} bytes`));
      if (bytes > limits.ratioFloor && bytes > compressedBytes * limits.maxRatio) {
        return cb(new UnscannableLayer(`the layer decompresses more than ${limits.maxRatio}× its compressed size (a compression bomb)`));
      }
      cb(null, chunk);
    },
  });

  const archives: ArchiveContext = { rules, flag, budget: new ArchiveBudget({ ...DEFAULT_ARCHIVE_LIMITS, ...opts.archiveLimits }) };
  const gitStores = new GitStores(archives.budget.limits.maxHeld);
  const archiveCost = () => ({ members: archives.budget.members, bytes: archives.budget.bytes, ms: Math.round(archives.budget.ms) });
  try {
    const picked = decompressorFor(await firstBytes(tap, 4));
    compression = picked.compression;
    const { decompress, child } = picked;
    const extract = tar.extract();
    const fail = (err: Error) => extract.destroy(err);
    tap.on('error', fail);
    decompress.on('error', (err: Error) => fail(err instanceof UnscannableLayer || err instanceof ScanEnvironmentError ? err : new UnscannableLayer(`${compression} data is corrupt: ${err.message}`)));
    counter.on('error', fail);
    tap.pipe(decompress).pipe(counter).pipe(extract as unknown as NodeJS.WritableStream);
    try {
      await scanEntries(extract, limits, archives, gitStores, () => ++entries);
      await archives.budget.timed(() => gitStores.scan(archives));
    } finally {
      child?.kill('SIGKILL');
    }
  } catch (err) {
    tap.destroy();
    if (sourceError) throw sourceError;
    if (err instanceof ScanEnvironmentError) throw err;
    const reason = err instanceof UnscannableLayer ? err.message : `not a readable ${compression === 'none' ? 'tar' : `${compression} tar`}: ${(err as Error).message}`;
    return { state: 'unscannable', findings: [...findings.values()], reason, compressedBytes, bytes, entries, compression, archives: archiveCost() };
  }
  if (sourceError) throw sourceError;
  const actual = hash.digest('hex');
  if (actual !== expectedHex) {
    return { state: 'unscannable', findings: [], reason: `digest mismatch: the blob hashes to ${algorithm}:${actual}, not ${opts.digest}`, compressedBytes, bytes, entries, compression, archives: archiveCost() };
  }
  const list = [...findings.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : (a.line ?? 0) - (b.line ?? 0)));
  return { state: list.length ? 'flagged' : 'clean', findings: list, compressedBytes, bytes, entries, compression, archives: archiveCost() };
}

/** The decompressor a layer's first bytes ask for: gzip or zstd by their magic, else the bytes as they are. */
function decompressorFor(head: Buffer): { compression: LayerScanResult['compression']; decompress: Transform | PassThrough; child?: ReturnType<typeof spawn> } {
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return { compression: 'gzip', decompress: zlib.createGunzip({ chunkSize: 256 * 1024 }) };
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) {
    const { stream, child } = zstdDecompressor();
    return { compression: 'zstd', decompress: stream, child };
  }
  return { compression: 'none', decompress: new PassThrough() };
}

/**
 * Applies the rules to every entry of the layer's tar as it streams: paths, regular files' bytes,
 * archives inside them; `.git` objects are kept for the history scan after the last entry.
 * `counted` counts one entry and answers how many so far (the layer's result reports it).
 */
async function scanEntries(extract: tar.Extract, limits: LayerLimits, archives: ArchiveContext, gitStores: GitStores, counted: () => number): Promise<void> {
  const { rules, flag } = archives;
  for await (const entry of extract) {
    if (counted() > limits.maxEntries) throw new UnscannableLayer(`the layer has more than ${limits.maxEntries} entries`);
    const h = entry.header;
    const path = checkedPath(h.name, limits);
    if (typeof h.size === 'number' && (h.size < 0 || h.size > limits.maxEntrySize)) throw new UnscannableLayer(`entry "${path}" claims an absurd size ${h.size}`);
    const regular = h.type === 'file' || h.type === 'contiguous-file';
    const base = path.slice(path.lastIndexOf('/') + 1);
    const matches: PathMatch[] = regular || h.type === 'link' ? (base.startsWith('.wh.') ? [] : pathMatches(rules, path)) : [];
    if (!regular) {
      for (const m of matches) if (!m.content) flag(path, m.rule);
      entry.resume();
      continue;
    }
    const git = gitObjectFile(path);
    if (git) {
      await gitStores.add(git.gitdir, path, entry as AsyncIterable<Buffer>);
      continue;
    }
    const file = new FileScan(rules, path, matches, flag, archives.budget.limits.maxHeld);
    for await (const chunk of entry as AsyncIterable<Buffer>) file.feed(chunk);
    const nested = file.end();
    if (nested) await archives.budget.timed(() => openArchive(nested, path, 1, archives));
  }
}

/** Entry path relative to the layer root; refuses paths that escape it or are absurd. */
function checkedPath(name: string, limits: LayerLimits): string {
  if (Buffer.byteLength(name) > limits.maxPathLength) throw new UnscannableLayer(`an entry path is longer than ${limits.maxPathLength} bytes`);
  if (name.includes('\0')) throw new UnscannableLayer('an entry path contains a NUL byte');
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new UnscannableLayer(`entry "${name.slice(0, 200)}" escapes the layer root (..)`);
  return parts.join('/');
}

/**
 * zstd through the `zstd` program (Node 20's zlib has none): a Transform whose writes go to the
 * child's stdin and whose output is its stdout. `--no-progress -q`: nothing but data on stdout.
 */
function zstdDecompressor(): { stream: Transform; child: ReturnType<typeof spawn> } {
  const child = spawn('zstd', ['-dc', '-q', '--no-progress', '--memory=256MB'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => { if (stderr.length < 2000) stderr += d.toString(); });
  const stream = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      if (!child.stdin!.write(chunk)) child.stdin!.once('drain', () => cb());
      else cb();
    },
    flush(cb) {
      child.stdin!.end();
      child.once('close', (code, signal) => {
        if (signal) cb(new ScanEnvironmentError(`zstd was ended by ${signal}`));
        else if (code !== 0) cb(new UnscannableLayer(`zstd data is corrupt: ${stderr.trim() || `zstd exited with ${code}`}`));
        else cb();
      });
    },
  });
  child.stdin!.on('error', () => undefined); // EPIPE when zstd gives up; its exit code tells why
  child.on('error', (err) => stream.destroy(new ScanEnvironmentError(`cannot run zstd (install it: apt-get install zstd): ${err.message}`)));
  child.stdout!.on('data', (d: Buffer) => {
    if (!stream.push(d)) child.stdout!.pause();
  });
  stream.on('drain', () => child.stdout!.resume());
  // Readable side pulled again: let zstd write more.
  const read = stream._read.bind(stream);
  stream._read = (n: number) => {
    child.stdout!.resume();
    read(n);
  };
  return { stream, child };
}
