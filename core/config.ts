import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { finiteDuration } from './durations.ts';

/** Service configuration, read once from the environment (design.md, "Contracts: Operator"). */
export interface Config {
  domain: string;
  httpsPort: number;
  /** 0 turns the port-80 redirect off. */
  httpPort: number;
  dataDir: string;
  /**
   * Where deleted sandboxes' archives go (SVC_ARCHIVE_DIR, default `<dataDir>/archive`): one folder
   * that every service process can share, whichever of them runs the DELETE.
   */
  archiveDir: string;
  redisUrl: string;
  /** `sqlite://…` (default, in the data folder) or `postgres://…`. */
  storeUrl: string;
  /** The store's table (SVC_STORE_TABLE), so several services can share one database. */
  storeTable: string;
  /** Key that seals the secrets in the store; kept outside the store (created 0600 if missing). */
  secretKeyFile: string;
  /** Passed to dockerode; empty means the local socket. */
  dockerHost: string | undefined;
  tlsCertFile: string | undefined;
  tlsKeyFile: string | undefined;
  filesMaxUpload: number;
  /** Image the sandbox containers run (built by scripts/setup.sh). */
  sandboxImage: string;
  /** Image of the management tool (scripts/build-manager-image.sh), loaded into manager sandboxes. */
  managerImage: string;
  /** `default` (cap-add ALL, unconfined) or `sysbox-runc` where installed. */
  sandboxRuntime: SandboxRuntimeMode;
  /** What runs sandboxes (SVC_RUNTIME): `docker` (this machine's engine) or `incus` (an Incus daemon or cluster, docs/incus.md). */
  runtime: 'docker' | 'incus';
  /** Where the Incus daemon or cluster is (only with SVC_RUNTIME=incus). */
  incus: IncusConfig | undefined;
  /**
   * The engine that runs sandbox containers: the service's own, with --userns-remap
   * (scripts/sandbox-engine.sh). In `unisolated` mode the main engine (dockerHost) runs them.
   */
  sandboxDockerHost: string;
  /** The sandbox engine's address pool (scripts/sandbox-engine.sh): an address it reports outside is not used. */
  sandboxAddressPool: string;
  /** Limits of one sandbox container (all its inner containers share them). */
  sandboxMemoryMb: number;
  sandboxCpus: number;
  sandboxPids: number;
  /** Prefix for Redis keys and BullMQ queues, so several services (or test runs) can share one Redis. */
  redisPrefix: string;
  /** Nameservers for containers inside sandboxes (the sandbox's own 127.0.0.11 is out of their reach). */
  sandboxDns: string[];
  /**
   * IPv4 networks sandboxes of this machine never reach (egress-firewall.ts): other machines of the
   * private network (Redis, PostgreSQL, other service processes). Only `sandboxDns` is let
   * through, on port 53. Empty with SVC_SANDBOX_PRIVATE_NETWORKS=none.
   */
  sandboxPrivateNetworks: string[];
  /** Wakes per owner per hour that app traffic may trigger (spec 3: "within the owner's wake limits"): the default of the user's `wakes_per_hour` quota. */
  wakesPerHour: number;
  /** Defaults of the per-user quotas (accounts/quotas.ts); memory and CPUs default to sandboxMemoryMb and sandboxCpus. */
  quotaMaxSandboxes: number;
  quotaMaxRunning: number;
  /** A start is refused when the limits of running sandboxes would pass this many times the host's memory / CPUs. */
  overcommitMemory: number;
  overcommitCpus: number;
  /** An app request to an asleep sandbox is held this long while it wakes, then answered by the app (else the waiting page). */
  wakeHoldMs: number;
  /** Who owns the public port: `haproxy` (HAProxy in front, docs/data-plane.md) or `node` (the edge alone: the tests' reference). */
  dataPlane: 'node' | 'haproxy';
  /** Audit rows older than this many days are removed (0: kept for ever). */
  auditRetentionDays: number;
  /** OpenID Connect sign-in (SVC_OIDC_ISSUER set), docs/governance.md. */
  oidc: OidcConfig | undefined;
  /** SVC_PASSWORD_SIGN_IN=off: the web UI signs in only through the identity provider. */
  passwordSignIn: boolean;
  /** Comment lines on the log stream (GET logs/stream) this often, so proxies keep it open. */
  sseHeartbeatMs: number;
  /** The plain-HTTP API for operators on 127.0.0.1 (`npm start`). */
  apiPort: number;
  /** An existing distribution registry; else one is spawned on a unix socket. */
  registryUpstream: string | undefined;
  /** An operator's secret-scan rules in gitleaks' TOML format, added to the built-in ones (docs/scanner.md). */
  scanRulesFile: string | undefined;
  /** Scans run at once in this process (0: no scan workers here). */
  scanConcurrency: number;
  /** Prometheus metrics (GET /metrics); `SVC_METRICS=off` turns them off. */
  metrics: boolean;
  /** How long a move of a sandbox to another Incus member may take before it is given up (SVC_MOVE_DEADLINE). */
  moveDeadlineMs: number;
}

