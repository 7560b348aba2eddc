import { fingerprint, LINE_REACH, type CompiledRule, type ContentHit, type RuleSet } from './rule-set.ts';
import { isVendored } from './rules.ts';

/** Most findings kept for one file (a dump of a thousand keys is one problem, reported as 50). */
const MAX_HITS_PER_FILE = 50;

/** Bytes kept from one chunk to the next besides pending windows: a window's reach back from a keyword. */
const KEEP_BEHIND = 2 * LINE_REACH;

interface Pending {
  rule: CompiledRule;
  /** Absolute offsets of the keyword. */
  start: number;
  end: number;
}

const EMPTY = Buffer.alloc(0);

/**
 * The content scan of one file (or one Env entry, one history line), fed in chunks as the layer
 * streams. One pass of the keyword automaton over the bytes finds where rules may match; each rule's
 * regex then runs on a window around the keyword (its line, or the rule's span), so the cost does
 * not grow with the number of rules. A window that runs past the bytes read so far waits for the
 * next chunk; bytes behind it are carried over. Bytes are read as latin1 (one char per byte), so
 * binary files scan too and offsets are byte offsets.
 */
export class ContentScanner {
  private readonly index: RuleSet['general'];
  private carry: Buffer = EMPTY;
  /** Absolute offset of carry[0]. */
  private carryStart = 0;
  private state = 0;
  /** Line feeds before the current chunk. */
  private lines = 0;
  private pending: Pending[] = [];
  /** Per rule, the absolute offset up to which its windows were read. */
  private readonly readUntil = new Map<CompiledRule, number>();
  private readonly hits = new Map<string, ContentHit>();
  private unkeyedFrom = 0;
  /** Per keyword, where its last reported occurrence ended. */
  private readonly lastEnd: number[] = [];
  /** Per keyword, how far every rule it triggers has read. */
  private readonly covered: number[] = [];

  /** Under a package folder: the generic rule and weak findings are left out (below). */
  private readonly vendored: boolean;

  constructor(private readonly rules: RuleSet, private readonly opts: { path?: string } = {}) {
    this.index = rules.general;
    this.vendored = opts.path !== undefined && isVendored(opts.path);
  }

  feed(chunk: Buffer): void {
    this.scan(chunk, false);
  }

  end(): ContentHit[] {
    this.scan(EMPTY, true);
    return [...this.hits.values()];
  }

  private scan(chunk: Buffer, final: boolean): void {
    const text = this.carry.length ? Buffer.concat([this.carry, chunk]) : chunk;
    const base = this.carryStart;
    const chunkAt = this.carry.length; // chunk[0] in text
    const view = new TextView(text, base, chunkAt, this.lines);
    const pending = this.pending;
    this.pending = [];
    for (const p of pending) this.evaluate(p, view, final);
    const { keywords } = this.index.automaton;
    const { state, lines } = this.index.automaton.run(chunk, 0, this.state, (k, end) => {
      const at = base + chunkAt + end;
      // Every rule of this keyword already read past here (a flood of `eyJ` costs one window per 10 KiB).
      if (at <= (this.covered[k] ?? -1)) return;
      const start = at - keywords[k]!.length;
      // A run such as `AAAA…` repeats a keyword at every byte: one occurrence per keyword length is enough.
      if (start < (this.lastEnd[k] ?? -1)) return;
      this.lastEnd[k] = at;
      let covered = Infinity;
      for (const rule of this.index.rules[k]!) {
        this.evaluate({ rule, start, end: at }, view, final);
        if (this.applies(rule)) covered = Math.min(covered, this.readUntil.get(rule) ?? -1);
      }
      this.covered[k] = covered;
    });
    this.state = state;

    if (this.rules.unkeyed.length) this.scanUnkeyed(view, final);

    this.lines += lines;
    // Keep what a later window may need: the reach behind the next keyword, and every pending window.
    let keepFrom = base + text.length - KEEP_BEHIND;
    for (const p of this.pending) keepFrom = Math.min(keepFrom, windowStartBound(p));
    if (this.rules.unkeyed.length) keepFrom = Math.min(keepFrom, this.unkeyedFrom);
    keepFrom = Math.max(keepFrom, base);
    this.carry = final ? EMPTY : text.subarray(keepFrom - base);
    this.carryStart = keepFrom;
  }

  private evaluate(p: Pending, view: TextView, final: boolean): void {
    const { rule } = p;
    if (this.hits.size >= MAX_HITS_PER_FILE || !this.applies(rule)) return;
    const done = this.readUntil.get(rule) ?? -1;
    if (p.end <= done) return; // an earlier window of this rule covered this keyword
    const available = view.base + view.text.length;
    let from: number;
    let to: number;
    if (rule.span) {
      from = Math.max(view.base, p.start - rule.span.before, done);
      to = p.end + rule.span.after;
      if (to > available) {
        if (!final) return void this.pending.push(p);
        to = available;
      }
    } else {
      from = Math.max(view.lineStart(p.start), p.start - LINE_REACH, done);
      const reach = p.end + LINE_REACH;
      const lineEnd = view.lineEnd(p.end, Math.min(reach, available));
      if (lineEnd >= 0) to = lineEnd;
      else if (reach <= available || final) to = Math.min(reach, available);
      else return void this.pending.push(p);
    }
    this.readUntil.set(rule, to);
    this.match(rule, view, from, to);
  }

