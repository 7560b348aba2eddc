import fs from 'node:fs';
import { parse, TomlError } from 'smol-toml';
import { builtInRuleList, RuleSet, type Allowlist, type CompiledRule, type PathOnlyRule } from './rule-set.ts';

/**
 * An operator's rules file (`SVC_SCAN_RULES`), in gitleaks' TOML format so a team keeps the
 * configuration it has: `[[rules]]` with `id`, `description`, `regex`, `secretGroup`, `keywords`,
 * `entropy`, `path`, `[rules.allowlist]`, and a global `[allowlist]` (`regexes`, `regexTarget`,
 * `paths`, `stopwords`). Its rules are added to the built-in ones; its allowlists apply to all.
 *
 * gitleaks' regexes are Go (RE2) syntax; the common differences are translated (`(?i)` and other
 * inline flags, `(?P<name>`, `\z`, `\A`, POSIX classes). Whatever JavaScript still cannot compile
 * stops the start with the rule named. RE2 is linear-time and JavaScript's engine backtracks, so the
 * scanner switches V8 to its linear engine when a regex backtracks too much (regex-engine.ts).
 */
export class RulesFileError extends Error {
  override name = 'RulesFileError';
}

interface TomlAllowlist {
  description?: unknown;
  regexes?: unknown;
  regexTarget?: unknown;
  paths?: unknown;
  stopwords?: unknown;
  commits?: unknown;
}

const RULE_KEYS = new Set(['id', 'description', 'regex', 'secretGroup', 'entropy', 'keywords', 'path', 'tags', 'allowlist']);

/** Loads and compiles a rules file; throws RulesFileError naming the file, the rule and the line. */
export function loadRulesFile(file: string): RuleSet {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new RulesFileError(`cannot read the scan rules file ${file} (SVC_SCAN_RULES): ${(err as Error).message}`);
  }
  return parseRules(text, file);
}

/** Compiles rules file text (`file` only names it in errors). */
export function parseRules(text: string, file = 'rules file'): RuleSet {
  let doc: Record<string, unknown>;
  try {
    doc = parse(text) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof TomlError) throw new RulesFileError(`${file}:${err.line}: not valid TOML: ${err.message.split('\n')[0]}`);
    throw err;
  }
  const lineOf = ruleLines(text);
  const rules: CompiledRule[] = [];
  const pathRules: PathOnlyRule[] = [];
  const raw = doc.rules ?? [];
  if (!Array.isArray(raw)) throw new RulesFileError(`${file}: "rules" must be an array of tables ([[rules]])`);
  const ids = new Set<string>();
  raw.forEach((r: Record<string, unknown>, i) => {
    const where = `${file}:${lineOf[i] ?? '?'}: rule ${typeof r.id === 'string' ? `"${r.id}"` : `#${i + 1}`}`;
    const fail = (msg: string): never => {
      throw new RulesFileError(`${where}: ${msg}`);
    };
    for (const k of Object.keys(r)) if (!RULE_KEYS.has(k)) fail(`unknown key "${k}" (known: ${[...RULE_KEYS].join(', ')})`);
    if (typeof r.id !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(r.id)) fail('needs an "id" of letters, digits, "-", "_", "."');
    const id = r.id as string;
    if (ids.has(id)) fail('the id is used twice');
    ids.add(id);
    if (r.regex === undefined && r.path === undefined) fail('needs a "regex", a "path" or both');
    const path = r.path === undefined ? undefined : goRegex(str(r.path, 'path', fail), 'path', fail);
    const allowlist = r.allowlist === undefined ? undefined : toAllowlist(r.allowlist as TomlAllowlist, fail);
    if (r.regex === undefined) {
      pathRules.push({ id, path: path! });
      return;
    }
    const regex = goRegex(str(r.regex, 'regex', fail), 'regex', fail);
    const keywords = r.keywords === undefined ? [] : strings(r.keywords, 'keywords', fail).map((k) => k.toLowerCase());
    if (r.entropy !== undefined && (typeof r.entropy !== 'number' || r.entropy < 0 || r.entropy > 8)) fail('"entropy" must be a number of bits per character, 0 to 8');
    if (r.secretGroup !== undefined && (!Number.isInteger(r.secretGroup) || (r.secretGroup as number) < 0)) fail('"secretGroup" must be a group number');
    const groups = new RegExp(`${regex.source}|`).exec('')!.length - 1;
    if ((r.secretGroup as number | undefined) !== undefined && (r.secretGroup as number) > groups) fail(`"secretGroup" is ${r.secretGroup} but the regex has ${groups} groups`);
    rules.push({
      id, family: 'operator', keywords, regex,
      global: new RegExp(regex.source, `${regex.flags}g`),
      prefix: '',
      ...(r.entropy !== undefined ? { entropy: r.entropy as number } : {}),
      ...(r.secretGroup !== undefined ? { secretGroup: r.secretGroup as number } : {}),
      ...(path ? { path } : {}),
      ...(allowlist ? { allowlist } : {}),
    });
  });
  const globalAllow = doc.allowlist === undefined ? undefined : toAllowlist(doc.allowlist as TomlAllowlist, (msg) => {
    throw new RulesFileError(`${file}:${lineOfTable(text, 'allowlist') ?? '?'}: [allowlist]: ${msg}`);
  });
  for (const k of Object.keys(doc)) {
    if (!['title', 'rules', 'allowlist', 'extend'].includes(k)) throw new RulesFileError(`${file}: unknown top-level key "${k}" (known: title, rules, allowlist, extend)`);
  }
  return new RuleSet(builtInRuleList(), { rules, pathRules, ...(globalAllow ? { allowlist: globalAllow } : {}), source: text });
}

