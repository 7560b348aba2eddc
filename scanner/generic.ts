/**
 * The generic assignment rule's judgement: a name that says key, token, secret, password, auth,
 * credential, client, api, access or private, assigned a value that looks generated. gitleaks'
 * `generic-api-key` asks only for entropy; this one also asks the value not to be what code and
 * configs assign to such names all day: identifiers and words, paths and file names, URLs,
 * versions, hashes next to `sha`/`integrity`/`checksum`/`digest`, ids, numbers, references to
 * other variables, placeholders. What is left is a finding; where the value is ambiguous (a bare
 * hex hash, a UUID, a long number, a name that only says `key`) it is a `low` one, which keeps the
 * image private all the same but tells the owner the scanner was not sure.
 */
import { isPlaceholder } from './placeholders.ts';

export type Confidence = 'high' | 'low';

/** Shannon entropy of a string, in bits per character. */
export function entropy(value: string): number {
  const counts = new Map<string, number>();
  for (const c of value) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) bits -= (n / value.length) * Math.log2(n / value.length);
  return bits;
}

/** Keywords that bring the rule to a place (the automaton's side); `words()` decides on the name. */
export const GENERIC_KEYWORDS = ['key', 'token', 'secret', 'passw', 'pass', 'pwd', 'auth', 'credential', 'creds', 'client', 'api', 'access', 'private'];

/** A name's words: `dbPassword`, `DB_PASSWORD`, `db.password`, `$env:DB_PASSWORD` → db, password. */
function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
}

/** Words that alone say the value is secret. */
const STRONG_WORD = /^(?:secrets?|tokens?|passwords?|passwd|passwds|pwd|pass|passphrase|credentials?|creds|[a-z]*(?:secret|token|password|passwd|pwd|passphrase)|(?:api|secret|access|private|auth|master|signing|encryption|app|license|client|session|hmac|server|service|account|consumer|admin|shared|root)keys?)$/;
/** Words that say key or access but may name a map key, a method, a client library. */
const WEAK_WORD = /^(?:keys?|auth|authn|authz|api|access|client|private)$/;
/** Names of values that are secret but not credentials: anti-forgery tokens are made per page. */
const NOT_CREDENTIAL = /^(?:csrf|xsrf|authenticity|nonce|antiforgery|requestverificationtoken)$/;
/** Two weak words that together say secret: `api_key`, `access_key`, `private_key`, `client_secret`. */
const STRONG_PAIR = /(?:^| )(?:api|access|private|auth|secret|master|signing|encryption|client|app|bot|admin|service|account|webhook|consumer|session|jwt|hmac|license|deploy|integration|user|personal) keys?(?: |$)/;
/** Words before `key` that make it a data key, not a secret: a primary key, a cache key. */
const DATA_KEY = /(?:^| )(?:primary|foreign|sort|partition|cache|lookup|map|dict|hash|idempotency|row|range|hot|shortcut|unique|composite|object|bucket|translation|i18n|message|locale|route|group|cursor|dedup|react|storage|redis|s3|registry|reg|kv|index|schema|public|pub|gpg|pgp|ssh|host|known|dns|field|column|attr|attribute|query|search|sort|form|item|node|list|next|prev|parent|child|tree|row|cell)[ ]keys?(?: |$)/;
/** Last words of names that hold something public or descriptive. */
const DESCRIPTIVE_LAST = new Set([
  'id', 'ids', 'uuid', 'guid', 'identifier', 'name', 'names', 'file', 'files', 'filename', 'path', 'paths', 'dir', 'url', 'uri', 'urls', 'endpoint',
  'host', 'hostname', 'port', 'user', 'username', 'login', 'email', 'type', 'types', 'kind', 'size', 'len', 'length', 'ttl', 'timeout', 'expiry', 'expires',
  'expiration', 'lifetime', 'age', 'header', 'headers', 'method', 'methods', 'mode', 'version', 'format', 'alg', 'algorithm', 'algo', 'hash', 'sha', 'sha1',
  'sha256', 'sha512', 'md5', 'checksum', 'digest', 'integrity', 'fingerprint', 'count', 'index', 'idx', 'prefix', 'suffix', 'label', 'description', 'desc',
  'hint', 'field', 'column', 'policy', 'scope', 'scopes', 'region', 'location', 'at', 'by', 'enabled', 'disabled', 'required', 'var', 'env', 'class', 'style',
  'icon', 'color', 'title', 'text', 'message', 'msg', 'regex', 'pattern', 'template', 'placeholder', 'example', 'sample', 'min', 'max', 'limit', 'rate',
  'level', 'status', 'state', 'list', 'map', 'table', 'store', 'storage', 'cache', 'attribute', 'attr', 'param', 'params', 'option', 'options', 'provider',
  'strategy', 'source', 'target', 'field', 'length', 'bits', 'curve', 'usage', 'usages', 'issuer', 'audience', 'subject', 'location', 'validity', 'rotation',
  'reference', 'ref', 'arn', 'alias', 'vault', 'mount', 'role', 'roles', 'permissions', 'grant', 'flow', 'uris', 'callback', 'redirect', 'base', 'domain',
  'link', 'links', 'page', 'route', 'store', 'setting', 'settings', 'config', 'module', 'package', 'lib', 'library', 'plugin', 'service', 'handler', 'factory',
  'pressed', 'down', 'up', 'code', 'event', 'events', 'binding', 'bindings', 'stroke', 'combo', 'pair', 'signatures', 'meshing', 'exchange', 'agreement',
]);
/** Words anywhere in a name that make it public. */
const PUBLIC_WORD = /^(?:public|publishable|pub|pubkey|gpg|pgp|fingerprint|keyring|keyserver|keyid|keyboard|keycode|keystroke|keyword|keywords|keymap|keypress|keydown|keyup|keyframes?|is|has|use|enable|show|toggle|get|fetch|load|read|with|mock|fake|dummy|example|sample)$/;

