/**
 * A secret corpus made from providers' documented formats (prefix, alphabet, length), with a seeded
 * generator so every run writes the same files; and a corpus of things that look like secrets and
 * are not. Both are written into the file types secrets end up in.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** mulberry32: a small seeded generator (the corpus is the same on every machine and run). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const DIGITS = '0123456789';
const ALNUM = UPPER + LOWER + DIGITS;
const HEX = '0123456789abcdef';
const B64 = ALNUM + '+/';
const B64URL = ALNUM + '-_';

export interface SecretKind {
  family: string;
  /** What the generator makes, as the provider names it. */
  kind: string;
  /** A variable name a user would give it. */
  name: string;
  make: (r: Rand) => string;
}

export class Rand {
  constructor(private readonly next: () => number) {}
  s(alphabet: string, n: number): string {
    let out = '';
    for (let i = 0; i < n; i++) out += alphabet[Math.floor(this.next() * alphabet.length)];
    return out;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  uuid(): string {
    return `${this.s(HEX, 8)}-${this.s(HEX, 4)}-4${this.s(HEX, 3)}-a${this.s(HEX, 3)}-${this.s(HEX, 12)}`;
  }
  pick<T>(xs: T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
}

const b64url = (obj: unknown) => Buffer.from(JSON.stringify(obj)).toString('base64url');

/** Private keys made by the real tools, once per run (their bytes vary; their formats do not). */
function keys(): Record<string, string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-corpus-keys-'));
  const run = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  try {
    const out: Record<string, string> = {
      'rsa-pkcs8': run('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048']),
      'rsa-pkcs1': run('openssl', ['genrsa', '-traditional', '2048']),
      'ec-sec1': run('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout']),
      'ed25519-pkcs8': run('openssl', ['genpkey', '-algorithm', 'ed25519']),
      'encrypted-pkcs8': run('openssl', ['genpkey', '-algorithm', 'ed25519', '-aes256', '-pass', 'pass:corpus']),
    };
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'corpus', '-f', path.join(dir, 'k')]);
    out['openssh-ed25519'] = fs.readFileSync(path.join(dir, 'k'), 'utf8');
    return out;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** A PuTTY .ppk v3 file, laid out as PuTTY documents it (Appendix C of its manual). */
function puttyKey(r: Rand): string {
  const lines = (n: number) => Array.from({ length: n }, () => r.s(B64, 64)).join('\n');
  return `PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: corpus\nPublic-Lines: 2\n${lines(2)}\nPrivate-Lines: 1\n${lines(1)}\nPrivate-MAC: ${r.s(HEX, 64)}\n`;
}

/** An OpenPGP secret key block: armour lines around base64 (the body is random; the format is RFC 4880's). */
function pgpKey(r: Rand): string {
  const body = Array.from({ length: 12 }, () => r.s(B64, 64)).join('\n');
  return `-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n${body}\n=${r.s(B64, 4)}\n-----END PGP PRIVATE KEY BLOCK-----\n`;
}