function toAllowlist(a: TomlAllowlist, fail: (msg: string) => never): Allowlist {
  if (typeof a !== 'object' || a === null || Array.isArray(a)) fail('an allowlist must be a table');
  const target = a.regexTarget === undefined ? 'secret' : a.regexTarget;
  if (target !== 'secret' && target !== 'match' && target !== 'line') fail('"regexTarget" must be "secret", "match" or "line"');
  return {
    regexes: a.regexes === undefined ? [] : strings(a.regexes, 'allowlist.regexes', fail).map((r) => goRegex(r, 'allowlist regex', fail)),
    regexTarget: target as Allowlist['regexTarget'],
    paths: a.paths === undefined ? [] : strings(a.paths, 'allowlist.paths', fail).map((r) => goRegex(r, 'allowlist path', fail)),
    stopwords: a.stopwords === undefined ? [] : strings(a.stopwords, 'allowlist.stopwords', fail).map((w) => w.toLowerCase()),
  };
}

function str(v: unknown, key: string, fail: (msg: string) => never): string {
  if (typeof v !== 'string' || v === '') fail(`"${key}" must be a non-empty string`);
  return v as string;
}

function strings(v: unknown, key: string, fail: (msg: string) => never): string[] {
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' || x === '')) fail(`"${key}" must be an array of non-empty strings`);
  return v as string[];
}

/** The line of each `[[rules]]` header, in order (TOML parsers do not keep positions). */
function ruleLines(text: string): number[] {
  const out: number[] = [];
  text.split('\n').forEach((l, i) => {
    if (/^\s*\[\[\s*rules\s*\]\]/.test(l)) out.push(i + 1);
  });
  return out;
}

function lineOfTable(text: string, name: string): number | undefined {
  const i = text.split('\n').findIndex((l) => new RegExp(`^\\s*\\[\\s*${name}\\s*\\]`).test(l));
  return i < 0 ? undefined : i + 1;
}

const POSIX: Record<string, string> = {
  alnum: 'A-Za-z0-9', alpha: 'A-Za-z', ascii: '\\x00-\\x7F', blank: ' \\t', cntrl: '\\x00-\\x1F\\x7F', digit: '0-9', graph: '!-~',
  lower: 'a-z', print: ' -~', punct: '!-\\/:-@\\[-`{-~', space: ' \\t\\r\\n\\v\\f', upper: 'A-Z', word: 'A-Za-z0-9_', xdigit: 'A-Fa-f0-9',
};

/**
 * A Go (RE2) regex as a JavaScript RegExp: leading inline flags become flags; `(?i:…)` groups and a
 * `(?i)` later in the pattern make their letters match both cases; `(?P<n>` is `(?<n>`; `\z` is `$`,
 * `\A` is `^`; `[[:alpha:]]` and the like are spelled out.
 */