/** How much a name says secret: `strong`, `weak`, or undefined (not a name this rule reads). */
export function nameStrength(name: string): 'strong' | 'weak' | undefined {
  const w = words(name);
  if (w.length === 0 || w.length > 8) return undefined;
  if (DESCRIPTIVE_LAST.has(w[w.length - 1]!) || w.some((x) => NOT_CREDENTIAL.test(x))) return undefined;
  // A public word qualifies the word after it (`PUBLIC_KEY`, `publicToken`); a secret named past that still counts
  // (`flutterwavePubKey_api_token`).
  const pub = w.map((x) => PUBLIC_WORD.test(x)).lastIndexOf(true);
  if (pub >= 0) {
    const rest = w.slice(pub + 2);
    if (!rest.some((x) => STRONG_WORD.test(x)) && !STRONG_PAIR.test(rest.join(' '))) return undefined;
  }
  const joined = w.join(' ');
  if (DATA_KEY.test(joined) && !w.some((x) => STRONG_WORD.test(x))) return undefined;
  if (w.some((x) => STRONG_WORD.test(x)) || STRONG_PAIR.test(joined)) return 'strong';
  if (w.some((x) => WEAK_WORD.test(x))) return 'weak';
  return undefined;
}

const VOWELS = /[aeiouy]/;

/** Words of computing with few vowels, which the rule below would take for random letters. */
const TECH_WORDS = new Set(['passwd', 'sysctl', 'systemd', 'tmpfs', 'nginx', 'https', 'sftp', 'ssh', 'html', 'xhtml', 'jwks', 'mysql', 'pgsql', 'psql', 'stdlib', 'cpp', 'src', 'dst', 'pkgs', 'pkg', 'cfg', 'msg']);

/** Consonant pairs common in English and in identifiers. */
const COMMON_PAIRS = new Set('bl br ch ck cl cr ct dr fl fr ft gh gl gr kn ld lf lk ll lm lp ls lt lv mb mm mp nc nd nf ng nk nn ns nt ph pl pp pr ps pt rb rc rd rf rg rk rl rm rn rp rr rs rt rv sc sh sk sl sm sn sp ss st sw th tr ts tt tw wh wn wr ws xt dd ff gg bb cc zz sq nth cs'.split(' '));

/** A token that reads as a word or an abbreviation: vowels, no long consonant runs. */
function wordLike(token: string): boolean {
  if (token.length <= 1) return true;
  if (/^[A-Z]{2,5}$/.test(token)) return true; // an acronym: AWS, HTTP, JSON
  const t = token.toLowerCase();
  if (TECH_WORDS.has(t)) return true;
  if (!VOWELS.test(t)) return false;
  if (/[^aeiouy]{5,}/.test(t)) return false;
  const vowels = t.replace(/[^aeiouy]/g, '').length;
  if (t.length < 6) return true;
  if (vowels / t.length < 0.15 || vowels / t.length > 0.7) return false;
  // Pairs of consonants that words rarely hold (`gp`, `mx`, `cz`): a generated lower-case run has them everywhere.
  let rare = 0;
  for (let i = 1; i < t.length; i++) {
    const pair = t.slice(i - 1, i + 1);
    if (!/[aeiouy]/.test(pair) && !COMMON_PAIRS.has(pair)) rare += 1;
  }
  return rare <= Math.max(1, Math.floor(t.length / 4));
}

/**
 * An identifier, a dotted reference or words: `aws_ec2_client_vpn_endpoint.client-vpn-endpoint.id`,
 * `process.env.API_KEY`, `SessionTokenProvider`, `correct-horse-battery`. Few digits, and every
 * letter run reads as a word.
 */