const MB = 1024 * 1024;

/** An Incus daemon (its unix socket) or cluster (its members' HTTPS addresses, with certificates): docs/incus.md. */
export interface IncusConfig {
  /** SVC_INCUS_URLS: https://member:8443,… ; empty: the unix socket. */
  urls: string[];
  /** SVC_INCUS_UNIX_SOCKET (/var/lib/incus/unix.socket). */
  unixSocket: string;
  /** PEM files of the client certificate the cluster trusts, its key, and the cluster's certificate (pinned). */
  clientCertFile: string | undefined;
  clientKeyFile: string | undefined;
  serverCertFile: string | undefined;
  /** SVC_INCUS_ADDRESS_POOL: the sandboxes' routed addresses (100.73.0.0/16, as scripts/incus-host.sh sets up). */
  addressPool: string;
  /** SVC_INCUS_NIC_PARENT: the members' link on which proxy ARP announces each address (a cluster's shared network). */
  nicParent: string | undefined;
}

export interface OidcConfig {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** The button says "Sign in with <name>". */
  name: string;
  scopes: string;
  /** Email domains that may sign in (empty: any). */
  allowedDomains: string[];
  /** Groups (in `groupsClaim`) that may sign in (empty: any). */
  allowedGroups: string[];
  groupsClaim: string;
  /** A first sign-in creates the user. */
  createUsers: boolean;
  /** `claim=value` or `claim`: who is an admin, set at every sign-in; empty: the flag is left to admins. */
  adminClaim: string | undefined;
}

function list(raw: string | undefined): string[] {
  return (raw ?? '').split(/[\s,]+/).map((v) => v.trim().toLowerCase()).filter(Boolean);
}

function oidcConfig(env: NodeJS.ProcessEnv): OidcConfig | undefined {
  const issuer = env.SVC_OIDC_ISSUER;
  if (!issuer) return undefined;
  if (!/^https?:\/\/\S+$/.test(issuer)) throw new Error(`SVC_OIDC_ISSUER must be the issuer's URL (https://…), got "${issuer}"`);
  if (!env.SVC_OIDC_CLIENT_ID || !env.SVC_OIDC_CLIENT_SECRET) throw new Error('SVC_OIDC_ISSUER needs SVC_OIDC_CLIENT_ID and SVC_OIDC_CLIENT_SECRET');
  return {
    issuer,
    clientId: env.SVC_OIDC_CLIENT_ID,
    clientSecret: env.SVC_OIDC_CLIENT_SECRET,
    name: env.SVC_OIDC_NAME || 'single sign-on',
    scopes: env.SVC_OIDC_SCOPES || 'openid email profile',
    allowedDomains: list(env.SVC_OIDC_ALLOWED_DOMAINS),
    allowedGroups: (env.SVC_OIDC_ALLOWED_GROUPS ?? '').split(',').map((g) => g.trim()).filter(Boolean),
    groupsClaim: env.SVC_OIDC_GROUPS_CLAIM || 'groups',
    createUsers: onOff(env, 'SVC_OIDC_CREATE_USERS', true),
    adminClaim: env.SVC_OIDC_ADMIN_CLAIM || undefined,
  };
}

/**
 * How sandbox containers are isolated from the host:
 * - `userns` (default): on the service's own engine with --userns-remap; root inside is uid 100000+ outside.
 * - `sysbox-runc`: Sysbox, where it is installed; it isolates nested dockerd itself.
 * - `unisolated`: on the main engine with every capability; root inside is root on the host. Only for
 *   development on a machine of one's own, and only when named.
 */
export type SandboxRuntimeMode = 'userns' | 'sysbox-runc' | 'unisolated';

/**
 * Who owns the public TLS port (docs/data-plane.md): `haproxy` (the default, HAProxy moving the bytes)
 * or `node`, the edge alone: kept as the reference the tests compare HAProxy against, not as a
 * second production path. Read here only, for the service and the test harness alike.
 */
export function dataPlaneMode(raw: string | undefined): 'node' | 'haproxy' {
  if (raw === undefined || raw === '' || raw === 'haproxy') return 'haproxy';
  if (raw === 'node') return 'node';
  throw new Error(`SVC_DATA_PLANE must be haproxy (the default: HAProxy owns the public port) or node (the Node edge alone, the reference the tests compare against, not for production), got "${raw}"`);
}