export function secretKinds(): SecretKind[] {
  const k = keys();
  const bech32 = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l'.toUpperCase();
  return [
    // cloud
    { family: 'cloud', kind: 'AWS access key id (AKIA)', name: 'AWS_ACCESS_KEY_ID', make: (r) => `AKIA${r.s('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16)}` },
    { family: 'cloud', kind: 'AWS STS key id (ASIA)', name: 'AWS_ACCESS_KEY_ID', make: (r) => `ASIA${r.s('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16)}` },
    { family: 'cloud', kind: 'AWS key id (ABIA)', name: 'AWS_ACCESS_KEY_ID', make: (r) => `ABIA${r.s('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16)}` },
    { family: 'cloud', kind: 'AWS key id (ACCA)', name: 'AWS_ACCESS_KEY_ID', make: (r) => `ACCA${r.s('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 16)}` },
    { family: 'cloud', kind: 'AWS secret access key', name: 'aws_secret_access_key', make: (r) => r.s(ALNUM + '/+', 40) },
    { family: 'cloud', kind: 'GCP API key', name: 'GOOGLE_API_KEY', make: (r) => `AIza${r.s(ALNUM + '-_', 35)}` },
    { family: 'cloud', kind: 'GCP OAuth client secret', name: 'GOOGLE_CLIENT_SECRET', make: (r) => `GOCSPX-${r.s(ALNUM + '-_', 28)}` },
    { family: 'cloud', kind: 'Azure storage connection string', name: 'AZURE_STORAGE_CONNECTION_STRING', make: (r) => `DefaultEndpointsProtocol=https;AccountName=${r.s(LOWER + DIGITS, 12)};AccountKey=${r.s(B64, 86)}==;EndpointSuffix=core.windows.net` },
    { family: 'cloud', kind: 'Azure AD client secret', name: 'AZURE_CLIENT_SECRET', make: (r) => `${r.s(ALNUM, 3)}${r.int(0, 9)}Q~${r.s(ALNUM + '_~.-', 34)}` },
    { family: 'cloud', kind: 'DigitalOcean token', name: 'DIGITALOCEAN_TOKEN', make: (r) => `dop_v1_${r.s(HEX, 64)}` },
    { family: 'cloud', kind: 'Heroku API key (HRKU)', name: 'HEROKU_API_KEY', make: (r) => `HRKU-${r.s(ALNUM + '_-', 60)}` },
    { family: 'cloud', kind: 'Heroku API key (UUID)', name: 'HEROKU_API_KEY', make: (r) => r.uuid() },
    { family: 'cloud', kind: 'Alibaba access key id', name: 'ALIBABA_CLOUD_ACCESS_KEY_ID', make: (r) => `LTAI${r.s(ALNUM, 20)}` },
    { family: 'cloud', kind: 'Cloudflare API token', name: 'CLOUDFLARE_API_TOKEN', make: (r) => r.s(ALNUM + '_-', 40) },
    // code hosts
    ...['ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_'].map((p) => ({ family: 'code-host', kind: `GitHub ${p}`, name: 'GITHUB_TOKEN', make: (r: Rand) => `${p}${r.s(ALNUM, 36)}` })),
    { family: 'code-host', kind: 'GitHub fine-grained PAT', name: 'GITHUB_TOKEN', make: (r) => `github_pat_${r.s(ALNUM, 22)}_${r.s(ALNUM, 59)}` },
    ...['glpat-', 'gloas-', 'gldt-', 'glrt-', 'glcbt-', 'glptt-', 'glft-', 'glimt-', 'glagent-', 'glsoat-', 'glffct-'].map((p) => ({ family: 'code-host', kind: `GitLab ${p}`, name: 'GITLAB_TOKEN', make: (r: Rand) => `${p}${r.s(ALNUM + '_-', 20)}` })),
    { family: 'code-host', kind: 'GitLab runner registration', name: 'RUNNER_REGISTRATION_TOKEN', make: (r) => `GR1348941${r.s(ALNUM + '_-', 20)}` },
    { family: 'code-host', kind: 'Bitbucket app password', name: 'BITBUCKET_APP_PASSWORD', make: (r) => `ATBB${r.s(ALNUM, 32)}` },
    // chat and webhooks
    { family: 'chat', kind: 'Slack bot token', name: 'SLACK_BOT_TOKEN', make: (r) => `xoxb-${r.s(DIGITS, 12)}-${r.s(DIGITS, 13)}-${r.s(ALNUM, 24)}` },
    { family: 'chat', kind: 'Slack user token', name: 'SLACK_TOKEN', make: (r) => `xoxp-${r.s(DIGITS, 12)}-${r.s(DIGITS, 12)}-${r.s(DIGITS, 13)}-${r.s(HEX, 32)}` },
    { family: 'chat', kind: 'Slack app token', name: 'SLACK_APP_TOKEN', make: (r) => `xapp-1-A${r.s(UPPER + DIGITS, 10)}-${r.s(DIGITS, 13)}-${r.s(HEX, 64)}` },
    { family: 'chat', kind: 'Slack webhook URL', name: 'SLACK_WEBHOOK_URL', make: (r) => `https://hooks.slack.com/services/T${r.s(UPPER + DIGITS, 10)}/B${r.s(UPPER + DIGITS, 10)}/${r.s(ALNUM, 24)}` },
    { family: 'chat', kind: 'Discord webhook URL', name: 'DISCORD_WEBHOOK', make: (r) => `https://discord.com/api/webhooks/${r.s(DIGITS, 19)}/${r.s(ALNUM + '_-', 68)}` },
    { family: 'chat', kind: 'Discord bot token', name: 'DISCORD_BOT_TOKEN', make: (r) => `${r.pick(['M', 'N'])}${r.s(ALNUM, 23)}.${r.s(ALNUM + '_-', 6)}.${r.s(ALNUM + '_-', 38)}` },
    { family: 'chat', kind: 'Telegram bot token', name: 'TELEGRAM_BOT_TOKEN', make: (r) => `${r.int(1, 9)}${r.s(DIGITS, 9)}:AA${r.s(ALNUM + '_-', 33)}` },
    { family: 'chat', kind: 'Teams webhook URL', name: 'TEAMS_WEBHOOK_URL', make: (r) => `https://contoso.webhook.office.com/webhookb2/${r.uuid()}@${r.uuid()}/IncomingWebhook/${r.s(HEX, 32)}/${r.uuid()}` },
    // payment
    ...['sk_live_', 'sk_test_', 'rk_live_', 'rk_test_'].map((p) => ({ family: 'payment', kind: `Stripe ${p}`, name: 'STRIPE_SECRET_KEY', make: (r: Rand) => `${p}${r.s(ALNUM, 99)}` })),
    { family: 'payment', kind: 'Stripe webhook secret', name: 'STRIPE_WEBHOOK_SECRET', make: (r) => `whsec_${r.s(ALNUM, 32)}` },
    { family: 'payment', kind: 'Square access token', name: 'SQUARE_ACCESS_TOKEN', make: (r) => `EAAA${r.s(ALNUM + '_-', 60)}` },
    { family: 'payment', kind: 'Square OAuth secret', name: 'SQUARE_OAUTH_SECRET', make: (r) => `sq0csp-${r.s(ALNUM + '_-', 43)}` },
    { family: 'payment', kind: 'Braintree access token', name: 'BRAINTREE_ACCESS_TOKEN', make: (r) => `access_token$production$${r.s(LOWER + DIGITS, 16)}$${r.s(HEX, 32)}` },
    { family: 'payment', kind: 'Flutterwave secret key', name: 'FLW_SECRET_KEY', make: (r) => `FLWSECK-${r.s(HEX, 32)}-X` },
    { family: 'payment', kind: 'Plaid access token', name: 'PLAID_ACCESS_TOKEN', make: (r) => `access-production-${r.uuid()}` },
    // package registries
    { family: 'package-registry', kind: 'npm token', name: 'NPM_TOKEN', make: (r) => `npm_${r.s(ALNUM, 36)}` },
    { family: 'package-registry', kind: 'PyPI upload token', name: 'PYPI_TOKEN', make: (r) => `pypi-AgEIcHlwaS5vcmc${r.s(B64URL, 70)}` },
    { family: 'package-registry', kind: 'TestPyPI upload token', name: 'TEST_PYPI_TOKEN', make: (r) => `pypi-AgENdGVzdC5weXBpLm9yZw${r.s(B64URL, 70)}` },
    { family: 'package-registry', kind: 'RubyGems API key', name: 'GEM_HOST_API_KEY', make: (r) => `rubygems_${r.s(HEX, 48)}` },
    { family: 'package-registry', kind: 'NuGet API key', name: 'NUGET_API_KEY', make: (r) => `oy2${r.s(LOWER + DIGITS, 43)}` },
    { family: 'package-registry', kind: 'Docker Hub PAT', name: 'DOCKERHUB_TOKEN', make: (r) => `dckr_pat_${r.s(ALNUM + '_-', 27)}` },
    { family: 'package-registry', kind: 'JFrog API key', name: 'ARTIFACTORY_API_KEY', make: (r) => `AKCp${r.s(ALNUM, 69)}` },
    { family: 'package-registry', kind: 'Terraform Cloud token', name: 'TFE_TOKEN', make: (r) => `${r.s(ALNUM, 14)}.atlasv1.${r.s(ALNUM, 67)}` },
    { family: 'package-registry', kind: 'Pulumi token', name: 'PULUMI_ACCESS_TOKEN', make: (r) => `pul-${r.s(HEX, 40)}` },
    // databases
    { family: 'database', kind: 'PostgreSQL URL', name: 'DATABASE_URL', make: (r) => `postgres://app:${r.s(ALNUM, 20)}@db.internal:5432/app` },
    { family: 'database', kind: 'MySQL URL', name: 'MYSQL_URL', make: (r) => `mysql://root:${r.s(ALNUM, 16)}@mysql:3306/shop` },
    { family: 'database', kind: 'MongoDB SRV URL', name: 'MONGODB_URI', make: (r) => `mongodb+srv://svc:${r.s(ALNUM, 24)}@cluster0.${r.s(LOWER + DIGITS, 5)}.mongodb.net/prod` },
    { family: 'database', kind: 'Redis URL', name: 'REDIS_URL', make: (r) => `redis://:${r.s(ALNUM, 32)}@cache:6379/0` },
    { family: 'database', kind: 'AMQP URL', name: 'AMQP_URL', make: (r) => `amqps://worker:${r.s(ALNUM, 18)}@mq.internal:5671/vhost` },
    // AI providers
    { family: 'ai', kind: 'OpenAI project key', name: 'OPENAI_API_KEY', make: (r) => `sk-proj-${r.s(ALNUM + '_-', 74)}T3BlbkFJ${r.s(ALNUM + '_-', 74)}` },
    { family: 'ai', kind: 'OpenAI legacy key', name: 'OPENAI_API_KEY', make: (r) => `sk-${r.s(ALNUM, 20)}T3BlbkFJ${r.s(ALNUM, 20)}` },
    { family: 'ai', kind: 'Anthropic API key', name: 'ANTHROPIC_API_KEY', make: (r) => `sk-ant-api03-${r.s(ALNUM + '_-', 93)}AA` },
    { family: 'ai', kind: 'Hugging Face token', name: 'HF_TOKEN', make: (r) => `hf_${r.s(UPPER + LOWER, 34)}` },
    { family: 'ai', kind: 'Cohere API key', name: 'COHERE_API_KEY', make: (r) => r.s(ALNUM, 40) },
    { family: 'ai', kind: 'Replicate token', name: 'REPLICATE_API_TOKEN', make: (r) => `r8_${r.s(ALNUM, 37)}` },
    { family: 'ai', kind: 'Groq API key', name: 'GROQ_API_KEY', make: (r) => `gsk_${r.s(ALNUM, 52)}` },
    // SaaS
    { family: 'saas', kind: 'Twilio API key', name: 'TWILIO_API_KEY', make: (r) => `SK${r.s(HEX, 32)}` },
    { family: 'saas', kind: 'Twilio auth token', name: 'TWILIO_AUTH_TOKEN', make: (r) => r.s(HEX, 32) },
    { family: 'saas', kind: 'SendGrid API key', name: 'SENDGRID_API_KEY', make: (r) => `SG.${r.s(ALNUM + '_-', 22)}.${r.s(ALNUM + '_-', 43)}` },
    { family: 'saas', kind: 'Mailgun private key', name: 'MAILGUN_API_KEY', make: (r) => `key-${r.s(HEX, 32)}` },
    { family: 'saas', kind: 'Mailchimp API key', name: 'MAILCHIMP_API_KEY', make: (r) => `${r.s(HEX, 32)}-us${r.int(1, 21)}` },
    { family: 'saas', kind: 'Shopify access token', name: 'SHOPIFY_ACCESS_TOKEN', make: (r) => `shpat_${r.s(HEX, 32)}` },
    { family: 'saas', kind: 'Shopify shared secret', name: 'SHOPIFY_SHARED_SECRET', make: (r) => `shpss_${r.s(HEX, 32)}` },
    { family: 'saas', kind: 'Datadog API key', name: 'DD_API_KEY', make: (r) => r.s(HEX, 32) },
    { family: 'saas', kind: 'New Relic user key', name: 'NEW_RELIC_API_KEY', make: (r) => `NRAK-${r.s(UPPER + DIGITS, 27)}` },
    { family: 'saas', kind: 'Sentry user token', name: 'SENTRY_AUTH_TOKEN', make: (r) => `sntryu_${r.s(HEX, 64)}` },
    { family: 'saas', kind: 'Doppler token', name: 'DOPPLER_TOKEN', make: (r) => `dp.pt.${r.s(ALNUM, 43)}` },
    { family: 'saas', kind: 'Vault service token', name: 'VAULT_TOKEN', make: (r) => `hvs.${r.s(ALNUM + '_-', 91)}` },
    { family: 'saas', kind: 'Linear API key', name: 'LINEAR_API_KEY', make: (r) => `lin_api_${r.s(ALNUM, 40)}` },
    { family: 'saas', kind: 'Atlassian API token', name: 'JIRA_API_TOKEN', make: (r) => `ATATT3${r.s(ALNUM + '_-', 180)}=${r.s(HEX.toUpperCase(), 8)}` },
    { family: 'saas', kind: 'Okta API token', name: 'OKTA_API_TOKEN', make: (r) => `00${r.s(ALNUM + '_-', 40)}` },
    { family: 'saas', kind: 'Grafana service account token', name: 'GRAFANA_TOKEN', make: (r) => `glsa_${r.s(ALNUM, 32)}_${r.s(HEX, 8)}` },
    { family: 'saas', kind: 'PlanetScale token', name: 'PLANETSCALE_TOKEN', make: (r) => `pscale_tkn_${r.s(ALNUM + '_-', 43)}` },
    { family: 'saas', kind: 'Postman API key', name: 'POSTMAN_API_KEY', make: (r) => `PMAK-${r.s(HEX, 24)}-${r.s(HEX, 34)}` },
    { family: 'saas', kind: 'Databricks token', name: 'DATABRICKS_TOKEN', make: (r) => `dapi${r.s(HEX, 32)}` },
    { family: 'saas', kind: 'Adobe client secret', name: 'ADOBE_CLIENT_SECRET', make: (r) => `p8e-${r.s(ALNUM, 32)}` },
    { family: 'saas', kind: 'Harness PAT', name: 'HARNESS_TOKEN', make: (r) => `pat.${r.s(ALNUM, 22)}.${r.s(HEX, 24)}.${r.s(ALNUM, 20)}` },
    { family: 'saas', kind: 'Shippo token', name: 'SHIPPO_TOKEN', make: (r) => `shippo_live_${r.s(HEX, 40)}` },
    { family: 'saas', kind: 'Scalingo token', name: 'SCALINGO_TOKEN', make: (r) => `tk-us-${r.s(ALNUM + '_-', 48)}` },
    { family: 'saas', kind: 'Defined Networking key', name: 'DN_API_KEY', make: (r) => `dnkey-${r.s(LOWER + DIGITS, 26)}-${r.s(LOWER + DIGITS, 52)}` },
    { family: 'cloud', kind: 'Yandex API key', name: 'YC_API_KEY', make: (r) => `AQVN${r.s(ALNUM + '_-', 36)}` },
    { family: 'saas', kind: 'Twitter bearer token', name: 'TWITTER_BEARER_TOKEN', make: (r) => `AAAAAAAAAAAAAAAAAAAAA${r.s(ALNUM, 70)}` },
    { family: 'saas', kind: 'Facebook access token', name: 'FB_ACCESS_TOKEN', make: (r) => `EAACEdEose0cBA${r.s(ALNUM, 150)}` },
    // private keys
    ...Object.entries(k).map(([kind, pem]) => ({ family: 'private-key', kind: `PEM ${kind}`, name: 'PRIVATE_KEY', make: () => pem })),
    { family: 'private-key', kind: 'OpenPGP secret key', name: 'GPG_PRIVATE_KEY', make: (r) => pgpKey(r) },
    { family: 'private-key', kind: 'PuTTY key', name: 'PPK', make: (r) => puttyKey(r) },
    { family: 'private-key', kind: 'age secret key', name: 'AGE_KEY', make: (r) => `AGE-SECRET-KEY-1${r.s(bech32, 58)}` },
    // JWTs and the service's own tokens
    { family: 'jwt', kind: 'JWT (HS256)', name: 'AUTH_JWT', make: (r) => { const h = b64url({ alg: 'HS256', typ: 'JWT' }); const p = b64url({ sub: r.uuid(), iat: 1700000000 + r.int(0, 1e7), scope: 'admin' }); return `${h}.${p}.${r.s(B64URL, 43)}`; } },
    { family: 'jwt', kind: 'JWT (RS256)', name: 'ID_TOKEN', make: (r) => { const h = b64url({ alg: 'RS256', kid: r.s(HEX, 16) }); const p = b64url({ iss: 'https://idp.example.net', sub: r.s(DIGITS, 12), exp: 1800000000 }); return `${h}.${p}.${r.s(B64URL, 342)}`; } },
    { family: 'service', kind: 'svc access token', name: 'SVC_TOKEN', make: (r) => `svc_${r.s(ALNUM + '_-', 43)}` },
  ];
}

