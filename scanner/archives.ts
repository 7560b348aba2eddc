/**
 * Archives inside a layer: zip (jar, war, ear, whl, egg, docx…), tar, gzip (.gz, .tgz, npm
 * tarballs), opened as they are met and read member by member with the same rules, nested to a
 * bounded depth. A member's finding names the archives it is in: `app.jar!/BOOT-INF/classes/application.properties`.
 *
 * Every archive is hostile: its member count, the bytes it inflates to (in all, and against its
 * compressed size), its nesting and the time spent are bounded, and going past a bound makes the
 * layer unscannable with the reason, never clean. zip is read with yauzl (which also checks each
 * member's declared sizes against what it inflates to), tar with tar-stream, gzip with zlib.
 */
import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import yauzl from 'yauzl';
import { archiveKind, FileScan, HEAD_BYTES, pathMatches, UnscannableLayer, type Flag, type HeldArchive } from './file-scan.ts';
import type { RuleSet } from './rule-set.ts';

export interface ArchiveLimits {
  /** Deepest nesting of archives in archives (default 8). */
  maxDepth: number;
  /** Most members read in all the archives of one layer (default 500 000). */
  maxMembers: number;
  /** Most bytes inflated from all the archives of one layer, git objects included (default 4 GiB). */
  maxBytes: number;
  /** Largest inflated/compressed ratio of one member past 1 MiB (default 200; zip bombs reach millions). */
  maxRatio: number;
  /** Largest archive held in memory to be opened (default 256 MiB). */
  maxHeld: number;
  /** Longest time spent in the archives of one layer (default 10 min). */
  maxMs: number;
}

export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = {
  maxDepth: 8,
  maxMembers: 500_000,
  maxBytes: 4 * 1024 ** 3,
  maxRatio: 200,
  maxHeld: 256 * 1024 ** 2,
  maxMs: 10 * 60_000,
};

/** What one layer's archives have used of their bounds. */
export class ArchiveBudget {
  /** Archive members and git objects read so far, and the bytes they inflated to. */
  members = 0;
  bytes = 0;
  /** Time spent in archives before the current one, and when the current one began. */
  private spentMs = 0;
  private since: number | undefined;

  constructor(readonly limits: ArchiveLimits) {}

  /** Counts the time `work` takes against the layer's archive time. */
  async timed(work: () => Promise<void>): Promise<void> {
    this.since = performance.now();
    try {
      await work();
    } finally {
      this.spentMs += performance.now() - this.since;
      this.since = undefined;
    }
  }

  /** Milliseconds spent in the layer's archives so far. */
  get ms(): number {
    return this.spentMs + (this.since === undefined ? 0 : performance.now() - this.since);
  }

  member(path: string): void {
    if (++this.members > this.limits.maxMembers) throw new UnscannableLayer(`${path}: the layer's archives hold more than ${this.limits.maxMembers} members`);
  }

  /** Counts `n` inflated bytes of the member at `path`, of which `inflated` so far from `compressed` bytes. */
  charge(n: number, path: string, inflated = 0, compressed = Infinity): void {
    this.bytes += n;
    if (this.bytes > this.limits.maxBytes) throw new UnscannableLayer(`${path}: the layer's archives inflate to more than ${this.limits.maxBytes} bytes`);
    if (inflated > 1024 * 1024 && inflated > compressed * this.limits.maxRatio) {
      throw new UnscannableLayer(`${path}: inflates more than ${this.limits.maxRatio}× its compressed size (a compression bomb)`);
    }
    if (this.ms > this.limits.maxMs) throw new UnscannableLayer(`${path}: reading the layer's archives took longer than ${this.limits.maxMs / 1000} s`);
  }
}

export interface ArchiveContext {
  rules: RuleSet;
  flag: Flag;
  budget: ArchiveBudget;
}

/** Opens an archive held from the file at `path` (`depth` archives deep) and scans its members. */
export async function openArchive(archive: HeldArchive, path: string, depth: number, ctx: ArchiveContext): Promise<void> {
  if (depth > ctx.budget.limits.maxDepth) throw new UnscannableLayer(`${path}: archives nested more than ${ctx.budget.limits.maxDepth} deep`);
  try {
    if (archive.kind === 'zip') await readZip(archive.bytes, path, depth, ctx);
    else if (archive.kind === 'tar') await readTar(Readable.from([archive.bytes]), path, depth, ctx);
    else await readGzip(archive.bytes, path, depth, ctx);
  } catch (err) {
    if (err instanceof UnscannableLayer) throw err;
    throw new UnscannableLayer(`${path}: not a readable ${archive.kind} archive: ${(err as Error).message}`);
  }
}

/** Scans one member's bytes as a file of its own, and opens it in turn if it is an archive. */
async function readMember(chunks: AsyncIterable<Buffer>, path: string, inner: string, depth: number, ctx: ArchiveContext, compressed = Infinity): Promise<void> {
  ctx.budget.member(path);
  const file = new FileScan(ctx.rules, path, pathMatches(ctx.rules, inner), ctx.flag, ctx.budget.limits.maxHeld);
  let inflated = 0;
  for await (const chunk of chunks) {
    inflated += chunk.length;
    ctx.budget.charge(chunk.length, path, inflated, compressed);
    file.feed(chunk);
  }
  const nested = file.end();
  if (nested) await openArchive(nested, path, depth + 1, ctx);
}