function runtimeMode(raw: string | undefined): SandboxRuntimeMode {
  if (!raw) return 'userns';
  if (raw === 'userns' || raw === 'sysbox-runc' || raw === 'unisolated') return raw;
  if (raw === 'default') {
    throw new Error('SVC_SANDBOX_RUNTIME=default is gone: sandboxes run in a user namespace now (leave it unset); ' +
      'name "unisolated" to get the old mode, where root in a sandbox is root on the host');
  }
  throw new Error(`SVC_SANDBOX_RUNTIME must be userns, sysbox-runc or unisolated, got "${raw}"`);
}

function runtimeKind(raw: string | undefined): 'docker' | 'incus' {
  if (!raw || raw === 'docker') return 'docker';
  if (raw === 'incus') return 'incus';
  throw new Error(`SVC_RUNTIME must be docker (the default) or incus, got "${raw}"`);
}

function incusConfig(env: NodeJS.ProcessEnv): IncusConfig {
  const urls = (env.SVC_INCUS_URLS ?? '').split(',').map((u) => u.trim()).filter(Boolean);
  for (const u of urls) if (!/^https:\/\/\S+$/.test(u)) throw new Error(`SVC_INCUS_URLS must list https:// addresses of Incus members, got "${u}"`);
  const file = (name: string) => (env[name] ? path.resolve(env[name]) : undefined);
  const cfg: IncusConfig = {
    urls,
    unixSocket: env.SVC_INCUS_UNIX_SOCKET || '/var/lib/incus/unix.socket',
    clientCertFile: file('SVC_INCUS_CLIENT_CERT'),
    clientKeyFile: file('SVC_INCUS_CLIENT_KEY'),
    serverCertFile: file('SVC_INCUS_SERVER_CERT'),
    addressPool: ipv4Networks(env, 'SVC_INCUS_ADDRESS_POOL', ['100.73.0.0/16'])[0] ?? '',
    nicParent: env.SVC_INCUS_NIC_PARENT || undefined,
  };
  if (!cfg.addressPool) throw new Error('SVC_INCUS_ADDRESS_POOL must be one IPv4 network (100.73.0.0/16)');
  if (urls.length > 0 && !(cfg.clientCertFile && cfg.clientKeyFile && cfg.serverCertFile)) {
    throw new Error('SVC_INCUS_URLS needs SVC_INCUS_CLIENT_CERT, SVC_INCUS_CLIENT_KEY and SVC_INCUS_SERVER_CERT (eval "$(scripts/test-cluster.sh env)" sets them for the test cluster)');
  }
  return cfg;
}

function positive(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return n;
}

/** A duration as the API takes them (30s, 45m, 2h), never "off". */
function duration(env: NodeJS.ProcessEnv, name: string, fallback: string): number {
  const raw = env[name] || fallback;
  const ms = finiteDuration(raw);
  if (ms === undefined) throw new Error(`${name} must be a duration such as 90s, 30m or 2h, got "${raw}"`);
  return ms;
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return n;
}

/** RFC 1918 and the shared address space (RFC 6598): where a data centre's own machines are. */
export const PRIVATE_NETWORKS = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10'];

/** A comma-separated list of IPv4 CIDRs, `none` for none. */
function ipv4Networks(env: NodeJS.ProcessEnv, name: string, fallback: string[]): string[] {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'none') return [];
  const list = raw.split(/[\s,]+/).filter(Boolean);
  for (const cidr of list) {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(cidr);
    if (!m || !net.isIPv4(m[1]!) || Number(m[2]) > 32) throw new Error(`${name} must list IPv4 networks (10.0.0.0/8,…) or be none, got "${cidr}"`);
  }
  return list;
}

function onOff(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'on') return true;
  if (raw === 'off') return false;
  throw new Error(`${name} must be on or off, got "${raw}"`);
}

/**
 * The Redis URL kept by scripts/redis-acl.sh (`SVC_REDIS_URL_FILE`, default /etc/svc/redis.url) when
 * setup started Redis with an ACL user; undefined when there is no such file (a Redis without password).
 */
function redisUrlFromFile(file: string): string | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`cannot read the Redis URL file ${file} (SVC_REDIS_URL_FILE): ${(err as Error).message}; run as its owner or set REDIS_URL`);
  }
  if (!/^rediss?:\/\/\S+$/.test(text)) throw new Error(`the Redis URL file ${file} (SVC_REDIS_URL_FILE) holds no redis:// URL; run "npm run setup" again or set REDIS_URL`);
  return text;
}

