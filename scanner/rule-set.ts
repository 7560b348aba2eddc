import { createHash } from 'node:crypto';
import { KeywordAutomaton } from './keyword-automaton.ts';
import './regex-engine.ts';
import { isPlaceholder } from './placeholders.ts';
import { PROVIDER_RULES, type ContentRule, type Family } from './provider-rules.ts';
import { entropy, type Confidence } from './generic.ts';
import { GENERIC_RULES } from './generic-rules.ts';

/** What an operator's allowlist says is not a secret (gitleaks' `[allowlist]`, global or per rule). */
export interface Allowlist {
  /** Matched against the secret (or the whole match / line, per `regexTarget`). */
  regexes: RegExp[];
  regexTarget: 'secret' | 'match' | 'line';
  /** Matched against the file path. */
  paths: RegExp[];
  /** A secret containing one of these (case-insensitively) is not one. */
  stopwords: string[];
}

export interface CompiledRule extends ContentRule {
  /** The regex with the `g` flag, run over windows. */
  global: RegExp;
  /** The fixed prefix of a prefixed rule (left out of placeholder checks). */
  prefix: string;
  /** Operator rules: only files whose path matches. */
  path?: RegExp;
  /** Operator rules: which capture group is the secret (gitleaks' `secretGroup`). */
  secretGroup?: number;
  allowlist?: Allowlist;
}

/** A rule that matches a file by its name (operator rules with a `path` and no `regex`). */
export interface PathOnlyRule {
  id: string;
  path: RegExp;
}

/** One secret found in a text: its rule, 1-based line, and fingerprint (never the secret). */
export interface ContentHit {
  rule: string;
  line: number;
  fingerprint: string;
  /** The value is ambiguous (a bare hash, a UUID, a name that only says `key`): still a finding. */
  confidence?: 'low';
}

/**
 * A short hash of the secret: the same secret gives the same fingerprint in every layer and image.
 * A key's fingerprint is of its base64 body alone, so one key is one fingerprint whether it sits in
 * a PEM file, `\n`-escaped in JSON or indented in YAML.
 */
export function fingerprint(secret: string, family?: Family): string {
  const value = family === 'private-key' ? keyBody(secret) : secret;
  return createHash('sha256').update(value, 'latin1').digest('hex').slice(0, 16);
}

function keyBody(block: string): string {
  return block
    .replace(/\\[rn]/g, '\n')
    .split(/[\r\n]+/)
    .map((l) => l.trim())
    .filter((l) => l && !/^-{4,}|^[A-Za-z-]+: |^PuTTY-User-Key-File|^Private-MAC/.test(l))
    .join('');
}

/** Default span: the keyword's line, at most this many bytes either side of the keyword. */
export const LINE_REACH = 1024;

/**
 * A compiled set of rules: the built-in ones, plus an operator's (operator-rules.ts). The keyword
 * automata find where any rule may match; a rule's regex then runs only around those places.
 * `version` changes whenever the rules do, so a layer scanned under other rules is read again.
 */
export class RuleSet {
  readonly rules: CompiledRule[];
  readonly pathRules: PathOnlyRule[];
  readonly allowlist?: Allowlist;
  /** Rules per keyword index. */
  readonly general: { automaton: KeywordAutomaton; rules: CompiledRule[][] };
  /** Rules without keywords (operator rules only): run over all of a file's text. */
  readonly unkeyed: CompiledRule[];
  readonly version: string;
  /** The operator's rules file text these rules were compiled from (none: the built-in rules alone). */
  readonly source: string | undefined;

