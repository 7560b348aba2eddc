/**
 * The built-in content rules: every token format a provider documents, written from the format
 * (prefix, alphabet, length) rather than from another scanner's rule file. Each rule names the
 * keywords that must occur near a match; the engine (rule-set.ts) runs a rule only around a place
 * where one of its keywords occurs, so the full set costs one pass over the bytes.
 *
 * A rule's secret is its regex's group `secret`, else the whole match. Regexes are bounded (no
 * unbounded repetition of a group), and run on a window of at most a few KiB around the keyword.
 */

import type { Confidence } from './generic.ts';

export type Family =
  | 'cloud' | 'code-host' | 'chat' | 'payment' | 'package-registry' | 'database' | 'ai' | 'saas'
  | 'private-key' | 'jwt' | 'service' | 'generic' | 'operator';

export interface ContentRule {
  id: string;
  family: Family;
  /** Lower-case literals; the rule runs only near one of them (matched case-insensitively). */
  keywords: string[];
  regex: RegExp;
  /** Least Shannon entropy (bits per character) of the secret. */
  entropy?: number;
  /** Where the rule looks around a keyword: its line (default), or this many bytes either side. */
  span?: { before: number; after: number };
  /**
   * Plausibility beyond the regex (a JWT's parts must decode to JSON text): false or undefined
   * rejects the match, `'low'` accepts it as a weaker finding.
   */
  check?: (secret: string, match: RegExpExecArray, ctx: CheckContext) => boolean | Confidence | undefined;
}

/** What a rule's check may look at besides the match. */
export interface CheckContext {
  /** The file's path in the layer (absent for Env entries and history lines). */
  path?: string;
  /** The match's whole line. */
  line: () => string;
}

/** Token characters that must not continue a match on either side. */
const E_DASH = '(?![A-Za-z0-9_-])';
const B_DASH = '(?<![A-Za-z0-9_-])';

/** A token that starts with a fixed prefix: `prefix` + `body` (a regex source), bounded both sides. */
function prefixed(id: string, family: Family, prefixes: string[], body: string, opts: Partial<ContentRule> = {}): ContentRule {
  const alt = prefixes.map(escape).join('|');
  return { id, family, keywords: prefixes.map((p) => p.toLowerCase()), regex: new RegExp(`${B_DASH}(?<secret>(?:${alt})${body})${E_DASH}`), entropy: 3, ...opts };
}

/**
 * A secret without a prefix of its own, recognised by a name that mentions its provider next to
 * it: `TWILIO_AUTH_TOKEN = "…"`, `"datadog_api_key": "…"`, `--okta-token …`.
 */
function named(id: string, family: Family, keywords: string[], name: string, value: string, opts: Partial<ContentRule> = {}): ContentRule {
  return {
    id, family, keywords,
    regex: new RegExp(`(?<name>(?:${name})[A-Za-z0-9_.-]{0,30})["']?[ \\t]{0,16}(?::=|=>|=|:|,|[ \\t])[ \\t]{0,16}["'\`]?(?<secret>${value})(?![A-Za-z0-9_+/=-])`, 'i'),
    entropy: 3,
    check: (_secret, m) => !DESCRIPTIVE_NAME.test(m.groups!.name!),
    ...opts,
  };
}

/** Names that hold an identifier, not a secret: `HEROKU_APP_ID`, `DATADOG_SITE`, `SNYK_ORG`. */
const DESCRIPTIVE_NAME = /(?:^|[_.-])(?:id|ids|url|uri|host|hostname|user|username|name|region|site|org|organization|project|app|account|email|endpoint|env|version|path|file)$/i;

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Passwords in connection strings that are a product's default or a tutorial's word, not a secret. */
const DEFAULT_PASSWORDS = new Set(['password', 'passwd', 'pass', 'pwd', 'secret', 'changeme', 'example', 'test', 'testing', 'user', 'username', 'root', 'admin', 'postgres', 'mysql', 'redis', 'guest', 'mongo', 'sa', 'default', 'demo', 'dev']);