export function goRegex(source: string, what: string, fail: (msg: string) => never): RegExp {
  let flags = '';
  let fold = false;
  let s = source;
  for (let m = /^\(\?([imsU]+)\)/.exec(s); m; m = /^\(\?([imsU]+)\)/.exec(s)) {
    if (m[1]!.includes('U')) fail(`${what}: the (?U) flag (ungreedy) has no JavaScript equivalent; write lazy quantifiers (*?, +?) instead`);
    for (const f of m[1]!) {
      // Case-insensitivity is spelled out ([aA]) rather than the `i` flag: V8's linear engine
      // does not take `i`, and a backtracking `(?i)` regex could hang a worker.
      if (f === 'i') fold = true;
      else if (!flags.includes(f)) flags += f;
    }
    s = s.slice(m[0].length);
  }
  if (fold) s = `(?i)${s}`;
  s = s.replace(/\(\?P</g, '(?<').replace(/\\z/g, '$').replace(/\\A/g, '^');
  s = s.replace(/\[:(\^?)([a-z]+):\]/g, (_whole, neg: string, name: string) => {
    const cls = POSIX[name];
    if (!cls) fail(`${what}: unknown POSIX class [:${name}:]`);
    if (neg) fail(`${what}: a negated POSIX class [:^${name}:] has no JavaScript equivalent`);
    return cls!;
  });
  s = caseFoldScoped(s, what, fail);
  try {
    return new RegExp(s, flags);
  } catch (err) {
    return fail(`${what} ${JSON.stringify(source.length > 120 ? `${source.slice(0, 120)}…` : source)} cannot be compiled in JavaScript: ${(err as Error).message.replace(/^Invalid regular expression: /, '')}; rewrite it without Go-only syntax`);
  }
}

/** The other case of a class body's letters and letter ranges (`a-fx` → `A-FX`); escapes are left out. */
function otherCase(body: string): string {
  let out = '';
  const swap = (c: string) => (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase());
  for (let i = 0; i < body.length; i++) {
    if (body[i] === '\\') {
      i += (ESCAPE.exec(body.slice(i))?.[0].length ?? 1) - 1;
      continue;
    }
    const c = body[i]!;
    if (body[i + 1] === '-' && i + 2 < body.length) {
      const d = body[i + 2]!;
      if (/[a-zA-Z]/.test(c) && /[a-zA-Z]/.test(d) && (c <= 'Z') === (d <= 'Z')) out += `${swap(c)}-${swap(d)}`;
      i += 2;
      continue;
    }
    if (/[a-zA-Z]/.test(c)) out += swap(c);
  }
  return out;
}

/** One escape sequence, whole: `\x41`, `\u{1F600}`, `\p{L}`, `\k<name>`, `\cA`, `\d`. */
const ESCAPE = /^\\(?:x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|u\{[0-9A-Fa-f]+\}|[pPk][{<][^}>]*[}>]|c[A-Za-z]|[\s\S])/;

/** `(?i:abc)` → `(?:[aA][bB][cC])`, and `x(?i)abc` → `x[aA][bB][cC]` (to the end of the enclosing group). */
function caseFoldScoped(s: string, what: string, fail: (msg: string) => never): string {
  const other = /\(\?([a-zA-Z]+)[:)]/.exec(s);
  if (!other) return s;
  if (other[1] !== 'i') fail(`${what}: the inline flag group ${other[0]} is not supported in the middle of a regex (only (?i) is); move flags to the start`);
  let out = '';
  let depth = 0;
  const foldEnds: number[] = []; // group depths at which a (?i) stops
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    const folding = foldEnds.length > 0;
    if (c === '\\') {
      const e = ESCAPE.exec(s.slice(i))?.[0] ?? c;
      out += e;
      i += e.length - 1;
      continue;
    }
    if (c === '[') {
      // A class: copied, with the other case of its letters added when folding.
      let j = i + 1;
      if (s[j] === '^') j++;
      if (s[j] === ']') j++;
      while (j < s.length && s[j] !== ']') j += s[j] === '\\' ? 2 : 1;
      const body = s.slice(i + 1, j);
      out += folding ? `[${body}${otherCase(body.replace(/^\^/, ''))}]` : `[${body}]`;
      i = j;
      continue;
    }
    const named = /^\(\?P?<(?![=!])[A-Za-z0-9_]+>/.exec(s.slice(i));
    if (named) {
      depth++;
      out += named[0].replace('(?P<', '(?<');
      i += named[0].length - 1;
      continue;
    }
    const inline = /^\(\?([a-zA-Z]+)(:|\))/.exec(s.slice(i));
    if (inline) {
      if (inline[1] !== 'i') fail(`${what}: the inline flag group ${inline[0]} is not supported in the middle of a regex (only (?i) is)`);
      if (inline[2] === ':') {
        depth++;
        out += '(?:';
      }
      foldEnds.push(depth);
      i += inline[0].length - 1;
      continue;
    }
    if (c === '(') {
      depth++;
      const open = /^\(\?(?:[:=!]|<[=!])/.exec(s.slice(i));
      out += open ? open[0] : c;
      if (open) i += open[0].length - 1;
      continue;
    }
    if (c === ')') {
      // A (?i:…) ends with its own group; a bare (?i) with the group around it.
      while (foldEnds.length && foldEnds[foldEnds.length - 1]! >= depth) foldEnds.pop();
      depth--;
      out += c;
      continue;
    }
    if (c === '{') {
      const q = /^\{\d*(?:,\d*)?\}/.exec(s.slice(i));
      if (q) {
        out += q[0];
        i += q[0].length - 1;
        continue;
      }
    }
    out += folding && /[a-zA-Z]/.test(c) ? `[${c.toLowerCase()}${c.toUpperCase()}]` : c;
  }
  return out;
}