/** A member's name as a path: no leading `/`, `.` parts or NULs, bounded (it names a finding, never a file here). */
function memberName(name: string): string {
  return name.replace(/\0/g, '').split(/[/\\]/).filter((p) => p !== '' && p !== '.').join('/').slice(0, 1024);
}

async function readZip(bytes: Buffer, path: string, depth: number, ctx: ArchiveContext): Promise<void> {
  // strictFileNames off: a `..` or `\` in a member's name is only a name here, nothing is written.
  const zip = await new Promise<yauzl.ZipFile>((resolve, reject) => yauzl.fromBuffer(bytes, { lazyEntries: true, strictFileNames: false, validateEntrySizes: true, decodeStrings: true }, (err, z) => (err ? reject(err) : resolve(z))));
  try {
    const entries = (async function* () {
      for (;;) {
        const entry = await new Promise<yauzl.Entry | undefined>((resolve, reject) => {
          const cleanup = () => zip.removeAllListeners('entry').removeAllListeners('end').removeAllListeners('error');
          zip.once('entry', (e: yauzl.Entry) => { cleanup(); resolve(e); });
          zip.once('end', () => { cleanup(); resolve(undefined); });
          zip.once('error', (e: Error) => { cleanup(); reject(e); });
          zip.readEntry();
        });
        if (!entry) return;
        yield entry;
      }
    })();
    for await (const entry of entries) {
      if (entry.fileName.endsWith('/')) continue;
      const inner = memberName(entry.fileName);
      if (entry.isEncrypted()) throw new UnscannableLayer(`${path}!/${inner}: an encrypted zip member cannot be read`);
      const stream = await new Promise<Readable>((resolve, reject) => zip.openReadStream(entry, (err, s) => (err ? reject(err) : resolve(s))));
      await readMember(stream as AsyncIterable<Buffer>, `${path}!/${inner}`, inner, depth, ctx, entry.compressedSize);
    }
  } finally {
    zip.close();
  }
}

async function readTar(source: Readable, path: string, depth: number, ctx: ArchiveContext): Promise<void> {
  const extract = tar.extract();
  source.on('error', (err) => extract.destroy(err));
  source.pipe(extract as unknown as NodeJS.WritableStream);
  for await (const entry of extract) {
    const h = entry.header;
    if (h.type !== 'file' && h.type !== 'contiguous-file') {
      entry.resume();
      continue;
    }
    const inner = memberName(h.name);
    await readMember(entry as AsyncIterable<Buffer>, `${path}!/${inner}`, inner, depth, ctx);
  }
}

/** A gzip file: a tar inside (`.tgz`, `.tar.gz`, an npm tarball) is read as one; anything else as the file it compresses. */
async function readGzip(bytes: Buffer, path: string, depth: number, ctx: ArchiveContext): Promise<void> {
  const gunzip = zlib.createGunzip({ chunkSize: 256 * 1024 });
  Readable.from([bytes]).pipe(gunzip);
  let inflated = 0;
  const counted = (async function* () {
    for await (const chunk of gunzip as AsyncIterable<Buffer>) {
      inflated += chunk.length;
      ctx.budget.charge(chunk.length, path, inflated, bytes.length);
      yield chunk;
    }
  })();
  const stream = Readable.from(counted, { objectMode: false });
  const head = await firstBytes(stream, HEAD_BYTES);
  if (archiveKind(head) === 'tar') return readTar(stream, path, depth + 1, ctx);
  const base = path.slice(path.lastIndexOf('/') + 1).replace(/\.gz$/i, '');
  // The compressed file is one member: its bytes were charged above, so it is counted here as a member only.
  const file = new FileScan(ctx.rules, `${path}!/${base}`, pathMatches(ctx.rules, base), ctx.flag, ctx.budget.limits.maxHeld);
  ctx.budget.member(path);
  for await (const chunk of stream as AsyncIterable<Buffer>) file.feed(chunk);
  const nested = file.end();
  if (nested) await openArchive(nested, `${path}!/${base}`, depth + 1, ctx);
}

/**
 * Waits for the first `min` bytes of a stream (or all of a shorter one: `read(min)` gives what is
 * left once the stream has ended) and puts them back. Empty stream → empty buffer.
 */
export async function firstBytes(stream: Readable, min: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const done = () => {
      stream.off('readable', onReadable);
      stream.off('error', onError);
      stream.off('end', onEnd);
    };
    const onReadable = () => {
      const chunk = stream.read(min) as Buffer | null;
      if (chunk === null) return;
      done();
      stream.unshift(chunk);
      resolve(chunk);
    };
    const onError = (err: Error) => {
      done();
      reject(err);
    };
    const onEnd = () => {
      done();
      resolve(Buffer.alloc(0));
    };
    stream.on('readable', onReadable);
    stream.on('error', onError);
    stream.on('end', onEnd);
  });
}