export function isWordy(value: string): boolean {
  // Versions, dates and numbered parts (`0.15.0_20231217`, `_5_32`) are an identifier's, not randomness.
  const v = value.replace(/\d+(?:[._]\d+)+/g, '.').replace(/(?:^|[._:/-])\d{1,8}(?=$|[._:/-])/g, '.');
  const digits = v.replace(/[^0-9]/g, '').length;
  if (digits > Math.max(2, v.length * 0.12)) return false;
  const tokens = v.match(/[A-Z]?[a-z]+|[A-Z]+(?![a-z])/g) ?? [];
  if (tokens.length === 0) return false;
  let short = 0;
  for (const t of tokens) {
    if (t.length <= 4 && !(t.length >= 3 && VOWELS.test(t.toLowerCase()))) short += 1; // abbreviations: k, db, mps, grpc
    else if (!wordLike(t)) return false;
  }
  return short <= Math.max(2, tokens.length / 3);
}

/** Words a made-up value is built from: `secret123`, `real-secret-6-levels`, `jwt_abc123`, `randomString`. */
const SAMPLE_WORDS = new Set(['secret', 'secrets', 'password', 'passwd', 'pass', 'token', 'random', 'example', 'sample', 'dummy', 'fake', 'mock', 'changeme', 'placeholder', 'abc', 'xyz', 'foo', 'bar', 'baz', 'qux', 'hello', 'world', 'demo']);

/**
 * Whether a value is made of a few parts, one a sample word, or runs through a digit sequence
 * (`df123-4567`). A generated value splits into many short parts, where `abc` or `bar` may occur by chance.
 */
function isSampleValue(value: string): boolean {
  const tokens = value.match(/[A-Z]?[a-z]+|[A-Z]+(?![a-z])/g) ?? [];
  if (tokens.length <= 4 && tokens.some((t) => SAMPLE_WORDS.has(t.toLowerCase()))) return true;
  return /012345|123456|234567|345678|456789|987654|876543|765432|654321|543210/.test(value.replace(/[^0-9]/g, ''));
}

/** Whether the value spells the name again (`FOO_KEY = "foo-key"`, `KeyPair = X25519.KeyPair`). */
function echoesName(name: string, value: string): boolean {
  const n = name.toLowerCase().replace(/[^a-z0-9]/g, '');
  const v = value.toLowerCase().replace(/[^a-z0-9]/g, '');
  return n.length >= 4 && (v.includes(n) || (v.length >= 6 && n.includes(v)));
}