/** Where secrets are written: file name and how a line carrying `name` = `secret` reads there. */
export interface FileType {
  type: string;
  file: (n: number) => string;
  render: (name: string, secret: string) => string;
}

const camel = (name: string) => name.toLowerCase().replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const oneLine = (s: string) => s.replace(/\n/g, '\\n');
const multi = (s: string) => s.includes('\n');

export const FILE_TYPES: FileType[] = [
  { type: 'plain', file: (n) => `notes/${n}.txt`, render: (_n, s) => `Handed over in the incident channel:\n${s}\nRotate after use.\n` },
  { type: 'py', file: (n) => `app/settings_${n}.py`, render: (n, s) => `import os\n\nDEBUG = False\n${n} = ${multi(s) ? `"""${s}"""` : `"${s}"`}\n` },
  { type: 'js', file: (n) => `src/config-${n}.js`, render: (n, s) => `'use strict';\nconst ${camel(n)} = ${multi(s) ? `\`${s}\`` : `'${s}'`};\nmodule.exports = { ${camel(n)} };\n` },
  { type: 'go', file: (n) => `cmd/srv/creds_${n}.go`, render: (n, s) => `package main\n\nconst ${camel(n)} = ${multi(s) ? `\`${s}\`` : `"${s}"`}\n` },
  { type: 'java', file: (n) => `src/main/java/com/acme/Creds${n}.java`, render: (n, s) => `package com.acme;\n\npublic class Creds {\n    private static final String ${n} = "${oneLine(s)}";\n}\n` },
  { type: 'yaml', file: (n) => `deploy/values-${n}.yaml`, render: (n, s) => `app:\n  replicas: 2\n  ${n.toLowerCase()}: ${multi(s) ? `|\n${s.trimEnd().split('\n').map((l) => `    ${l}`).join('\n')}` : s}\n` },
  { type: 'json', file: (n) => `config/app-${n}.json`, render: (n, s) => `${JSON.stringify({ name: 'shop', [n.toLowerCase()]: s }, null, 2)}\n` },
  { type: 'toml', file: (n) => `config/app-${n}.toml`, render: (n, s) => `[service]\nname = "shop"\n${n.toLowerCase()} = ${multi(s) ? `"""\n${s}"""` : `"${s}"`}\n` },
  { type: 'ini', file: (n) => `etc/app-${n}.ini`, render: (n, s) => `[main]\nlisten = 8080\n${n.toLowerCase()} = ${oneLine(s)}\n` },
  { type: 'conf', file: (n) => `etc/shop/app-${n}.conf`, render: (n, s) => `# shop settings\nworkers 4\n${n.toLowerCase()} = ${oneLine(s)}\n` },
  { type: 'env', file: (n) => `srv/app-${n}/.env`, render: (n, s) => `NODE_ENV=production\n${n}=${multi(s) ? `"${oneLine(s)}"` : s}\n` },
  { type: 'minified-js', file: (n) => `public/assets/app-${n}.min.js`, render: (n, s) => `!function(e,t){"use strict";var n={env:"production",${camel(n)}:"${oneLine(s)}",retries:3};function r(o){return o&&o.__esModule?o:{default:o}}t.exports=n}(this,module);\n` },
];

