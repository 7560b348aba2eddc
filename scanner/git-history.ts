/**
 * A `.git` folder inside a layer (`COPY . .` brings it along): its loose objects and packfiles
 * are collected as the layer streams, then every commit's tree is walked and every blob scanned,
 * so a secret deleted from the working tree (`git rm`) but still in history is found. A finding
 * names the repository, the commit that first holds the file, and its path there:
 * `app/.git@1a2b3c4d5e6f:config/settings.py`. Blobs no commit reaches are scanned too, named by id.
 *
 * The object formats are git's own (zlib-deflated `type size\0body`; packfile v2 entries with
 * offset and reference deltas), read with zlib. Every object's inflated size is charged to the
 * layer's archive budget, and the bytes held per repository are bounded.
 */
import { createHash } from 'node:crypto';
import zlib from 'node:zlib';
import type { ArchiveBudget, ArchiveContext } from './archives.ts';
import { openArchive } from './archives.ts';
import { FileScan, pathMatches, UnscannableLayer } from './file-scan.ts';

/** A file of a repository's object store: a loose object (`objects/ab/cdef…`) or a packfile. */
const OBJECT_PATH = /^(?<gitdir>(?:.*\/)?\.git)\/objects\/(?:(?<dir>[0-9a-f]{2})\/(?<rest>[0-9a-f]{38})|pack\/pack-[0-9a-f]{40,64}\.pack)$/;

/** Whether the layer file at `path` is a git object store's file (held, then read by `scanRepositories`). */
export function gitObjectFile(path: string): { gitdir: string } | undefined {
  const m = OBJECT_PATH.exec(path);
  return m ? { gitdir: m.groups!.gitdir! } : undefined;
}

type ObjectType = 'commit' | 'tree' | 'blob' | 'tag';
interface GitObject {
  type: ObjectType;
  body: Buffer;
}

const TYPES: Record<number, ObjectType> = { 1: 'commit', 2: 'tree', 3: 'blob', 4: 'tag' };
/** Longest chain of deltas followed (git itself writes at most 50 by default). */
const MAX_DELTA_DEPTH = 1000;

/** The object stores met in one layer, by `.git` folder. */
export class GitStores {
  private readonly stores = new Map<string, { loose: Buffer[]; packs: Buffer[]; held: number }>();

  constructor(private readonly maxHeld: number) {}

  /** Keeps one object-store file of the repository at `gitdir`, read from `chunks`. */
  async add(gitdir: string, path: string, chunks: AsyncIterable<Buffer>): Promise<void> {
    const store = this.stores.get(gitdir) ?? { loose: [], packs: [], held: 0 };
    this.stores.set(gitdir, store);
    const held: Buffer[] = [];
    for await (const chunk of chunks) {
      store.held += chunk.length;
      if (store.held > this.maxHeld) throw new UnscannableLayer(`${gitdir}: a git object store larger than ${this.maxHeld} bytes is not read`);
      held.push(chunk);
    }
    (path.endsWith('.pack') ? store.packs : store.loose).push(Buffer.concat(held));
  }

  /** Reads every repository's objects and scans its history. */
  async scan(ctx: ArchiveContext): Promise<void> {
    for (const [gitdir, store] of this.stores) {
      const objects = new Map<string, GitObject>();
      const put = (type: ObjectType, body: Buffer) => objects.set(objectId(type, body), { type, body });
      for (const raw of store.loose) {
        const data = inflate(raw, gitdir, ctx.budget).body;
        const nul = data.indexOf(0);
        const [type] = data.toString('latin1', 0, Math.max(nul, 0)).split(' ');
        if (nul < 0 || !Object.values(TYPES).includes(type as ObjectType)) throw new UnscannableLayer(`${gitdir}: a loose object is not a git object`);
        put(type as ObjectType, data.subarray(nul + 1));
      }
      for (const pack of store.packs) readPack(pack, gitdir, ctx.budget, objects, put);
      store.loose = [];
      store.packs = [];
      await scanHistory(gitdir, objects, ctx);
    }
  }
}

function objectId(type: string, body: Buffer): string {
  return createHash('sha1').update(`${type} ${body.length}\0`).update(body).digest('hex');
}