  /**
   * Whether a rule reads this file at all (operator rules with a path). Packages installed from a
   * registry hold doc examples and test fixtures under secret-like names by the thousand
   * (`password: 'secret123'`, RFC 6749's `"access_token":"2YotnFZFEjr1zCsicMWpAA"`), and an owner's own
   * secrets are not written there: in them only the rules that recognise a secret's own format run.
   */
  private applies(rule: CompiledRule): boolean {
    if (this.vendored && rule.family === 'generic') return false;
    return !rule.path || (this.opts.path !== undefined && rule.path.test(this.opts.path));
  }

  /** Runs a rule's regex over text[from..to) (absolute offsets) and keeps what it accepts. */
  private match(rule: CompiledRule, view: TextView, from: number, to: number): void {
    const window = view.text.toString('latin1', from - view.base, to - view.base);
    const re = rule.global;
    re.lastIndex = 0;
    for (let m = re.exec(window); m !== null; m = re.exec(window)) {
      if (m[0].length === 0) {
        re.lastIndex += 1;
        continue;
      }
      const secret = m.groups?.secret ?? (rule.secretGroup !== undefined ? m[rule.secretGroup] : m.find((g, i) => i > 0 && g)) ?? m[0];
      const at = from + m.index;
      const line = () => view.lineText(at);
      const fp = fingerprint(secret, rule.family);
      const seen = this.hits.get(fp);
      // The same secret found again by the same rule (a file repeating one line): judged once.
      if (seen && seen.rule === rule.id && !seen.confidence) continue;
      const confidence = this.rules.accepts(rule, secret, m, line, this.opts.path);
      if (!confidence || (confidence === 'low' && this.vendored)) {
        // `key = process.env.API_KEY || "…"`: a rejected assignment may hold the one that counts.
        if (rule.family === 'generic') re.lastIndex = m.index + 1;
        continue;
      }
      // A specific rule says more than the generic one, a sure finding more than a weak one (a key block read whole
      // after its window came in, where the weak rule saw it first).
      if (seen && !(seen.rule === 'generic-secret' && rule.id !== 'generic-secret') && !(seen.confidence === 'low' && confidence !== 'low')) continue;
      this.hits.set(fp, { rule: rule.id, line: view.lineOf(at), fingerprint: fp, ...(confidence === 'low' ? { confidence } : {}) });
      if (this.hits.size >= MAX_HITS_PER_FILE) return;
    }
  }

  /** Operator rules without keywords: over every complete line, once. */
  private scanUnkeyed(view: TextView, final: boolean): void {
    const available = view.base + view.text.length;
    const from = Math.max(this.unkeyedFrom, view.base);
    let to = available;
    if (!final) {
      const lastFeed = view.text.lastIndexOf(10);
      if (lastFeed < 0 || view.base + lastFeed + 1 <= from) {
        if (available - from < 64 * 1024) return; // wait for the line to end (a long line is read in pieces)
      } else to = view.base + lastFeed + 1;
    }
    for (const rule of this.rules.unkeyed) if (this.applies(rule)) this.match(rule, view, from, to);
    this.unkeyedFrom = to;
  }
}

/** The earliest offset a pending window may start at. */
function windowStartBound(p: Pending): number {
  return p.start - (p.rule.span ? p.rule.span.before : LINE_REACH);
}

/** Bytes being scanned, with absolute offsets and line numbers. */
class TextView {
  constructor(
    readonly text: Buffer,
    /** Absolute offset of text[0]. */
    readonly base: number,
    /** Where the new chunk starts in text. */
    private readonly chunkAt: number,
    /** Line feeds before the new chunk. */
    private readonly linesBefore: number,
  ) {}

  /**
   * Absolute offset where the line holding `at` starts, looking back at most LINE_REACH bytes (a
   * line of megabytes is not searched again for every keyword on it); else the earliest byte looked at.
   */
  lineStart(at: number): number {
    const i = at - this.base;
    if (i <= 0) return this.base;
    const from = Math.max(0, i - LINE_REACH);
    const feed = this.text.subarray(from, i).lastIndexOf(10);
    return this.base + (feed < 0 ? from : from + feed + 1);
  }

  /** Absolute offset of the line feed ending the line at `at`, if one comes before `limit`; else -1. */
  lineEnd(at: number, limit: number): number {
    const i = at - this.base;
    const feed = this.text.subarray(i, Math.max(i, limit - this.base)).indexOf(10);
    return feed >= 0 ? this.base + i + feed : -1;
  }

  /** 1-based line number of absolute offset `at`. */
  lineOf(at: number): number {
    const i = at - this.base;
    if (i >= this.chunkAt) return this.linesBefore + 1 + countFeeds(this.text, this.chunkAt, i);
    return this.linesBefore + 1 - countFeeds(this.text, i, this.chunkAt);
  }

  /** The line holding `at`, at most LINE_REACH bytes either side. */
  lineText(at: number): string {
    const start = this.lineStart(at) - this.base;
    const limit = Math.min(this.text.length, at - this.base + LINE_REACH);
    const end = this.lineEnd(at, this.base + limit);
    return this.text.toString('latin1', start, end < 0 ? limit : end - this.base);
  }
}

function countFeeds(text: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = text.indexOf(10, from); i >= 0 && i < to; i = text.indexOf(10, i + 1)) n++;
  return n;
}

/** Scans one whole text (an Env entry, a history command, a small file). */
export function scanText(rules: RuleSet, text: string | Buffer, opts: { path?: string } = {}): ContentHit[] {
  const scanner = new ContentScanner(rules, opts);
  scanner.feed(typeof text === 'string' ? Buffer.from(text, 'utf8') : text);
  return scanner.end();
}