/** The host's own nameservers, less loopback ones (which mean nothing inside a container). */
function hostNameservers(): string {
  try {
    return [...fs.readFileSync('/etc/resolv.conf', 'utf8').matchAll(/^nameserver\s+(\S+)/gm)]
      .map((m) => m[1]!)
      .filter((ns) => !ns.startsWith('127.') && ns !== '::1')
      .join(',');
  } catch {
    return '';
  }
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const dataDir = path.resolve(env.SVC_DATA_DIR || './data');
  return {
    domain: env.SVC_DOMAIN || 'localhost',
    httpsPort: int(env, 'SVC_HTTPS_PORT', 443),
    httpPort: int(env, 'SVC_HTTP_PORT', 80),
    dataDir,
    archiveDir: path.resolve(env.SVC_ARCHIVE_DIR || path.join(dataDir, 'archive')),
    redisUrl: env.REDIS_URL || redisUrlFromFile(env.SVC_REDIS_URL_FILE || '/etc/svc/redis.url') || 'redis://127.0.0.1:6379',
    storeUrl: env.SVC_STORE_URL || `sqlite://${path.join(dataDir, 'svc.sqlite')}`,
    storeTable: env.SVC_STORE_TABLE || 'svc_store',
    secretKeyFile: path.resolve(env.SVC_SECRET_KEY_FILE || '/etc/svc/secret.key'),
    dockerHost: env.DOCKER_HOST || undefined,
    tlsCertFile: env.SVC_TLS_CERT || undefined,
    tlsKeyFile: env.SVC_TLS_KEY || undefined,
    filesMaxUpload: int(env, 'FILES_MAX_UPLOAD', 100 * MB),
    sandboxImage: env.SVC_SANDBOX_IMAGE || 'svc-sandbox:latest',
    managerImage: env.SVC_MANAGER_IMAGE || 'svc-manager:latest',
    sandboxRuntime: runtimeMode(env.SVC_SANDBOX_RUNTIME),
    runtime: runtimeKind(env.SVC_RUNTIME),
    incus: runtimeKind(env.SVC_RUNTIME) === 'incus' ? incusConfig(env) : undefined,
    sandboxDockerHost: env.SVC_SANDBOX_DOCKER_HOST || 'unix:///run/svc-sandbox-docker.sock',
    sandboxAddressPool: env.SVC_SANDBOX_ADDRESS_POOL || '10.213.0.0/16',
    sandboxMemoryMb: int(env, 'SVC_SANDBOX_MEMORY_MB', 2048),
    sandboxCpus: positive(env, 'SVC_SANDBOX_CPUS', 1.5),
    sandboxPids: int(env, 'SVC_SANDBOX_PIDS', 4096),
    redisPrefix: env.SVC_REDIS_PREFIX || 'svc',
    wakesPerHour: int(env, 'SVC_WAKES_PER_HOUR', 60),
    quotaMaxSandboxes: int(env, 'SVC_QUOTA_MAX_SANDBOXES', 20),
    quotaMaxRunning: int(env, 'SVC_QUOTA_MAX_RUNNING', 5),
    overcommitMemory: positive(env, 'SVC_OVERCOMMIT_MEMORY', 1.5),
    overcommitCpus: positive(env, 'SVC_OVERCOMMIT_CPUS', 16),
    wakeHoldMs: int(env, 'SVC_WAKE_HOLD_MS', 5_000),
    dataPlane: dataPlaneMode(env.SVC_DATA_PLANE),
    auditRetentionDays: int(env, 'SVC_AUDIT_RETENTION_DAYS', 365),
    oidc: oidcConfig(env),
    passwordSignIn: onOff(env, 'SVC_PASSWORD_SIGN_IN', true),
    sandboxDns: (env.SVC_SANDBOX_DNS ?? hostNameservers()).split(/[\s,]+/).filter(Boolean),
    sandboxPrivateNetworks: ipv4Networks(env, 'SVC_SANDBOX_PRIVATE_NETWORKS', PRIVATE_NETWORKS),
    sseHeartbeatMs: int(env, 'SVC_SSE_HEARTBEAT_MS', 15_000),
    apiPort: int(env, 'SVC_API_PORT', 8080),
    registryUpstream: env.SVC_REGISTRY_UPSTREAM || undefined,
    scanRulesFile: env.SVC_SCAN_RULES ? path.resolve(env.SVC_SCAN_RULES) : undefined,
    scanConcurrency: int(env, 'SVC_SCAN_CONCURRENCY', 2),
    metrics: onOff(env, 'SVC_METRICS', true),
    moveDeadlineMs: duration(env, 'SVC_MOVE_DEADLINE', '1h'),
  };
}