/** Inflates one zlib stream at the start of `data`: its bytes, and how many compressed bytes it took. */
function inflate(data: Buffer, gitdir: string, budget: ArchiveBudget, size?: number): { body: Buffer; read: number } {
  let out: { buffer: Buffer; engine: zlib.Inflate };
  try {
    out = zlib.inflateSync(data, { info: true, maxOutputLength: size === undefined ? budget.limits.maxHeld : Math.max(size, 1) }) as unknown as { buffer: Buffer; engine: zlib.Inflate };
  } catch (err) {
    throw new UnscannableLayer(`${gitdir}: a git object cannot be inflated: ${(err as Error).message}`);
  }
  budget.charge(out.buffer.length, gitdir, out.buffer.length, out.engine.bytesWritten);
  return { body: out.buffer, read: out.engine.bytesWritten };
}

/** Packfile v2: each entry's type and size, an optional delta base, then its deflated data. */
function readPack(pack: Buffer, gitdir: string, budget: ArchiveBudget, objects: Map<string, GitObject>, put: (type: ObjectType, body: Buffer) => void): void {
  if (pack.length < 12 || pack.toString('latin1', 0, 4) !== 'PACK' || pack.readUInt32BE(4) !== 2) throw new UnscannableLayer(`${gitdir}: a packfile is not a version 2 pack`);
  const count = pack.readUInt32BE(8);
  type Entry = { type: ObjectType; body: Buffer } | { base: number | string; delta: Buffer };
  const entries = new Map<number, Entry>();
  let pos = 12;
  for (let i = 0; i < count; i++) {
    budget.member(gitdir);
    const start = pos;
    let byte = pack[pos++]!;
    const kind = (byte >> 4) & 7;
    let size = byte & 15;
    for (let shift = 4; byte & 0x80; shift += 7) {
      if (pos >= pack.length || shift > 56) throw new UnscannableLayer(`${gitdir}: a packfile entry is truncated`);
      byte = pack[pos++]!;
      size += (byte & 0x7f) * 2 ** shift;
    }
    let base: number | string | undefined;
    if (kind === 6) {
      byte = pack[pos++]!;
      let offset = byte & 0x7f;
      while (byte & 0x80) {
        byte = pack[pos++]!;
        offset = (offset + 1) * 128 + (byte & 0x7f);
      }
      base = start - offset;
    } else if (kind === 7) {
      base = pack.toString('hex', pos, pos + 20);
      pos += 20;
    } else if (!TYPES[kind]) throw new UnscannableLayer(`${gitdir}: a packfile entry has an unknown type ${kind}`);
    if (pos >= pack.length) throw new UnscannableLayer(`${gitdir}: a packfile entry is truncated`);
    const { body, read } = inflate(pack.subarray(pos), gitdir, budget, size);
    pos += read;
    entries.set(start, base === undefined ? { type: TYPES[kind]!, body } : { base, delta: body });
  }
  const resolved = new Map<number, GitObject>();
  const resolve = (at: number, depth: number): GitObject => {
    const done = resolved.get(at);
    if (done) return done;
    const entry = entries.get(at);
    if (!entry) throw new UnscannableLayer(`${gitdir}: a packfile delta's base is missing`);
    if (depth > MAX_DELTA_DEPTH) throw new UnscannableLayer(`${gitdir}: a packfile delta chain is longer than ${MAX_DELTA_DEPTH}`);
    let object: GitObject;
    if ('type' in entry) object = entry;
    else {
      const base = typeof entry.base === 'number' ? resolve(entry.base, depth + 1) : objects.get(entry.base) ?? resolveRef(entry.base, depth + 1);
      object = { type: base.type, body: applyDelta(base.body, entry.delta, gitdir) };
      budget.charge(object.body.length, gitdir);
    }
    resolved.set(at, object);
    return object;
  };
  // A reference delta's base in this pack: found by id once the others are resolved.
  const byId = new Map<string, number>();
  const resolveRef = (id: string, depth: number): GitObject => {
    if (!byId.size) for (const [at, entry] of entries) if ('type' in entry) byId.set(objectId(entry.type, entry.body), at);
    const at = byId.get(id);
    if (at === undefined) throw new UnscannableLayer(`${gitdir}: a packfile delta's base ${id} is missing`);
    return resolve(at, depth);
  };
  for (const at of entries.keys()) {
    const object = resolve(at, 0);
    put(object.type, object.body);
  }
}

