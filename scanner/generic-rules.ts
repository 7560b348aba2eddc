/**
 * The generic assignment rule's patterns, read in every text file: where a secret-like name is
 * given a value, in the syntaxes source code and configuration use. The judgement of the name and
 * the value is generic.ts's; the patterns only find the pair. All share the id `generic-secret`.
 */
import { entropy, GENERIC_KEYWORDS, isWordy, judgeAssignment, type Confidence } from './generic.ts';
import { isPlaceholder } from './placeholders.ts';
import type { CheckContext, ContentRule } from './provider-rules.ts';

/**
 * A name holding a keyword (bounded both ways; the judgement reads its words). Its tail and the
 * values below are matched atomically (`(?=(…))\k<…>`: JavaScript has no possessive quantifier), so
 * a failed match is given up at once instead of retried at every shorter length: a hostile line of
 * `api_key=api_key=…` costs a few steps per byte, not tens of thousands.
 */
const NAME = '[A-Za-z0-9_.$-]{0,40}?(?:key|token|secret|passw|pass|pwd|auth|credential|creds|client|api|access|private)(?=(?<tail>[A-Za-z0-9_.-]{0,30}))\\k<tail>';
/** A value: no spaces, quotes, or the brackets and separators that end an expression; matched atomically. */
const VALUE = '(?=(?<secret>[^\\s"\'`\\\\;,<>(){}\\[\\]|]{8,200}))\\k<secret>';

/**
 * Assignments: `=`, `:`, `:=`, `::=`, `?=`, `+=`, `.=`, `||=`, `=>`, `<-`, typed declarations
 * (`apiKey: string = …`, `var apiKey string = …`), fallbacks (`process.env.KEY || "…"`,
 * `${KEY:-…}`, `getenv("KEY") or "…"`), and a quoted name beside a quoted value in a call
 * (`os.environ.setdefault("KEY", "…")`, `define('KEY', '…')`). Quotes may be `\"`-escaped (a
 * notebook's JSON, a string in a string).
 */
const ASSIGNMENT = new RegExp(
  // A name starts after what cannot be part of one, nor after `=` or `:` but PowerShell's `$env:` (`a=b_key=…`
  // is one value; and a line of `key=key=…` would otherwise start a match, and read a value, every few bytes).
  `(?<![A-Za-z0-9_$.=-])(?<!(?<!\\$env):)(?<q0>\\\\?["'\`]?)(?<name>${NAME})\\k<q0>\\]?`
  + '(?<op>'
  + `[ \\t]*:[ \\t]*&?'?[A-Za-z_][\\w<>\\[\\]&.]{0,30}[ \\t]*=(?![=>~])` // typed declaration
  + '|[ \\t]+[A-Za-z_][\\w.*]{0,20}[ \\t]*=(?![=>~])' // Go: var name type =
  + '|[ \\t]*(?::{1,3}=|\\?=|\\+=|\\.=|\\|\\|=|=>|<<?-|=(?![=>~])|:(?![:/\\\\]))'
  + '|\\)?[ \\t]*(?:\\|\\||\\?\\?|\\bor\\b|:-)'
  + '|[ \\t]*,'
  + ')'
  + `[ \\t]*(?<q>\\\\?["'\`]?)${VALUE}\\k<q>(?=[\\s"'\`;,)\\]}<>\\\\|]|$)`,
  'i',
);

/** Dockerfile `ENV KEY value` / `ARG`, csh `setenv KEY value`, Apache `SetEnv`, a flag `--api-key value`. */
const SPACED = new RegExp(`(?:(?:^|[\\s;])(?:ENV|ARG|setenv|SetEnv)[ \\t]+|(?<![\\w-])--)(?<name>${NAME})[ \\t]+(?<q>["']?)${VALUE}\\k<q>(?=[\\s;]|$)`, 'i');

/** XML: `<apiKey>…</apiKey>`, and `<add key="ApiKey" value="…"/>` (also `name=`, `<entry key=…>…</entry>`). */
const XML_ELEMENT = new RegExp(`<(?<name>[\\w.:-]{0,40}(?:key|token|secret|passw|pwd|auth|credential|client|api|access|private)[\\w.:-]{0,30})>[ \\t\\r\\n]{0,40}(?=(?<secret>[^\\s<>"']{8,200}))\\k<secret>[ \\t\\r\\n]{0,40}</\\k<name>>`, 'i');
const XML_PAIR = new RegExp(`\\b(?:key|name)[ \\t]*=[ \\t]*["'](?<name>${NAME})["'][ \\t]+(?:value|defaultValue)[ \\t]*=[ \\t]*["']${VALUE}["']`, 'i');
const XML_ENTRY = new RegExp(`<entry[ \\t]+key[ \\t]*=[ \\t]*["'](?<name>${NAME})["'][ \\t]*>${VALUE}</entry>`, 'i');