/** A URL's part that looks like a token (a webhook's path, a key in the query): at least 20 random characters. */
function urlCarriesToken(url: string): boolean {
  if (/^[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]{6,}@/i.test(url)) return true; // user:password@
  return url.split(/[/?&=#]/).some((part) => part.length >= 20 && !isWordy(part) && !/^[a-f0-9]+$/i.test(part) && entropy(part) >= 3.5);
}

/** Values that only point somewhere else: variables, templates, calls, env lookups. */
const REFERENCE = /^[$%@&*#{<[(]|\$\{|\$\(|\{\{|%\(|%[A-Z_]+%|^(?:var|vars|local|locals|data|module|each|inputs|steps|needs|github|matrix|secrets|env|ENV|process|os|config|settings|self|this|params|props|opts|options|ctx|context|cfg|conf|args|argv|req|request|window|document|globals?)\./;
/** An identifier or a dotted reference in code: `passwordFromEnv`, `settings.DB_PASSWORD`, `var.db_password`. */
const IDENTIFIER = /^[A-Za-z_$][A-Za-z_$]*(?:\.[A-Za-z_$][\w$]*)*$/;
/** A version inside a value: `jjwt-jackson-0.11.2`, `slf4j-api:jar:1.7.8`. */
const VERSION_INSIDE = /(?:^|[^A-Za-z0-9])v?\d{1,4}\.\d{1,4}(?:\.\d{1,4})?(?:$|[^A-Za-z0-9])|SNAPSHOT|RELEASE/;
const URL = /^[a-z][a-z0-9+.-]{1,15}:\/\//i;
const PATH = /^(?:\/|\.{1,2}\/|~\/|[A-Za-z]:\\)/;
const FILE_NAME = /^[\w./-]+\.(?:pem|key|crt|cer|cert|csr|p12|pfx|jks|keystore|json|ya?ml|txt|der|pub|gpg|asc|conf|cfg|ini|env|js|mjs|ts|py|rb|go|sh|html?|css|xml|toml|log|lock|db|sqlite|csv|properties|tf|tfvars|jpe?g|png|gif|svg)$/i;
const VERSION = /^v?\d+(?:\.\d+){1,3}(?:[-+~][0-9A-Za-z.-]*)?$/;
const HASH_PREFIXED = /^(?:sha-?\d{0,3}|md5|blake2b?|xxh\d*)[-:=]/i;
const HASH_CONTEXT = /sha-?\d{0,3}\b|sha\d|md5|hash|checksum|digest|integrity|etag|fingerprint|commit|revision|\brev\b|\bsum\b|gpg|pgp/i;
const HEX_HASH = /^(?:[a-f0-9]{32}|[a-f0-9]{40}|[a-f0-9]{56}|[a-f0-9]{64}|[a-f0-9]{96}|[a-f0-9]{128}|[A-F0-9]{32}|[A-F0-9]{40}|[A-F0-9]{64}|[A-F0-9]{128})$/;
const UUID = /^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$/i;
const WORDS_FOR_NOTHING = /^(?:true|false|null|nil|none|undefined|yes|no|on|off|required|optional|disabled|enabled|empty|unset|todo|tbd|secret|password|token)$/i;

/** Least entropy a random string of this length over its alphabet would usually reach. */
function entropyFloor(length: number): number {
  return Math.min(3.5, Math.log2(length) - 0.75);
}

/**
 * Whether `value`, assigned to `name`, is a secret, and how sure: undefined when it is not one.
 * `line` is the assignment's line (for a hash's context: `sha256 = …`, `"integrity": …`).
 */
export function judgeAssignment(name: string, value: string, line = ''): Confidence | undefined {
  const strength = nameStrength(name);
  if (!strength) return undefined;
  // Minified code sets `.key=` on every element and object it builds: there only a name that says secret counts.
  if (strength === 'weak' && line.length > 1000) return undefined;
  const v = value;
  const password = /pass|pwd/i.test(name);
  if (v.length < (password ? 8 : 10) || v.length > 200) return undefined;
  if (URL.test(v)) return urlCarriesToken(v) ? 'low' : undefined;
  if (/^(?:urn|mailto|arn|data|tel|sip|ldap|file):/i.test(v)) return undefined;
  if (WORDS_FOR_NOTHING.test(v) || REFERENCE.test(v) || PATH.test(v) || FILE_NAME.test(v) || VERSION.test(v) || VERSION_INSIDE.test(v) || HASH_PREFIXED.test(v)) return undefined;
  if (echoesName(name, v)) return undefined;
  // A UUID whose name says id is an id (`request_id_key`), and a bare `key`'s a record's; behind `*_KEY` it is
  // Heroku's key shape. Even a documentation-like one (`12345678-ABCD-…`) is only ambiguous there, not nothing.
  if (UUID.test(v)) {
    if (words(name).some((w) => /^(?:id|ids|uuid|guid|identifier)$/.test(w)) || /^keys?$/i.test(name) || /^[0-]+$|(.)\1{7}/.test(v.replace(/-/g, ''))) return undefined;
    // A UUID named token is mostly a session's, a request's or a trace's; behind a key or a secret it is the credential.
    return words(name).some((w) => /key|secret|passw|pwd|credential/.test(w)) ? 'low' : undefined;
  }
  if (isPlaceholder(v) || isSampleValue(v) || /x{4,}|X{4,}|\*{3,}|\.{3}|^[-_.=+/]+$/.test(v)) return undefined;
  if (/^[\d\s.:_+,-]+$/.test(v)) {
    // A long number (a 16-digit client id, a 32-digit client secret) is a secret's shape; ports, times, dates and phone numbers are not.
    return /^\d+$/.test(v) && v.length >= (strength === 'strong' ? 12 : 16) && entropy(v) >= 2.5 ? 'low' : undefined;
  }
  if (HEX_HASH.test(v)) return HASH_CONTEXT.test(name) || HASH_CONTEXT.test(line) ? undefined : strength === 'strong' ? 'high' : 'low';
  const classes = [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/].filter((re) => re.test(v)).length;
  // A password is chosen by a person: words with digits and signs (`1qay@WXS!`, `Summer2024!`) are its shape, not a
  // sign of an identifier, unless it is one (`passwordFromEnv`, `settings.db_password`).
  if (password && classes >= 3 && !IDENTIFIER.test(v)) return /[^A-Za-z0-9]/.test(v) || entropy(v) >= entropyFloor(v.length) ? 'low' : undefined;
  if (isWordy(v)) return undefined;
  const e = entropy(v);
  const floor = entropyFloor(v.length);
  if (e < floor - 0.6) return undefined;
  if (classes === 1 && !/[0-9]/.test(v) && (v.length < 16 || e < 3.5)) return undefined; // one case of letters: words glued together
  if (e < floor || classes === 1) return 'low';
  return strength === 'strong' ? 'high' : 'low';
}