/** git's delta format: the base's and the result's sizes, then copy (from the base) and insert instructions. */
function applyDelta(base: Buffer, delta: Buffer, gitdir: string): Buffer {
  let pos = 0;
  const varint = () => {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      const byte = delta[pos++]!;
      value += (byte & 0x7f) * 2 ** shift;
      if (!(byte & 0x80) || pos >= delta.length) return value;
    }
  };
  const baseSize = varint();
  const size = varint();
  if (baseSize !== base.length) throw new UnscannableLayer(`${gitdir}: a delta does not fit its base`);
  const out = Buffer.alloc(size);
  let at = 0;
  while (pos < delta.length) {
    const op = delta[pos++]!;
    if (op & 0x80) {
      let offset = 0;
      let length = 0;
      for (let i = 0; i < 4; i++) if (op & (1 << i)) offset += delta[pos++]! * 2 ** (8 * i);
      for (let i = 0; i < 3; i++) if (op & (16 << i)) length += delta[pos++]! * 2 ** (8 * i);
      if (length === 0) length = 0x10000;
      if (offset + length > base.length || at + length > size) throw new UnscannableLayer(`${gitdir}: a delta copies past its base`);
      base.copy(out, at, offset, offset + length);
      at += length;
    } else if (op > 0) {
      if (at + op > size || pos + op > delta.length) throw new UnscannableLayer(`${gitdir}: a delta inserts past its end`);
      delta.copy(out, at, pos, pos + op);
      at += op;
      pos += op;
    } else throw new UnscannableLayer(`${gitdir}: a delta has a reserved instruction`);
  }
  if (at !== size) throw new UnscannableLayer(`${gitdir}: a delta's result is short`);
  return out;
}

/**
 * Walks every commit's tree (oldest commit first, each tree once) and scans each blob under the
 * first commit and path that hold it; then the blobs no commit reaches.
 */
async function scanHistory(gitdir: string, objects: Map<string, GitObject>, ctx: ArchiveContext): Promise<void> {
  const commits = [...objects].filter(([, o]) => o.type === 'commit').map(([id, o]) => {
    const text = o.body.toString('latin1', 0, Math.min(o.body.length, 4096));
    return { id, tree: /^tree ([0-9a-f]{40})/m.exec(text)?.[1], time: Number(/^committer .* (\d+) [+-]\d{4}$/m.exec(text)?.[1] ?? 0) };
  }).sort((a, b) => a.time - b.time);
  const seenTrees = new Set<string>();
  const scanned = new Set<string>();
  const scanBlob = async (id: string, path: string, inner: string) => {
    const blob = objects.get(id);
    if (!blob || blob.type !== 'blob' || scanned.has(id)) return;
    scanned.add(id);
    ctx.budget.member(path);
    const file = new FileScan(ctx.rules, path, inner ? pathMatches(ctx.rules, inner) : [], ctx.flag, ctx.budget.limits.maxHeld);
    file.feed(blob.body);
    const nested = file.end();
    if (nested) await openArchive(nested, path, 1, ctx);
  };
  for (const commit of commits) {
    const stack: Array<{ tree: string; prefix: string }> = commit.tree ? [{ tree: commit.tree, prefix: '' }] : [];
    while (stack.length) {
      const { tree, prefix } = stack.pop()!;
      const object = objects.get(tree);
      if (!object || object.type !== 'tree' || seenTrees.has(tree)) continue;
      seenTrees.add(tree);
      for (let pos = 0; pos < object.body.length;) {
        const space = object.body.indexOf(0x20, pos);
        const nul = object.body.indexOf(0, space);
        if (space < 0 || nul < 0 || nul + 21 > object.body.length) throw new UnscannableLayer(`${gitdir}: tree ${tree} is malformed`);
        const mode = object.body.toString('latin1', pos, space);
        const name = object.body.toString('utf8', space + 1, nul).replace(/[/\\]/g, '_').slice(0, 255);
        const id = object.body.toString('hex', nul + 1, nul + 21);
        pos = nul + 21;
        const path = prefix ? `${prefix}/${name}` : name;
        if (mode === '40000') stack.push({ tree: id, prefix: path });
        else if (mode !== '160000') await scanBlob(id, `${gitdir}@${commit.id.slice(0, 12)}:${path}`, path);
      }
    }
  }
  for (const [id, o] of objects) if (o.type === 'blob' && !scanned.has(id)) await scanBlob(id, `${gitdir}/objects/${id}`, '');
}
