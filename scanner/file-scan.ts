import { createHash } from 'node:crypto';
import { ContentScanner } from './content-scanner.ts';
import type { RuleSet } from './rule-set.ts';
import { matchPath, type PathMatch } from './rules.ts';

/** A refusal of a layer's content: the layer is unscannable for this reason. */
export class UnscannableLayer extends Error {
  override name = 'UnscannableLayer';
}

/** Records one finding (the layer reader's, deduplicated and bounded there). */
export type Flag = (path: string, rule: string, hit?: { line?: number; fingerprint?: string; confidence?: 'low' }) => void;

/** Archive formats opened inside a layer (told by their first bytes, whatever the file is called). */
export type ArchiveKind = 'zip' | 'tar' | 'gzip';

/** An archive found in a file: its bytes, held to be opened once the file is read. */
export interface HeldArchive {
  kind: ArchiveKind;
  bytes: Buffer;
}

/** Content of name-matched credential files is read up to this many bytes to check it. */
const CONDITIONAL_READ = 1024 * 1024;

/** How many first bytes of a file decide what it is: one tar header. */
export const HEAD_BYTES = 512;

/**
 * A tar header: "ustar" at 257 and a checksum that adds up. The magic alone is not enough: source
 * files quote it (tar-stream's own headers.js has it at 257), and such a file must be read as text,
 * not fail as a broken archive and make its whole layer unscannable.
 */
function isTarHeader(head: Buffer): boolean {
  if (head.length < HEAD_BYTES || head.toString('latin1', 257, 262) !== 'ustar') return false;
  const field = head.toString('latin1', 148, 156).replace(/[\0 ]+$/, '').trimStart();
  if (!/^[0-7]{1,7}$/.test(field)) return false;
  let sum = 8 * 0x20; // the checksum field itself counts as spaces
  for (let i = 0; i < HEAD_BYTES; i++) if (i < 148 || i >= 156) sum += head[i]!;
  return sum === parseInt(field, 8);
}

/** The archive a file's first bytes (HEAD_BYTES of them, or the whole file) announce: zip (jar, war, whl, egg, docx…), gzip (.gz, .tgz), tar. */
export function archiveKind(head: Buffer): ArchiveKind | undefined {
  if (head.length >= 4 && (head.readUInt32LE(0) === 0x04034b50 || head.readUInt32LE(0) === 0x06054b50)) return 'zip';
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return 'gzip';
  if (isTarHeader(head)) return 'tar';
  return undefined;
}

/**
 * Files whose content is not read: ELF executables and libraries embed self-test keys (GnuTLS
 * carries EC private keys for its FIPS self-tests), so every Debian image would be flagged, as
 * gitleaks and Trivy also leave them out; files compressed with xz, bzip2 or zstd, and compressed
 * images (PNG, JPEG, GIF). Their names are still checked. (gzip and zip are opened: archives.ts.)
 */
function isUnreadable(chunk: Buffer): boolean {
  if (chunk.length < 4) return false;
  const magic = chunk.readUInt32BE(0);
  return magic === 0x7f454c46 // ELF
    || magic === 0xfd377a58 // xz
    || (magic >>> 8 === 0x425a68 && chunk[3]! >= 0x31 && chunk[3]! <= 0x39) // bzip2: BZh1-9
    || magic === 0x28b52ffd // zstd
    || magic === 0x89504e47 // PNG
    || magic >>> 8 === 0xffd8ff // JPEG
    || magic === 0x47494638; // GIF8
}

/** Path rules (built-in and an operator's file-name rules) that a path matches. */
export function pathMatches(rules: RuleSet, path: string): PathMatch[] {
  return [...matchPath(path), ...rules.pathRules.filter((r) => r.path.test(path)).map((r) => ({ rule: r.id }))];
}

/**
 * One file's scan, fed in chunks: its name rules (a conditional one reads the first MiB), its
 * content rules, or, when its first bytes say archive, its bytes held (up to `maxHeld`) for the
 * caller to open. Findings go to `flag` under `path` (which names the archive members it is in).
 */
export class FileScan {
  private readonly scanner: ContentScanner;
  private kept: Buffer[] | undefined;
  private keptBytes = 0;
  private readonly fileHash;
  /** The first bytes, until HEAD_BYTES of them decide what the file is. */
  private head: Buffer | undefined = Buffer.alloc(0);
  private binary = false;
  private archive: ArchiveKind | undefined;
  private held: Buffer[] = [];
  private heldBytes = 0;

  constructor(
    rules: RuleSet,
    private readonly path: string,
    private readonly matches: PathMatch[],
    private readonly flag: Flag,
    private readonly maxHeld: number,
  ) {
    this.scanner = new ContentScanner(rules, { path });
    this.kept = matches.some((m) => m.content) ? [] : undefined;
    // A file flagged by its name is fingerprinted by its content: the same key file is one finding.
    this.fileHash = matches.length ? createHash('sha256') : undefined;
  }

  feed(chunk: Buffer): void {
    this.fileHash?.update(chunk);
    if (this.head) {
      // a file's kind is decided on its first HEAD_BYTES, however its bytes are cut into chunks
      this.head = Buffer.concat([this.head, chunk]);
      if (this.head.length < HEAD_BYTES) return;
      chunk = this.decide();
    }
    this.take(chunk);
  }

  /** Decides the file's kind on the bytes held so far; returns them to be taken. */
  private decide(): Buffer {
    const head = this.head!;
    this.head = undefined;
    this.archive = archiveKind(head);
    this.binary = !this.archive && isUnreadable(head);
    return head;
  }

  private take(chunk: Buffer): void {
    if (this.archive) {
      this.heldBytes += chunk.length;
      if (this.heldBytes > this.maxHeld) throw new UnscannableLayer(`${this.path}: an archive larger than ${this.maxHeld} bytes is not opened`);
      this.held.push(chunk);
      return;
    }
    if (this.binary) return;
    this.scanner.feed(chunk);
    if (this.kept && this.keptBytes < CONDITIONAL_READ) {
      this.kept.push(chunk);
      this.keptBytes += chunk.length;
    }
  }

  /** Flags what the file holds; returns the archive to open, if it is one. */
  end(): HeldArchive | undefined {
    if (this.head?.length) this.take(this.decide());
    const fingerprint = this.fileHash?.digest('hex').slice(0, 16);
    const head = this.kept ? Buffer.concat(this.kept).subarray(0, CONDITIONAL_READ).toString('latin1') : '';
    for (const m of this.matches) if (!m.content || m.content.test(head)) this.flag(this.path, m.rule, { fingerprint });
    this.kept = undefined;
    if (this.archive) {
      const bytes = Buffer.concat(this.held);
      this.held = [];
      return { kind: this.archive, bytes };
    }
    if (!this.binary) for (const hit of this.scanner.end()) this.flag(this.path, hit.rule, hit);
    return undefined;
  }
}