/** Image config entries: how a secret reads as an Env entry and in a history command. */
export const CONFIG_TYPES: Array<{ type: string; render: (name: string, secret: string) => string }> = [
  { type: 'image-env', render: (n, s) => `${n}=${oneLine(s)}` },
  { type: 'image-history', render: (n, s) => `RUN |1 ${n}=${multi(s) ? `'${oneLine(s)}'` : s} /bin/sh -c ./deploy.sh` },
];

export interface FalsePositive {
  category: string;
  file: string;
  content: string;
}

/** Things that look like secrets and are not, in the files where they are found. */
export function falsePositives(seed = 7): FalsePositive[] {
  const r = new Rand(seeded(seed));
  const out: FalsePositive[] = [];
  const add = (category: string, file: string, content: string) => out.push({ category, file: `fp/${category}/${out.length}-${file}`, content });
  // placeholders in templates, docs and examples
  const placeholders = [
    'GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'GITLAB_TOKEN=glpat-XXXXXXXXXXXXXXXXXXXX', 'STRIPE_SECRET_KEY=sk_live_<your-secret-key>',
    'aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}', 'api_key: "<token>"', 'password = "changeme"', 'AWS_ACCESS_KEY_ID=AKIAXXXXXXXXXXXXXXXX',
    'SLACK_WEBHOOK_URL=https://hooks.slack.com/services/TXXXXXXXX/BXXXXXXXX/XXXXXXXXXXXXXXXXXXXXXXXX', 'DATABASE_URL=postgres://user:password@localhost:5432/mydb',
    'NPM_TOKEN=npm_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'OPENAI_API_KEY=sk-...', 'token = "0000000000000000000000000000000000000000"',
    'SLACK_BOT_TOKEN=xoxb-your-bot-token-here', 'api_key = "abcdefghijklmnopqrstuvwxyz0123456789"', 'HF_TOKEN=hf_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX',
    'secret_key = "{{ vault_secret_key }}"', 'password: ${DB_PASSWORD:-}', 'client_secret = "%(client_secret)s"', 'SENDGRID_API_KEY=SG.xxxxxxxxxxxxxxxxxxxxxx.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',
    'DATABASE_URL=mysql://root:root@localhost/test', 'MONGODB_URI=mongodb://<username>:<password>@cluster0.mongodb.net', 'REDIS_URL=redis://:password@localhost:6379',
    'Authorization: Bearer <YOUR_TOKEN>', 'export GITHUB_TOKEN=ghp_1234567890abcdefghijklmnopqrstuvwxyz', 'AZURE_CLIENT_SECRET=your-client-secret',
    'DD_API_KEY=<DATADOG_API_KEY>', 'twilio_auth_token = "your_auth_token"', 'private_key: "-----BEGIN PRIVATE KEY-----\\n...\\n-----END PRIVATE KEY-----"',
  ];
  placeholders.forEach((p, i) => add('placeholder', i % 3 === 0 ? '.env.example' : i % 3 === 1 ? 'README.md' : 'settings.yaml', `# template\n${p}\n`));
  // documented example keys
  const documented = [
    'AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE', 'aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'stripe.api_key = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"',
    'curl -H "Authorization: token ghp_16C7e42F292c6912E7710c838347Ae178B4a" https://api.github.com/user',
    'token: eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c',
    'aws_access_key_id = AKIAI44QH8DHBEXAMPLE', 'secret = je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY',
  ];
  documented.forEach((d, i) => add('documented-example', i % 2 ? 'docs.md' : 'example.py', `Example from the provider's guide:\n\n    ${d}\n`));
  // hashes and checksums
  for (let i = 0; i < 12; i++) {
    const hash = r.s(HEX, r.pick([32, 40, 64]));
    add('hash', r.pick(['checksums.conf', 'build.yaml', 'build.properties', 'versions.py']), r.pick([
      `sha256 = "${hash}"`, `checksum: ${hash}`, `GIT_COMMIT=${hash}`, `source_hash = '${hash}'`, `md5sum ${hash}  archive.tar.gz`, `KEY_FINGERPRINT=${hash}`, `api_key_sha256: ${hash}`, `cache_key = "${hash}"`,
    ]) + '\n');
  }
  add('hash', 'package-lock.json', JSON.stringify({ name: 'shop', lockfileVersion: 3, packages: Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`node_modules/pkg-${i}`, { version: `1.${i}.0`, resolved: `https://registry.npmjs.org/pkg-${i}/-/pkg-${i}-1.${i}.0.tgz`, integrity: `sha512-${crypto.randomBytes(64).toString('base64')}` }])) }, null, 2));
  add('hash', 'yarn.lock', Array.from({ length: 30 }, (_, i) => `pkg-${i}@^1.0.0:\n  version "1.${i}.0"\n  resolved "https://registry.yarnpkg.com/pkg-${i}/-/pkg-${i}-1.${i}.0.tgz#${r.s(HEX, 40)}"\n  integrity sha512-${crypto.randomBytes(64).toString('base64')}\n`).join('\n'));
  add('hash', 'go.sum', Array.from({ length: 30 }, (_, i) => `github.com/acme/mod${i} v1.${i}.0 h1:${crypto.randomBytes(32).toString('base64')}\ngithub.com/acme/mod${i} v1.${i}.0/go.mod h1:${crypto.randomBytes(32).toString('base64')}`).join('\n'));
  add('hash', 'poetry.lock', Array.from({ length: 20 }, (_, i) => `[[package]]\nname = "pkg${i}"\nversion = "2.${i}"\nfiles = [\n    {file = "pkg${i}-2.${i}.tar.gz", hash = "sha256:${r.s(HEX, 64)}"},\n]\n`).join('\n'));
  add('hash', 'Cargo.lock', Array.from({ length: 20 }, (_, i) => `[[package]]\nname = "crate${i}"\nversion = "0.${i}.1"\nsource = "registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "${r.s(HEX, 64)}"\n`).join('\n'));
  // UUIDs
  for (let i = 0; i < 10; i++) {
    add('uuid', r.pick(['ids.yaml', 'app.conf', 'fixtures.json', 'ids.py']), r.pick([
      `request_id: ${r.uuid()}`, `"client_id": "${r.uuid()}"`, `HEROKU_APP_ID=${r.uuid()}`, `tenant_id = "${r.uuid()}"`, `SNYK_ORG=${r.uuid()}`, `token_id: ${r.uuid()}`, `trace = "${r.uuid()}"`, `"key": "${r.uuid()}"`,
    ]) + '\n');
  }
  // base64 of images (data URIs in CSS/HTML/JSON)
  for (let i = 0; i < 6; i++) {
    const png = Buffer.concat([Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'), crypto.randomBytes(3000), Buffer.alloc(400)]);
    add('base64-image', r.pick(['styles.css', 'index.html', 'icons.json']), `.logo { background: url("data:image/png;base64,${png.toString('base64')}"); }\n`);
  }
  // minified code
  for (let i = 0; i < 6; i++) {
    const ident = () => r.s(LOWER, 1) + r.s(ALNUM + '_$', r.int(0, 3));
    const parts = Array.from({ length: 400 }, () => r.pick([
      `var ${ident()}=${ident()}(${r.int(0, 999)});`, `function ${ident()}(${ident()},${ident()}){return ${ident()}.${ident()}(${ident()})}`,
      `${ident()}.key="${r.s(ALNUM, r.int(8, 40))}";`, `${ident()}["token"]=${ident()}||"";`, `case"${r.s(LOWER, 6)}":return!0;`, `"${r.s(B64, r.int(10, 60))}".split("")`,
    ]));
    add('minified-code', `vendor.${i}.min.js`, `${parts.join('')}\n`);
  }
  // public material that names keys: public keys, certificates, docs
  const cert = execFileSync('openssl', ['req', '-x509', '-newkey', 'ed25519', '-nodes', '-keyout', '/dev/null', '-subj', '/CN=corpus', '-days', '1'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  add('public-material', 'server.crt', cert);
  add('public-material', 'id_ed25519.pub', `ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI${r.s(B64, 43)} corpus@host\n`);
  add('public-material', 'docs.md', 'Keys look like -----BEGIN RSA PRIVATE KEY----- ... -----END RSA PRIVATE KEY----- in a file.\n');
  add('public-material', 'sshd_config', 'PasswordAuthentication no\nPubkeyAuthentication yes\nAuthorizedKeysFile .ssh/authorized_keys\n');
  add('public-material', 'publishable.js', `const stripe = Stripe('pk_live_${r.s(ALNUM, 24)}');\n`);
  return out;
}
