import { Minimatch } from 'minimatch';

/**
 * The secret rules (issue 4): which files are secrets by their name, which bytes are secrets
 * wherever they are, and which assignments are secrets in settings (issue 14: generic assignments). Pure functions over paths and byte buffers; the layer reader feeds them.
 *
 * Not findings, on purpose: public keys and certificates, and text that only mentions a key (a
 * `BEGIN … PRIVATE KEY` line with no key body and no END line, as in documentation).
 */

export interface PathRule {
  rule: string;
  patterns: string[];
  /** Files that are only secrets if their content says so (a docker config with no `auth` is not). */
  content?: RegExp;
  /** Names that match a pattern but are not secrets (`.env.example`). */
  except?: string[];
}

/** Env files: `.env`, `.env.*`, `*.env`, `svc.env` (spec 1.7: svc.env holds SVC_TOKEN). */
export const ENV_FILE_PATTERNS = ['.env', '.env.*', '*.env', 'svc.env'];

export const PATH_RULES: PathRule[] = [
  { rule: 'env-file', patterns: ENV_FILE_PATTERNS, except: ['.env.example', '.env.sample', '.env.template', '.env.dist', '*.env.example', '*.env.sample'] },
  { rule: 'ssh-private-key-file', patterns: ['id_rsa', 'id_dsa', 'id_ecdsa', 'id_ed25519', 'id_ecdsa_sk', 'id_ed25519_sk', 'ssh_host_*_key'] },
  { rule: 'pkcs12', patterns: ['*.p12', '*.pfx'] },
  { rule: 'java-keystore', patterns: ['*.jks', '*.keystore'] },
  { rule: 'aws-credentials', patterns: ['**/.aws/credentials', '.aws/credentials'] },
  { rule: 'gcloud-credentials', patterns: ['**/.config/gcloud/credentials.db', '**/.config/gcloud/access_tokens.db', '**/.config/gcloud/application_default_credentials.json', '**/.config/gcloud/legacy_credentials/**'] },
  { rule: 'azure-credentials', patterns: ['**/.azure/accessTokens.json', '**/.azure/msal_token_cache.json', '**/.azure/msal_token_cache.bin'] },
  { rule: 'docker-registry-credentials', patterns: ['**/.docker/config.json', '.docker/config.json'], content: /"(?:auth|identitytoken|registrytoken)"\s*:\s*"[^"]/ },
  { rule: 'npm-credentials', patterns: ['.npmrc'], content: /(?:_authToken|_auth|_password)\s*=\s*\S/ },
  { rule: 'pypi-credentials', patterns: ['.pypirc'], content: /password\s*[:=]\s*\S/ },
  { rule: 'netrc-credentials', patterns: ['.netrc', '_netrc'], content: /password\s+\S/ },
  { rule: 'git-credentials', patterns: ['.git-credentials'], content: /[a-z]+:\/\/[^:\s/]+:[^@\s]+@/ },
  { rule: 'kubeconfig-credentials', patterns: ['**/.kube/config', '.kube/config'], content: /(?:token|client-key-data|password)\s*:\s*\S/ },
];

interface CompiledPathRule {
  rule: string;
  matchers: Minimatch[];
  except: Minimatch[];
  content?: RegExp;
}

const OPTIONS = { dot: true, matchBase: true, nocase: false } as const;
const COMPILED: CompiledPathRule[] = PATH_RULES.map((r) => ({
  rule: r.rule,
  matchers: r.patterns.map((p) => new Minimatch(p, OPTIONS)),
  except: (r.except ?? []).map((p) => new Minimatch(p, OPTIONS)),
  content: r.content,
}));

export interface PathMatch {
  rule: string;
  /** When set, the file is a finding only if its content (first MiB) matches. */
  content?: RegExp;
}

/** Path rules a file matches (path relative to the layer root, no leading `/`). */
export function matchPath(path: string): PathMatch[] {
  const out: PathMatch[] = [];
  for (const r of COMPILED) {
    if (!r.matchers.some((m) => m.match(path))) continue;
    if (r.except.some((m) => m.match(path))) continue;
    out.push(r.content ? { rule: r.rule, content: r.content } : { rule: r.rule });
  }
  return out;
}

/**
 * Token rules: well-known provider token formats and this service's own `svc_` tokens. Each is
 * anchored on a distinctive prefix, so one combined expression scans text in a single pass.
 */