/** A connection string's password that is a real one: not a default, a placeholder, or the user name again. */
function realPassword(password: string, user: string): boolean {
  const p = password.toLowerCase();
  return !DEFAULT_PASSWORDS.has(p) && p !== user.toLowerCase() && !/^[*x.]+$|^\$|^%|^\{|^<|^\[/.test(p)
    && !/passw(?:or)?d|^(?:some|my|your|the)[a-z]*$/.test(p); // `somepassword`, `authpassword`, `mysecret`: a tutorial's words
}

const HEX = '[a-f0-9]';
const UUID = '[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}';

/**
 * A JWT's first two parts decode to JSON objects (the header naming its algorithm), or at least to
 * JSON-looking text (`{"…`, printable): a token with an odd or damaged header is still a token.
 */
function plausibleJwt(token: string): boolean {
  const [header, payload] = token.split('.').map((part) => Buffer.from(part, 'base64url').toString('latin1'));
  try {
    const h = JSON.parse(header!);
    const p = JSON.parse(payload!);
    if (typeof h === 'object' && h !== null && typeof h.alg === 'string' && typeof p === 'object' && p !== null) return true;
  } catch {
    // judged by its text below
  }
  const printable = (text: string) => text.startsWith('{"') && /^[\x20-\x7e\t\r\n]*$/.test(text.slice(0, -3));
  return header!.startsWith('{"') && payload!.startsWith('{"') && (printable(header!) || printable(payload!));
}

/** A key block's body that is a template's, not a key: empty, `...`, `<your key>`, `${KEY}`, `xxxx`. */
function isKeyPlaceholder(body: string): boolean {
  const text = body.replace(/\\[rn]|\s/g, '');
  return text.length < 3 || /^[.…x*]+$|^[<{[$%]|\.\.\.|…|your|example|redacted|insert|placeholder/i.test(text);
}

/** A PEM body: base64 lines (maybe `\n`-escaped, as in JSON) and headers such as Proc-Type:. */
const PEM_BODY = '(?:[\\r\\n\\t ]|\\\\[rn]|[A-Za-z-]{1,40}: [^\\r\\n\\\\]{0,200})*[A-Za-z0-9+/]{40}[A-Za-z0-9+/=\\r\\n\\t \\\\]{0,16000}?';

export const PROVIDER_RULES: ContentRule[] = [
  // ── private keys ─────────────────────────────────────────────────────────────────────────────
  {
    id: 'private-key', family: 'private-key', keywords: ['-----begin'],
    // Every PEM private key kind (PKCS#1/#8, SEC1, OpenSSH, encrypted, PGP, SSH2); needs a body and its END line.
    regex: new RegExp(`(?<secret>-----BEGIN (?<kind>(?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?)-----${PEM_BODY}-----END \\k<kind>-----)`),
    span: { before: 0, after: 17 * 1024 },
    entropy: 0,
  },
  {
    // A private key block whose body is no key (`anything`, a truncated paste): the header says what was meant to be
    // there, so it is flagged, as gitleaks does, but as `low`. The rule above claims real keys first (same fingerprint).
    id: 'private-key', family: 'private-key', keywords: ['-----begin'],
    regex: /(?<secret>-----BEGIN (?<kind>(?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?)-----(?<body>[\s\S]{1,4000}?)-----END \k<kind>----)/,
    span: { before: 0, after: 4200 },
    check: (_secret, m) => (isKeyPlaceholder(m.groups!.body!) ? false : 'low'),
  },
  {
    id: 'private-key', family: 'private-key', keywords: ['---- begin ssh2'],
    regex: /(?<secret>---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----[\s\S]{40,16000}?---- END SSH2 ENCRYPTED PRIVATE KEY ----)/,
    span: { before: 0, after: 17 * 1024 }, entropy: 0,
  },
  {
    id: 'putty-private-key', family: 'private-key', keywords: ['putty-user-key-file-'],
    // Line breaks may be real or escaped (a key pasted into JSON or a Java string), lines indented (YAML).
    regex: /(?<secret>PuTTY-User-Key-File-[23]: [\s\S]{0,2000}?Private-Lines: \d+(?:[A-Za-z0-9+/=]|\s|\\[rn]){40,16000}?Private-MAC: [a-f0-9]{40,64})/,
    span: { before: 0, after: 17 * 1024 }, entropy: 0,
  },
  prefixed('age-secret-key', 'private-key', ['AGE-SECRET-KEY-1'], '[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}'),

  // ── the service's own tokens ─────────────────────────────────────────────────────────────────
  prefixed('svc-access-token', 'service', ['svc_'], '[A-Za-z0-9_-]{43}'),

  // ── cloud providers ──────────────────────────────────────────────────────────────────────────
  // Access key ids: AKIA (long-term), ASIA (STS), ABIA (STS service bearer), ACCA (context-specific); base32.
  prefixed('aws-access-key-id', 'cloud', ['AKIA', 'ASIA', 'ABIA', 'ACCA'], '[A-Z2-7]{16}'),
  named('aws-secret-access-key', 'cloud', ['secret_access_key', 'secretaccesskey', 'secret-access-key', 'aws_secret', 'awssecret', 'secret_key'],
    'aws_?secret_?access_?key|secret[_-]?access[_-]?key|aws_?secret_?key|aws[_.-]?secret|secret_key', '[A-Za-z0-9/+]{40}', { entropy: 4 }),
  prefixed('gcp-api-key', 'cloud', ['AIza'], '[0-9A-Za-z_-]{35}'),
  prefixed('gcp-oauth-client-secret', 'cloud', ['GOCSPX-'], '[A-Za-z0-9_-]{28}'),
  {
    id: 'gcp-service-account', family: 'cloud', keywords: ['service_account'],
    // The key file JSON: its private_key_id is the secret's stable name (the key itself is a private-key finding too).
    regex: /"type"\s*:\s*"service_account"[\s\S]{0,600}?"private_key_id"\s*:\s*"(?<secret>[a-f0-9]{40})"/,
    span: { before: 600, after: 2048 }, entropy: 3,
  },
  {
    id: 'azure-storage-connection-string', family: 'cloud', keywords: ['accountkey='],
    regex: /AccountName=[A-Za-z0-9-]{3,24};\s*AccountKey=(?<secret>[A-Za-z0-9+/]{86}==)/i, entropy: 4,
  },
  {
    id: 'azure-shared-access-key', family: 'cloud', keywords: ['sharedaccesskey='],
    regex: /SharedAccessKeyName=[^;"'\s]{1,256};\s*SharedAccessKey=(?<secret>[A-Za-z0-9+/]{43}=)/i, entropy: 4,
  },
  {
    id: 'azure-sas-token', family: 'cloud', keywords: ['&sig=', '?sig='],
    regex: /[?&]s[vp]=[^&\s"']{1,40}&[^\s"']{0,300}?sig=(?<secret>[A-Za-z0-9%+/]{40,90}(?:%3D|=){0,2})/i, entropy: 4,
  },
  {
    id: 'azure-ad-client-secret', family: 'cloud', keywords: ['q~'],
    // Entra ID (Azure AD) client secrets: 3 characters, a digit, `Q~`, then 31–34 characters.
    regex: /(?<![A-Za-z0-9_~.-])(?<secret>[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34})(?![A-Za-z0-9_~.-])/, entropy: 3.5,
  },
  prefixed('digitalocean-token', 'cloud', ['dop_v1_', 'doo_v1_', 'dor_v1_'], `${HEX}{64}`),
  prefixed('heroku-api-key', 'cloud', ['HRKU-'], '[A-Za-z0-9_-]{60}'),
  named('heroku-api-key', 'cloud', ['heroku'], 'heroku', UUID),
  prefixed('alibaba-access-key-id', 'cloud', ['LTAI'], '[A-Za-z0-9]{12,20}'),
  named('alibaba-access-key-secret', 'cloud', ['alibaba', 'aliyun'], 'alibaba|aliyun', '[A-Za-z0-9]{30}', { entropy: 3.5 }),
  named('cloudflare-api-token', 'cloud', ['cloudflare', 'cf_api'], 'cloudflare|cf_api', '[A-Za-z0-9_-]{40}', { entropy: 3.5 }),
  prefixed('cloudflare-origin-ca-key', 'cloud', ['v1.0-'], `${HEX}{24}-${HEX}{146}`),
  prefixed('flyio-token', 'cloud', ['fo1_', 'fm1r_', 'fm2_'], '[A-Za-z0-9_+/=-]{43,600}'),
  { id: 'scaleway-secret-key', family: 'cloud', entropy: 3, keywords: ['scw_secret', 'scaleway'], regex: new RegExp(`(?:scw_secret_key|scaleway)[A-Za-z0-9_.-]{0,30}["']?\\s*[:=]\\s*["']?(?<secret>${UUID})`, 'i') },
  { id: 'linode-token', family: 'cloud', entropy: 3, keywords: ['linode'], regex: /linode[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?(?<secret>[a-f0-9]{64})(?![a-f0-9])/i },
  { id: 'hetzner-token', family: 'cloud', keywords: ['hcloud', 'hetzner'], regex: /(?:hcloud|hetzner)[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?(?<secret>[A-Za-z0-9]{64})(?![A-Za-z0-9])/i, entropy: 4 },

  // ── code hosts ───────────────────────────────────────────────────────────────────────────────
  prefixed('github-token', 'code-host', ['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_'], '[A-Za-z0-9]{36}'),
  prefixed('github-fine-grained-token', 'code-host', ['github_pat_'], '[A-Za-z0-9]{22}_[A-Za-z0-9]{59}'),
  // GitLab: personal, OAuth app secret, deploy, runner, CI build, pipeline trigger, feed, incoming
  // mail, agent, SCIM, feature-flag client tokens; newer routable tokens are longer and end `.01.xxxxxxxxx`.
  prefixed('gitlab-token', 'code-host',
    ['glpat-', 'gloas-', 'gldt-', 'glrt-', 'glcbt-', 'glptt-', 'glft-', 'glimt-', 'glagent-', 'glsoat-', 'glffct-', 'gltst-', 'glrtr-'],
    '[A-Za-z0-9_-]{20,64}(?:\\.[0-9a-z]{2}\\.[0-9a-z]{9})?'),
  prefixed('gitlab-runner-registration-token', 'code-host', ['GR1348941'], '[A-Za-z0-9_-]{20}'),
  prefixed('bitbucket-app-password', 'code-host', ['ATBB'], '[A-Za-z0-9_=.-]{32}'),
  prefixed('bitbucket-access-token', 'code-host', ['ATCTT3'], '[A-Za-z0-9_=-]{150,250}'),
  named('bitbucket-client-secret', 'code-host', ['bitbucket'], 'bitbucket', '[A-Za-z0-9_-]{64}', { entropy: 3.5 }),
  { id: 'gitea-token', family: 'code-host', entropy: 3, keywords: ['gitea'], regex: /gitea[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?(?<secret>[a-f0-9]{40})(?![a-f0-9])/i },

  // ── chat and webhooks ───────────────────────────────────────────────────────────────────────
  prefixed('slack-token', 'chat', ['xoxb-', 'xoxp-', 'xoxa-', 'xoxo-', 'xoxs-', 'xoxr-', 'xoxe-', 'xoxe.'], '[0-9A-Za-z.-]{20,250}', { entropy: 3 }),
  prefixed('slack-app-token', 'chat', ['xapp-'], '\\d-[A-Z0-9]{9,12}-\\d{10,14}-[a-f0-9]{64}'),
  {
    id: 'slack-webhook-url', family: 'chat', keywords: ['hooks.slack.com'],
    regex: /hooks\.slack\.com\/(?:services|workflows|triggers)\/(?<secret>[A-Za-z0-9]{8,14}\/[A-Za-z0-9]{8,14}\/[A-Za-z0-9]{18,32}|[A-Za-z0-9]{8,14}\/[A-Za-z0-9]{8,14}\/\d{6,20}\/[a-f0-9]{32}|[A-Za-z0-9+_-]{40,120})(?![A-Za-z0-9])/, entropy: 3,
  },
  {
    id: 'discord-webhook-url', family: 'chat', keywords: ['discord.com/api/webhooks/', 'discordapp.com/api/webhooks/'],
    regex: /discord(?:app)?\.com\/api\/webhooks\/(?<secret>\d{17,20}\/[A-Za-z0-9_-]{60,70})(?![A-Za-z0-9_-])/, entropy: 3,
  },
  named('discord-bot-token', 'chat', ['discord'], 'discord', '[MNO][A-Za-z0-9_-]{23,27}\\.[A-Za-z0-9_-]{6}\\.[A-Za-z0-9_-]{27,40}', { entropy: 3.5 }),
  {
    // A bot id, a colon and `A` + 34 characters (`AA…` in every token issued lately; older ones differ).
    id: 'telegram-bot-token', family: 'chat', keywords: [':a'],
    regex: /(?<![A-Za-z0-9_:])(?<secret>\d{5,16}:A[A-Za-z0-9_-]{32,34})(?![A-Za-z0-9_-])/, entropy: 3.5,
  },
  {
    id: 'teams-webhook-url', family: 'chat', keywords: ['webhook.office.com'],
    // The documented shape (two UUIDs, 32 hex, a UUID), and any tenant/id pair with a long path: the URL is the credential.
    regex: new RegExp(`webhook\\.office\\.com\\/webhookb2\\/(?<secret>${UUID}@${UUID}\\/IncomingWebhook\\/[a-f0-9]{32}\\/${UUID}(?:\\/[A-Za-z0-9_-]{40,60})?|[A-Za-z0-9-]{20,40}@[A-Za-z0-9-]{20,40}\\/IncomingWebhook\\/[A-Za-z0-9\\/_-]{20,200})`, 'i'), entropy: 3,
  },
  { id: 'mattermost-token', family: 'chat', entropy: 3, keywords: ['mattermost'], regex: /mattermost[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?(?<secret>[a-z0-9]{26})(?![a-z0-9])/i },

  // ── payment ─────────────────────────────────────────────────────────────────────────────────
  prefixed('stripe-secret-key', 'payment', ['sk_live_', 'sk_test_', 'rk_live_', 'rk_test_'], '[A-Za-z0-9]{24,247}'),
  prefixed('stripe-webhook-secret', 'payment', ['whsec_'], '[A-Za-z0-9+/]{32,64}'),
  prefixed('square-access-token', 'payment', ['EAAA'], '[A-Za-z0-9_-]{60}', { entropy: 3.5 }),
  prefixed('square-access-token', 'payment', ['sq0atp-'], '[A-Za-z0-9_-]{22}'),
  prefixed('square-oauth-secret', 'payment', ['sq0csp-'], '[A-Za-z0-9_-]{43}'),
  prefixed('braintree-access-token', 'payment', ['access_token$'], '(?:production|sandbox)\\$[0-9a-z]{16}\\$[0-9a-f]{32}'),
  named('paypal-client-secret', 'payment', ['paypal'], 'paypal[A-Za-z0-9_.-]{0,20}secret', '[A-Za-z0-9_-]{80}', { entropy: 4 }),
  prefixed('flutterwave-secret-key', 'payment', ['FLWSECK-', 'FLWSECK_TEST-'], `${HEX}{32}-X`),
  prefixed('plaid-access-token', 'payment', ['access-production-', 'access-sandbox-', 'access-development-'], UUID),
  prefixed('adyen-api-key', 'payment', ['AQE'], '[A-Za-z0-9+/]{3}[A-Za-z0-9]{50,90}=?(?:-[A-Za-z0-9+/=]{40,120}){1,3}', { entropy: 4 }),
  { id: 'razorpay-key-secret', family: 'payment', keywords: ['razorpay'], regex: /razorpay[A-Za-z0-9_.-]{0,20}secret[A-Za-z0-9_.-]{0,10}["']?\s*[:=]\s*["']?(?<secret>[A-Za-z0-9]{24})(?![A-Za-z0-9])/i, entropy: 3.5 },

  // ── package registries ──────────────────────────────────────────────────────────────────────
  prefixed('npm-token', 'package-registry', ['npm_'], '[A-Za-z0-9]{36}'),
  // PyPI and TestPyPI upload tokens: macaroons whose base64 starts with the issuer (pypi.org / test.pypi.org).
  prefixed('pypi-token', 'package-registry', ['pypi-AgEIcHlwaS5vcmc', 'pypi-AgENdGVzdC5weXBpLm9yZw'], '[A-Za-z0-9_-]{50,300}'),
  prefixed('rubygems-api-key', 'package-registry', ['rubygems_'], `${HEX}{48}`),
  prefixed('nuget-api-key', 'package-registry', ['oy2'], '[a-z0-9]{43}', { entropy: 3.5 }),
  prefixed('dockerhub-token', 'package-registry', ['dckr_pat_', 'dckr_oat_'], '[A-Za-z0-9_-]{27,40}'),
  prefixed('crates-io-token', 'package-registry', ['cio'], '[A-Za-z0-9]{32}', { entropy: 4 }),
  prefixed('jfrog-api-key', 'package-registry', ['AKCp'], '[A-Za-z0-9]{69}'),
  prefixed('jfrog-reference-token', 'package-registry', ['cmVmdGtu'], '[A-Za-z0-9]{56}'),
  { id: 'terraform-cloud-token', family: 'package-registry', entropy: 3, keywords: ['.atlasv1.'], regex: /(?<![A-Za-z0-9])(?<secret>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70})(?![A-Za-z0-9_=-])/ },
  prefixed('pulumi-token', 'package-registry', ['pul-'], `${HEX}{40}`),
  prefixed('clojars-token', 'package-registry', ['CLOJARS_'], '[a-z0-9]{60}'),

  // ── databases and connection strings ────────────────────────────────────────────────────────
  {
    id: 'database-url-password', family: 'database',
    keywords: ['postgres://', 'postgresql://', 'mysql://', 'mariadb://', 'mongodb://', 'mongodb+srv://', 'redis://', 'rediss://', 'amqp://', 'amqps://', 'mssql://', 'sqlserver://', 'clickhouse://', 'cockroachdb://', 'neo4j://', 'neo4j+s://', 'couchdb://', 'postgres+asyncpg://', 'postgresql+psycopg2://', 'mysql+pymysql://'],
    // The password between `user:` and `@host` (user may be empty: redis://:pw@host).
    regex: /(?<![A-Za-z0-9+])(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver|clickhouse|cockroachdb|neo4j(?:\+s)?|couchdb)(?:\+[a-z0-9]{1,20})?:\/\/(?<user>[^:/@\s"'`<>{}]{0,100}):(?<secret>[^@/\s"'`<>]{3,200})@[A-Za-z0-9[\]._-]{1,253}/,
    entropy: 0,
    check: (secret, m) => realPassword(secret, m.groups!.user!),
  },
  {
    id: 'database-url-password', family: 'database', keywords: ['jdbc:'],
    regex: /jdbc:[a-z0-9]{2,20}:[^\s"'`<>]{0,300}?[?&;]password=(?<secret>[^&;\s"'`<>]{3,200})/i, entropy: 0,
    check: (secret) => realPassword(secret, ''),
  },
  {
    id: 'connection-string-password', family: 'database', keywords: ['password=', 'pwd='],
    // ADO.NET/ODBC: `Server=…;User Id=…;Password=…;`
    regex: /(?:user id|uid|user|username)\s*=\s*(?<user>[^;"'\r\n]{1,100});[^"'\r\n]{0,200}?(?:password|pwd)\s*=\s*(?<secret>[^;"'\s]{3,200})/i, entropy: 0,
    check: (secret, m) => realPassword(secret, m.groups!.user!),
  },

  // ── AI providers ────────────────────────────────────────────────────────────────────────────
  prefixed('anthropic-api-key', 'ai', ['sk-ant-'], '(?:api|admin|sid)\\d{2}-[A-Za-z0-9_-]{80,110}'),
  // OpenAI: every key kind carries `T3BlbkFJ` (base64 of "OpenAI") in its middle.
  { id: 'openai-api-key', family: 'ai', keywords: ['t3blbkfj'], regex: /(?<![A-Za-z0-9_-])(?<secret>sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,200}T3BlbkFJ[A-Za-z0-9_-]{20,200})(?![A-Za-z0-9_-])/, entropy: 3.5 },
  prefixed('huggingface-token', 'ai', ['hf_'], '[A-Za-z]{34}', { entropy: 3.5 }),
  prefixed('huggingface-org-token', 'ai', ['api_org_'], '[A-Za-z]{34}', { entropy: 3.5 }),
  named('cohere-api-key', 'ai', ['cohere', 'co_api_key'], 'cohere|co_api_key', '[A-Za-z0-9]{40}', { entropy: 3.5 }),
  prefixed('replicate-api-token', 'ai', ['r8_'], '[A-Za-z0-9]{37}', { entropy: 3.5 }),
  prefixed('groq-api-key', 'ai', ['gsk_'], '[A-Za-z0-9]{52}'),
  prefixed('perplexity-api-key', 'ai', ['pplx-'], '[A-Za-z0-9]{48}'),
  prefixed('xai-api-key', 'ai', ['xai-'], '[A-Za-z0-9]{80}'),
  prefixed('openrouter-api-key', 'ai', ['sk-or-v1-'], `${HEX}{64}`),
  prefixed('langsmith-api-key', 'ai', ['lsv2_pt_', 'lsv2_sk_'], `${HEX}{32}_${HEX}{10}`),
  named('mistral-api-key', 'ai', ['mistral'], 'mistral', '[A-Za-z0-9]{32}', { entropy: 3.5 }),
  named('deepseek-api-key', 'ai', ['deepseek'], 'deepseek', `sk-${HEX}{32}`),
  named('together-api-key', 'ai', ['together'], 'together[_-]?(?:ai[_-]?)?api[_-]?key', `${HEX}{64}`),
  named('pinecone-api-key', 'ai', ['pinecone'], 'pinecone', `pcsk_[A-Za-z0-9]{5,6}_[A-Za-z0-9]{60,70}|${UUID}`),

  // ── SaaS ────────────────────────────────────────────────────────────────────────────────────
  named('twilio-credential', 'saas', ['twilio'], 'twilio', `SK[0-9a-fA-F]{32}|${HEX}{32}`, { entropy: 3 }),
  prefixed('sendgrid-api-key', 'saas', ['SG.'], '[A-Za-z0-9_-]{22}\\.[A-Za-z0-9_-]{43}'),
  prefixed('mailgun-api-key', 'saas', ['key-'], `${HEX}{32}`),
  named('mailgun-api-key', 'saas', ['mailgun'], 'mailgun', `${HEX}{32}-${HEX}{8}-${HEX}{8}`),
  { id: 'mailchimp-api-key', family: 'saas', keywords: ['-us'], regex: /(?<![A-Za-z0-9])(?<secret>[a-f0-9]{32}-us\d{1,2})(?![A-Za-z0-9])/, entropy: 3 },
  prefixed('brevo-api-key', 'saas', ['xkeysib-', 'xsmtpsib-'], `${HEX}{64}-[A-Za-z0-9]{16}`),
  prefixed('shopify-token', 'saas', ['shpat_', 'shpca_', 'shppa_', 'shpss_'], '[a-fA-F0-9]{32}'),
  named('datadog-api-key', 'saas', ['datadog', 'dd_api', 'ddapi', 'dd_app', 'ddapp', 'dd-api', 'dd-app'], 'datadog|dd[_-]?api[_-]?key|dd[_-]?app(?:lication)?[_-]?key', `${HEX}{40}|${HEX}{32}`),
  prefixed('new-relic-key', 'saas', ['NRAK-', 'NRAA-', 'NRII-'], '[A-Z0-9]{27}'),
  { id: 'new-relic-license-key', family: 'saas', keywords: ['nral'], regex: /(?<![A-Za-z0-9])(?<secret>(?:eu01xx|gov01x)?[a-f0-9]{34,36}NRAL)(?![A-Za-z0-9])/, entropy: 3 },
  prefixed('sentry-token', 'saas', ['sntryu_'], `${HEX}{64}`),
  prefixed('sentry-token', 'saas', ['sntrys_'], 'eyJ[A-Za-z0-9+/=]{60,300}_[A-Za-z0-9+/]{43}'),
  named('sentry-token', 'saas', ['sentry'], 'sentry[A-Za-z0-9_.-]{0,10}(?:auth|token)', `${HEX}{64}`),
  prefixed('doppler-token', 'saas', ['dp.pt.', 'dp.st.', 'dp.sa.', 'dp.ct.', 'dp.scim.', 'dp.audit.'], '[A-Za-z0-9_.-]{40,48}'),
  prefixed('vault-token', 'saas', ['hvs.', 'hvb.', 'hvr.'], '[A-Za-z0-9_-]{24,300}', { entropy: 3.5 }),
  named('vault-token', 'saas', ['vault_token', 'x-vault-token'], 'vault_token|x-vault-token', 's\\.[A-Za-z0-9]{24}'),
  prefixed('linear-api-key', 'saas', ['lin_api_'], '[A-Za-z0-9]{40}'),
  prefixed('linear-oauth-token', 'saas', ['lin_oauth_'], `${HEX}{64}`),
  prefixed('atlassian-api-token', 'saas', ['ATATT3'], '[A-Za-z0-9_=-]{150,250}'),
  named('atlassian-api-token', 'saas', ['jira', 'confluence', 'atlassian'], 'jira|confluence|atlassian', '[A-Za-z0-9]{24}', { entropy: 3.5 }),
  named('okta-api-token', 'saas', ['okta', 'ssws'], 'okta|ssws', '00[A-Za-z0-9_-]{40}', { entropy: 3.5 }),
  prefixed('grafana-service-account-token', 'saas', ['glsa_'], `[A-Za-z0-9]{32}_${HEX}{8}`),
  prefixed('grafana-cloud-token', 'saas', ['glc_'], '[A-Za-z0-9+/]{32,400}={0,2}'),
  prefixed('planetscale-token', 'saas', ['pscale_tkn_', 'pscale_pw_', 'pscale_oauth_'], '[A-Za-z0-9_.=-]{32,64}'),
  prefixed('postman-api-key', 'saas', ['PMAK-'], `${HEX}{24}-${HEX}{34}`),
  prefixed('notion-token', 'saas', ['ntn_'], '[0-9]{11}[A-Za-z0-9]{35}'),
  prefixed('notion-token', 'saas', ['secret_'], '[A-Za-z0-9]{43}', { entropy: 4 }),
  prefixed('figma-token', 'saas', ['figd_'], '[A-Za-z0-9_-]{40}'),
  { id: 'airtable-token', family: 'saas', entropy: 3, keywords: ['airtable'], regex: /(?<![A-Za-z0-9])(?<secret>pat[A-Za-z0-9]{14}\.[a-f0-9]{64})(?![A-Za-z0-9])/ },
  prefixed('databricks-token', 'saas', ['dapi'], `${HEX}{32}(?:-\\d)?`),
  prefixed('dynatrace-token', 'saas', ['dt0c01.'], '[A-Z0-9]{24}\\.[A-Z0-9]{64}'),
  prefixed('hubspot-private-app-token', 'saas', ['pat-na1-', 'pat-eu1-'], UUID),
  prefixed('mapbox-secret-token', 'saas', ['sk.eyJ'], '[A-Za-z0-9_-]{40,200}\\.[A-Za-z0-9_-]{20,30}'),
  prefixed('typeform-token', 'saas', ['tfp_'], '[A-Za-z0-9_.=-]{59}'),
  prefixed('circleci-token', 'saas', ['CCIPAT_'], `[A-Za-z0-9]{22}_${HEX}{40}`),
  prefixed('buildkite-token', 'saas', ['bkua_'], `${HEX}{40}`),
  prefixed('readme-api-key', 'saas', ['rdme_'], '[a-z0-9]{70}'),
  prefixed('prefect-api-key', 'saas', ['pnu_'], '[A-Za-z0-9]{36}'),
  prefixed('supabase-token', 'saas', ['sbp_'], `${HEX}{40}`),
  prefixed('render-api-key', 'saas', ['rnd_'], '[A-Za-z0-9]{32}'),
  prefixed('contentful-token', 'saas', ['CFPAT-'], '[A-Za-z0-9_-]{43}'),
  prefixed('frameio-token', 'saas', ['fio-u-'], '[A-Za-z0-9_=-]{64}'),
  prefixed('duffel-token', 'saas', ['duffel_test_', 'duffel_live_'], '[A-Za-z0-9_=-]{43}'),
  prefixed('easypost-api-key', 'saas', ['EZAK', 'EZTK'], `${HEX}{54}`),
  prefixed('1password-service-account-token', 'saas', ['ops_eyJ'], '[A-Za-z0-9+/=_-]{250,1200}'),
  prefixed('netlify-token', 'saas', ['nfp_'], '[A-Za-z0-9]{36}'),
  { id: 'fastly-token', family: 'saas', keywords: ['fastly'], regex: /fastly[A-Za-z0-9_.-]{0,30}["']?\s*[:=]\s*["']?(?<secret>[A-Za-z0-9_-]{32})(?![A-Za-z0-9_-])/i, entropy: 3.5 },
  named('algolia-admin-key', 'saas', ['algolia'], 'algolia', `${HEX}{32}`),
  named('snyk-token', 'saas', ['snyk'], 'snyk', UUID),
  named('zendesk-api-token', 'saas', ['zendesk'], 'zendesk', '[A-Za-z0-9]{40}', { entropy: 3.5 }),
  named('intercom-token', 'saas', ['intercom'], 'intercom', '[A-Za-z0-9=_-]{59,60}', { entropy: 3.5 }),
  named('launchdarkly-key', 'saas', ['launchdarkly'], 'launchdarkly', '(?:api|sdk)-[a-f0-9-]{36}'),
  named('pagerduty-token', 'saas', ['pagerduty'], 'pagerduty', '[A-Za-z0-9_+-]{20}', { entropy: 3.5 }),
  named('auth0-client-secret', 'saas', ['auth0'], 'auth0[A-Za-z0-9_.-]{0,20}secret', '[A-Za-z0-9_-]{64}', { entropy: 4 }),

  // Smaller providers: a documented prefix where there is one, else the provider's name beside the value.
  prefixed('adobe-client-secret', 'saas', ['p8e-'], '[A-Za-z0-9]{32}'),
  named('adobe-client-secret', 'saas', ['adobe'], 'adobe', `${HEX}{32}`),
  prefixed('asana-token', 'saas', [], '', { keywords: ['asana'], regex: /asana[A-Za-z0-9_.-]{0,30}["']?[ \t]{0,16}[:=][ \t]{0,16}["']?(?<secret>\d\/\d{10,20}(?::|\/\d{10,20}:)[a-f0-9]{32}|[A-Za-z0-9]{32})(?![A-Za-z0-9])/i }),
  named('beamer-api-key', 'saas', ['beamer'], 'beamer', 'b_[A-Za-z0-9=_-]{44}', { entropy: 4 }),
  prefixed('defined-networking-key', 'saas', ['dnkey-'], '[a-z0-9=_-]{26}-[a-z0-9=_-]{52}'),
  prefixed('harness-token', 'saas', ['pat.', 'sat.'], '[A-Za-z0-9_-]{22}\\.[a-f0-9]{24}\\.[A-Za-z0-9]{20}'),
  prefixed('shippo-api-token', 'saas', ['shippo_live_', 'shippo_test_'], `${HEX}{40}`),
  prefixed('scalingo-api-token', 'saas', ['tk-us-'], '[A-Za-z0-9_-]{48}'),
  prefixed('yandex-api-key', 'cloud', ['AQVN'], '[A-Za-z0-9_-]{35,38}'),
  named('yandex-access-key', 'cloud', ['yandex'], 'yandex', 'YC[A-Za-z0-9_-]{38}|t1\\.[A-Za-z0-9_-]{20,200}={0,2}\\.[A-Za-z0-9_-]{86}={0,2}'),
  prefixed('facebook-access-token', 'saas', ['EAACEdEose0cBA'], '[A-Za-z0-9]{20,300}'),
  named('facebook-secret', 'saas', ['facebook', 'fb_app_secret', 'fb_secret'], 'facebook|fb_app_secret|fb_secret', `${HEX}{32}|EAA[A-Za-z0-9]{100,300}`),
  prefixed('twitter-bearer-token', 'saas', ['AAAAAAAAAAAAAAAAAAAAA'], '[A-Za-z0-9%]{30,120}', { entropy: 3.5 }),
  named('twitter-secret', 'saas', ['twitter'], 'twitter', '\\d{15,25}-[A-Za-z0-9]{20,40}|[A-Za-z0-9]{50}|[A-Za-z0-9]{25}', { entropy: 3.5 }),
  named('twitch-api-token', 'saas', ['twitch'], 'twitch', '[a-z0-9]{30}', { entropy: 3.5 }),
  named('linkedin-client-secret', 'saas', ['linkedin', 'linked_in', 'linked-in'], 'linked[_-]?in', '[A-Za-z0-9]{16}|[A-Za-z0-9]{14}', { entropy: 3.2 }),
  named('dropbox-api-token', 'saas', ['dropbox'], 'dropbox', 'sl\\.[A-Za-z0-9_-]{130,160}|[A-Za-z0-9]{11}AAAAAAAAAA[A-Za-z0-9_=-]{43}|[A-Za-z0-9]{15}', { entropy: 3.2 }),
  named('coinbase-api-key', 'payment', ['coinbase'], 'coinbase', '[A-Za-z0-9_-]{64}', { entropy: 4 }),
  named('kraken-api-key', 'payment', ['kraken'], 'kraken', '[A-Za-z0-9/=_+-]{80,90}', { entropy: 4 }),
  named('kucoin-api-key', 'payment', ['kucoin'], 'kucoin', `${HEX}{24}|${UUID}`),
  named('bittrex-api-key', 'payment', ['bittrex'], 'bittrex', '[A-Za-z0-9]{32}', { entropy: 3.5 }),
  named('gocardless-token', 'payment', ['gocardless'], 'gocardless', 'live_[A-Za-z0-9_=-]{40}'),
  named('finicity-secret', 'payment', ['finicity'], 'finicity', '[a-z0-9]{20}|[a-f0-9]{32}', { entropy: 3.2 }),
  named('finnhub-token', 'saas', ['finnhub'], 'finnhub', '[a-z0-9]{20}', { entropy: 3.2 }),
  named('freshbooks-token', 'saas', ['freshbooks'], 'freshbooks', '[a-z0-9]{64}', { entropy: 3.5 }),
  named('etsy-api-key', 'saas', ['etsy'], 'etsy', '[a-z0-9]{24}', { entropy: 3.5 }),
  named('flickr-api-key', 'saas', ['flickr'], 'flickr', '[a-z0-9]{32}', { entropy: 3.5 }),
  named('nytimes-api-key', 'saas', ['nytimes', 'new-york-times', 'newyorktimes'], 'nytimes|new-?york-?times', '[A-Za-z0-9=_-]{32}', { entropy: 3.5 }),
  named('lob-api-key', 'saas', ['lob'], 'lob', '(?:live|test)_[a-f0-9]{35}|(?:live|test)_pub_[a-f0-9]{31}'),
  named('messagebird-api-key', 'saas', ['messagebird', 'message-bird', 'message_bird'], 'message[_-]?bird', '[A-Za-z0-9]{25}', { entropy: 3.5 }),
  named('rapidapi-key', 'saas', ['rapidapi'], 'rapidapi', '[A-Za-z0-9_-]{50}', { entropy: 3.5 }),
  named('sendbird-token', 'saas', ['sendbird'], 'sendbird', `${HEX}{40}|${UUID}`),
  named('squarespace-token', 'saas', ['squarespace'], 'squarespace', UUID),
  named('sumologic-key', 'saas', ['sumo'], 'sumo(?:logic)?', 'su[A-Za-z0-9]{12}|[A-Za-z0-9]{64}', { entropy: 3.5 }),
  named('travisci-token', 'saas', ['travis'], 'travis', '[A-Za-z0-9]{22}', { entropy: 3.5 }),
  named('droneci-token', 'saas', ['drone'], 'drone', '[A-Za-z0-9]{32}', { entropy: 3.5 }),
  named('gitter-token', 'chat', ['gitter'], 'gitter', `${HEX}{40}`),
  named('codecov-token', 'saas', ['codecov'], 'codecov', `${HEX}{32}|${UUID}`),
  named('confluent-key', 'saas', ['confluent'], 'confluent', '[A-Za-z0-9]{64}|[A-Z0-9]{16}', { entropy: 3.5 }),
  named('adafruit-api-key', 'saas', ['adafruit'], 'adafruit', '[A-Za-z0-9_-]{32}', { entropy: 3.5 }),
  named('netlify-token', 'saas', ['netlify'], 'netlify', '[A-Za-z0-9_=-]{40,46}', { entropy: 3.5 }),
  // user:password of 8 hex digits each: the format says it, whatever the digits' entropy.
  named('sidekiq-credentials', 'package-registry', ['contribsys'], 'bundle__?(?:enterprise|gems)__contribsys__com|contribsys', `${HEX}{8}:${HEX}{8}`, { entropy: 0 }),
  { id: 'sidekiq-credentials', family: 'package-registry', keywords: ['contribsys.com'], regex: /(?<![A-Za-z0-9])(?<secret>[a-f0-9]{8}:[a-f0-9]{8})@(?:gems|enterprise)\.contribsys\.com/i },
  named('airtable-api-key', 'saas', ['airtable'], 'airtable', 'key[A-Za-z0-9]{14}'),

  // ── JWTs ────────────────────────────────────────────────────────────────────────────────────
  {
    id: 'jwt', family: 'jwt', keywords: ['eyj'],
    regex: /(?<![A-Za-z0-9_-])(?<secret>eyJ[A-Za-z0-9_-]{10,1000}\.eyJ[A-Za-z0-9_-]{10,8000}\.[A-Za-z0-9_-]{20,1000})(?![A-Za-z0-9_-])/,
    span: { before: 0, after: 10 * 1024 },
    check: (secret) => plausibleJwt(secret),
    entropy: 3,
  },
];

