import { Minimatch } from 'minimatch';

/**
 * Path rules: which files are secrets by their name (matched case-insensitively, as on the file
 * systems images are built on: `.P12` is a PKCS#12 file too), and which paths are vendored packages.
 * The content rules are in provider-rules.ts and generic-rules.ts, run by rule-set.ts and
 * content-scanner.ts.
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
const ENV_FILE_PATTERNS = ['.env', '.env.*', '*.env', 'svc.env'];

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

const OPTIONS = { dot: true, matchBase: true, nocase: true } as const;
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
 * Folders of packages installed from a registry (npm, PyPI, Go modules, Cargo, RubyGems, Composer,
 * CocoaPods, Maven): a finding there is judged by the same rules, and marked, so an owner can tell
 * a vendored test fixture from a secret of their own.
 */
const VENDORED = /(?:^|\/)(?:node_modules|bower_components|jspm_packages|site-packages|dist-packages|vendor|third_party|Pods|\.m2\/repository|\.cargo\/registry|go\/pkg\/mod|gems|\.gradle\/caches)\//;

export function isVendored(path: string): boolean {
  return VENDORED.test(path);
}