  constructor(rules: ContentRule[], extra: { rules?: CompiledRule[]; pathRules?: PathOnlyRule[]; allowlist?: Allowlist; source?: string } = {}) {
    this.rules = [...rules.map(compile), ...(extra.rules ?? [])];
    this.pathRules = extra.pathRules ?? [];
    this.allowlist = extra.allowlist;
    this.general = index(this.rules);
    this.unkeyed = this.rules.filter((r) => r.keywords.length === 0);
    this.source = extra.source;
    this.version = createHash('sha256')
      .update(JSON.stringify(this.rules.map((r) => [r.id, r.keywords, r.regex.source, r.regex.flags, r.entropy, r.path?.source])))
      .update(extra.source ?? '')
      // What the layer reader opens is part of a layer's verdict too: a layer read before archives and `.git`
      // folders were opened (issue 32), or before a tar was told by its header checksum, is read again.
      .update('reads: files, archives (told by a whole first header), git history')
      .digest('hex')
      .slice(0, 16);
  }

  /**
   * Whether a match is a secret: not a placeholder or documented example, random enough, plausible
   * to the rule, and not allowed by the operator's allowlists.
   */
  accepts(rule: CompiledRule, secret: string, match: RegExpExecArray, line: () => string, path: string | undefined): Confidence | undefined {
    // A key body's base64 may hold runs (AAAAAA); the generic rule judges placeholders itself (generic.ts).
    if (rule.id !== 'private-key' && rule.id !== 'putty-private-key' && rule.family !== 'generic' && isPlaceholder(secret, rule.prefix)) return undefined;
    if (rule.entropy && entropy(secret.slice(rule.prefix.length)) < rule.entropy) return undefined;
    const checked = rule.check ? rule.check(secret, match, { path, line }) : true;
    if (!checked) return undefined;
    for (const list of [rule.allowlist, this.allowlist]) {
      if (list && allowed(list, secret, match[0], line, path)) return undefined;
    }
    return checked === 'low' ? 'low' : 'high';
  }
}

function allowed(list: Allowlist, secret: string, match: string, line: () => string, path: string | undefined): boolean {
  if (path !== undefined && list.paths.some((p) => p.test(path))) return true;
  const lower = secret.toLowerCase();
  if (list.stopwords.some((w) => lower.includes(w))) return true;
  if (list.regexes.length) {
    const target = list.regexTarget === 'line' ? line() : list.regexTarget === 'match' ? match : secret;
    if (list.regexes.some((r) => r.test(target))) return true;
  }
  return false;
}

/** The leading literal of a prefixed rule's regex: `(?<secret>(?:ghp_|gho_)…` gives '' (several), `sk-ant-` one. */
function fixedPrefix(rule: ContentRule): string {
  const m = /\(\?<secret>\(\?:((?:[^()[\]|\\*+?{}]|\\.)+(?:\|(?:[^()[\]|\\*+?{}]|\\.)+)*)\)/.exec(rule.regex.source);
  if (!m) return '';
  const alts = m[1]!.split('|').map((s) => s.replace(/\\(.)/g, '$1'));
  // All alternatives share the length used to cut the prefix off (the shortest is safe).
  return alts.reduce((a, b) => (a.length <= b.length ? a : b));
}

function compile(rule: ContentRule): CompiledRule {
  return { ...rule, global: new RegExp(rule.regex.source, rule.regex.flags.includes('g') ? rule.regex.flags : `${rule.regex.flags}g`), prefix: fixedPrefix(rule) };
}

function index(rules: CompiledRule[]): { automaton: KeywordAutomaton; rules: CompiledRule[][] } {
  const keyed = rules.filter((r) => r.keywords.length > 0);
  const automaton = new KeywordAutomaton(keyed.flatMap((r) => r.keywords));
  const byKeyword: CompiledRule[][] = automaton.keywords.map(() => []);
  const position = new Map(automaton.keywords.map((k, i) => [k, i]));
  for (const r of keyed) for (const k of new Set(r.keywords.map((x) => x.toLowerCase()))) byKeyword[position.get(k)!]!.push(r);
  return { automaton, rules: byKeyword };
}

/** The built-in rules: provider formats, private keys, JWTs, the generic assignment rule. */
export function builtInRuleList(): ContentRule[] {
  return [...PROVIDER_RULES, ...GENERIC_RULES];
}

let builtIn: RuleSet | undefined;

export function builtInRules(): RuleSet {
  builtIn ??= new RuleSet(builtInRuleList());
  return builtIn;
}