/** Source files: an unquoted value there is an expression (a variable, a call), never a literal secret. */
const SOURCE = /\.(?:py|pyi|js|mjs|cjs|jsx|ts|tsx|mts|cts|go|rb|java|kt|kts|scala|groovy|cs|fs|vb|php|rs|swift|c|h|cc|cpp|hpp|m|mm|ps1|psm1|lua|pl|pm|r|dart|vue|svelte|ex|exs|erl|clj|jl)$/i;

/** The line's text before the match. */
function before(m: RegExpExecArray, ctx: CheckContext): string {
  const line = ctx.line();
  const at = line.indexOf(m[0]);
  return at < 0 ? '' : line.slice(0, at);
}

function judge(secret: string, m: RegExpExecArray, ctx: CheckContext): Confidence | undefined {
  const g = m.groups!;
  const quoted = Boolean(g.q) || g.q === undefined; // XML forms have no `q`: their delimiters are the markup
  if (g.op !== undefined) {
    const op = g.op.trim();
    // A call's first two arguments, both quoted (`setdefault("API_KEY", "…")`); not `f(key, value)` with variables,
    // nor two neighbours in a list of strings.
    if (op === ',' && !(g.q0 && g.q && /\(\s*$/.test(before(m, ctx)))) return undefined;
    // A query parameter of a badge or an image (`badge.svg?token=…`): a public graph token.
    if (!g.q0 && /[?&]$/.test(before(m, ctx)) && /badge|\.(?:svg|png|gif)\?/i.test(ctx.line())) return undefined;
    if (op === ':' && g.q0 === '' && g.q === '' && /^[a-z]+$/i.test(g.name!) && ctx.path && SOURCE.test(ctx.path)) return undefined;
  }
  if (!quoted && ctx.path && SOURCE.test(ctx.path)) return undefined;
  return judgeAssignment(g.name!, secret, ctx.line());
}

/** An HTTP Authorization header with its credential: in a curl command, an .http file, a config or docs. */
const AUTHORIZATION = /authorization["']?[ \t]*[:=][ \t]*["']?(?<scheme>Bearer|Basic|Token|SSWS|Bot|token|bearer|basic)[ \t]+(?=(?<secret>[A-Za-z0-9._~+/=-]{16,2000}))\k<secret>(?![A-Za-z0-9._~+/=-])/i;

function judgeAuthorization(secret: string, m: RegExpExecArray): Confidence | undefined {
  if (isPlaceholder(secret) || isWordy(secret)) return undefined;
  if (m.groups!.scheme!.toLowerCase() === 'basic') {
    // user:password in base64; a password that is a placeholder or empty is none.
    const decoded = Buffer.from(secret, 'base64').toString('latin1');
    const colon = decoded.indexOf(':');
    if (colon < 1 || !/^[\x20-\x7e]+$/.test(decoded)) return undefined;
    const password = decoded.slice(colon + 1);
    return password.length >= 4 && !isPlaceholder(password) && !/^(?:pass(?:word)?|secret|test|changeme)$/i.test(password) ? 'high' : undefined;
  }
  return entropy(secret) >= 3.3 ? 'high' : undefined;
}

const rule = (regex: RegExp, span?: ContentRule['span']): ContentRule => ({
  id: 'generic-secret', family: 'generic', keywords: GENERIC_KEYWORDS, regex, check: judge, ...(span ? { span } : {}),
});

/** The generic rule's patterns, in every text file, Env entry and history line. */
export const GENERIC_RULES: ContentRule[] = [
  rule(ASSIGNMENT),
  rule(SPACED),
  rule(XML_ELEMENT, { before: 80, after: 400 }),
  rule(XML_PAIR),
  rule(XML_ENTRY),
  { id: 'http-authorization', family: 'generic', keywords: ['authorization'], regex: AUTHORIZATION, check: judgeAuthorization },
];