export const TOKEN_RULES: Array<{ rule: string; source: string }> = [
  { rule: 'svc-access-token', source: 'svc_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])' },
  { rule: 'github-token', source: 'gh[pousr]_[A-Za-z0-9]{36}(?![A-Za-z0-9])' },
  { rule: 'github-fine-grained-token', source: 'github_pat_[A-Za-z0-9_]{82}' },
  { rule: 'gitlab-token', source: 'glpat-[A-Za-z0-9_-]{20}' },
  { rule: 'aws-access-key-id', source: '(?:AKIA|ASIA)(?![A-Z0-9]{9}EXAMPLE)[A-Z0-9]{16}(?![A-Z0-9])' },
  { rule: 'slack-token', source: 'xox[baprs]-[0-9A-Za-z]{8,}-[0-9A-Za-z-]{8,}' },
  { rule: 'stripe-secret-key', source: '[sr]k_live_[0-9a-zA-Z]{24,}' },
  { rule: 'anthropic-api-key', source: 'sk-ant-[a-z]{3,5}[0-9]{2}-[A-Za-z0-9_-]{80,}' },
  { rule: 'openai-api-key', source: 'sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}' },
  { rule: 'google-api-key', source: 'AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])' },
  { rule: 'npm-token', source: 'npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])' },
  { rule: 'huggingface-token', source: 'hf_[A-Za-z]{34}(?![A-Za-z])' },
  { rule: 'sendgrid-api-key', source: 'SG\\.[A-Za-z0-9_-]{22}\\.[A-Za-z0-9_-]{43}' },
  { rule: 'dockerhub-token', source: 'dckr_pat_[A-Za-z0-9_-]{27}' },
  { rule: 'putty-private-key', source: 'PuTTY-User-Key-File-[23]: ' },
];

const PEM_HEADER = '-----BEGIN (?:(?:RSA|DSA|EC|OPENSSH|ENCRYPTED|PGP|SSH2 ENCRYPTED) )?PRIVATE KEY(?: BLOCK)?-----';
/** PEM needs its body: base64 (maybe with `\n` escapes, as in JSON) and an END line. */
const PEM_FULL = new RegExp(
  `-----BEGIN ((?:(?:RSA|DSA|EC|OPENSSH|ENCRYPTED|PGP|SSH2 ENCRYPTED) )?PRIVATE KEY(?: BLOCK)?)-----` +
    `(?:[\\r\\n\\t ]|\\\\[rn]|[A-Za-z-]+: [^\\r\\n\\\\]*)*` + // line breaks, and headers like Proc-Type:
    `[A-Za-z0-9+/]{40,}[A-Za-z0-9+/=\\r\\n\\t \\\\]*?` +
    `-----END \\1-----`,
);
/** How far after a PEM header the END line may be (a 16384-bit RSA key is about 12 KB). */
export const PEM_WINDOW = 16 * 1024;

const COMBINED = new RegExp(`${PEM_HEADER}|${TOKEN_RULES.map((r) => `(${r.source})`).join('|')}`, 'g');

/**
 * Scans text for private keys and tokens; returns the rules that matched (each once). `text` is
 * bytes as latin1 (one char per byte), so binary files scan too and offsets are byte offsets.
 * `pendingPemAt` reports a PEM header whose window ran past the end of `text` (more bytes needed).
 */
export function scanText(text: string, found: Set<string>): { pendingPemAt: number } {
  COMBINED.lastIndex = 0;
  let pendingPemAt = -1;
  for (let m = COMBINED.exec(text); m !== null; m = COMBINED.exec(text)) {
    if (m[0].startsWith('-----BEGIN')) {
      const window = text.slice(m.index, m.index + PEM_WINDOW);
      if (PEM_FULL.test(window)) found.add('private-key');
      else if (m.index + PEM_WINDOW > text.length && pendingPemAt < 0) pendingPemAt = m.index;
      continue;
    }
    for (let i = 1; i < m.length; i++) {
      if (m[i] !== undefined) {
        found.add(TOKEN_RULES[i - 1]!.rule);
        break;
      }
    }
  }
  return { pendingPemAt };
}

/**
 * Files read as `KEY=value` settings, where a generic secret assignment is looked for (besides the
 * token and key rules every file gets): env files, `/etc/environment`, `/etc/default/*`, Java
 * properties, ini/cfg/conf, TOML and YAML. Source code is left out: it assigns test fixtures and
 * hashes to `*_key` names everywhere, which would flag most images.
 */
export const ENV_LIKE_PATTERNS = [...ENV_FILE_PATTERNS, '.envrc', 'etc/environment', 'etc/default/*', '*.properties', '*.ini', '*.cfg', '*.conf', '*.toml', '*.yaml', '*.yml'];
const ENV_LIKE = ENV_LIKE_PATTERNS.map((p) => new Minimatch(p, OPTIONS));

/** Whether a file's content gets the generic assignment rule (path relative to the layer root). */
export function isEnvLike(path: string): boolean {
  return ENV_LIKE.some((m) => m.match(path));
}

/**
 * The generic assignment rule, after gitleaks' `generic-api-key`: a secret-like key name, an
 * assignment (`=`, `:`, `:=`), a value of 10–150 characters, maybe quoted. The value then has to
 * look random (`isSecretValue`); the key must not name something public (`PUBLIC_KEY_NAMES`).
 */
const GENERIC = /(?:^|[^A-Za-z0-9_.-])([A-Za-z0-9_.-]{0,50}?(?:secret|passw(?:or)?d|pwd|token|credentials?|creds|auth|key)[A-Za-z0-9_.-]{0,20})[ \t]*["']?[ \t]*(?::=|=|:)[ \t]*(["'`]?)([^\s"'`;,]{10,150})\2(?=[\s"'`;,]|\\[nrt]|$)/gim;
/** Key names that hold public or descriptive values: a GPG fingerprint, a key's file, a token's lifetime. */
const PUBLIC_KEY_NAMES = /gpg|pgp|fingerprint|public|pub_?key|keyring|(?:[_.-]|^)(?:file|path|dir|url|uri|host|port|user|username|name|type|size|len|length|id|ttl|timeout|expiry|expires|header|method|mode|version|format|alg|algorithm|hash|sha\d*|md5|checksum)$/i;

/** Shannon entropy of a string, in bits per character. */
export function entropy(value: string): number {
  const counts = new Map<string, number>();
  for (const c of value) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) bits -= (n / value.length) * Math.log2(n / value.length);
  return bits;
}

/** Entropy floor of a generic secret, gitleaks' value: `PORT=8080` or `changeme` style values stay below. */
export const GENERIC_ENTROPY_FLOOR = 3.5;

/** A value that looks generated, not a number, version, path, URL, word or a reference to another variable. */
function isSecretValue(value: string): boolean {
  if (/^[\d.:_+-]+$/.test(value)) return false; // numbers, versions, times
  if (/^(?:\/|\.\.?\/|~)/.test(value)) return false; // paths
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return false; // URLs
  if (/^[$%{<@]|\$\{|\$\(/.test(value)) return false; // $VAR, ${VAR}, %(x)s, {{ x }}, <placeholder>
  if (!/[\d+/=!@#%^&*~]/.test(value)) return false; // words and identifiers (`session_cookie_name`), not generated
  return entropy(value) >= GENERIC_ENTROPY_FLOOR;
}

const GENERIC_RULE = 'generic-secret';

/** Finds generic secret assignments in text (whole lines); adds `generic-secret` to `found`. */
export function scanAssignments(text: string, found: Set<string>): void {
  GENERIC.lastIndex = 0;
  for (let m = GENERIC.exec(text); m !== null; m = GENERIC.exec(text)) {
    if (!PUBLIC_KEY_NAMES.test(m[1]!) && isSecretValue(m[3]!)) {
      found.add(GENERIC_RULE);
      return;
    }
  }
}

/**
 * Scans one whole buffer (an env entry, a history command, a file): the rules that matched.
 * `assignments`: look for generic secret assignments too (env entries, history, env-like files),
 * when no specific rule matched (a `SVC_TOKEN=svc_…` entry is an svc-access-token, not both).
 */
export function scanBuffer(buf: Buffer | string, opts: { assignments?: boolean } = {}): string[] {
  const found = new Set<string>();
  const text = typeof buf === 'string' ? buf : buf.toString('latin1');
  scanText(text, found);
  if (opts.assignments && found.size === 0) scanAssignments(text, found);
  return [...found];
}

/** The longest token any rule matches, bounding how much of a chunk must be carried into the next. */
const TOKEN_CARRY = 256;

/** Longest line kept for the assignment rule; a longer one is read from its last this-many bytes. */
const LINE_CARRY = 4096;

/**
 * Streaming content scan of one file: feed chunks in order; tokens and keys split across chunk
 * boundaries are still found (the tail of each chunk is carried over). With `assignments`, whole
 * lines are also checked for generic secret assignments (the unfinished last line is carried).
 */
export class ContentScanner {
  readonly found = new Set<string>();
  private carry = '';
  private line: string | undefined;

  constructor(opts: { assignments?: boolean } = {}) {
    if (opts.assignments) this.line = '';
  }

  feed(chunk: Buffer): void {
    const latin1 = chunk.toString('latin1');
    const text = this.carry + latin1;
    const { pendingPemAt } = scanText(text, this.found);
    if (pendingPemAt >= 0) this.carry = text.slice(pendingPemAt, pendingPemAt + PEM_WINDOW);
    else this.carry = text.length > TOKEN_CARRY ? text.slice(-TOKEN_CARRY) : text;
    if (this.line === undefined) return;
    const lines = this.line + latin1;
    const cut = lines.lastIndexOf('\n') + 1;
    if (cut > 0) scanAssignments(lines.slice(0, cut), this.found);
    this.line = lines.slice(Math.max(cut, lines.length - LINE_CARRY));
  }

  end(): string[] {
    if (this.line) scanAssignments(this.line, this.found);
    if (this.found.size > 1) this.found.delete(GENERIC_RULE); // a specific rule says more
    return [...this.found];
  }
}
