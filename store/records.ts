/** Records kept in the store. Field names in snake_case are the ones the API shows unchanged. */

export interface UserRecord {
  id: string;
  name: string;
  /** scrypt hash `scrypt$<salt b64>$<hash b64>`; never the password. */
  password_hash: string;
  admin: boolean;
  created_at: string;
  ssh_keys: SshKeyRecord[];
  /** The user's own quotas; absent ones take the operator's defaults (accounts/quotas.ts). */
  quotas?: Partial<QuotaValues>;
  /** Set while the account is disabled: its tokens and sessions are refused, its sandboxes asleep. */
  disabled_at?: string;
  last_sign_in_at?: string;
  /** `<issuer>#<sub>` of a user who signs in through OpenID Connect. */
  oidc_subject?: string;
  email?: string;
}

/** Per-user limits (issue 24). Memory and CPUs are per sandbox. */
export interface QuotaValues {
  max_sandboxes: number;
  max_running: number;
  memory_mb: number;
  cpus: number;
  wakes_per_hour: number;
}

export interface SshKeyRecord {
  id: string;
  /** One authorized_keys line (public key). */
  key: string;
  fingerprint: string;
  created_at: string;
}

export interface TokenRecord {
  id: string;
  user_id: string;
  /** sha256 of the token value, hex. The value itself is shown once and never stored. */
  hash: string;
  /** Set for a token limited to one sandbox. */
  sandbox?: string;
  name?: string;
  created_at: string;
  revoked_at?: string;
}

/** Engine certificates of one sandbox (PEM). The CA key is not kept: new certificates mean a new CA. */
export interface EngineCerts {
  ca_cert: string;
  client_cert: string;
  client_key: string;
  server_cert: string;
  server_key: string;
}

export interface SandboxRecord {
  name: string;
  owner_id: string;
  template: 'default' | 'manager';
  /** Duration string as given (`30m`, `off` stored as `87600h`). */
  idle_timeout: string;
  deep_sleep_after: string;
  created_at: string;
  /** The sandbox container's limits, chosen at create (absent: made before quotas, the operator's defaults). */
  memory_mb?: number;
  cpus?: number;
  /** Absent for a sandbox created before engine access existed: engine_access.state is `needs-certs`. */
  certs?: EngineCerts;
  /** Password of the management tool's `admin` (template `manager`), shown as extras.manager_password. */
  manager_password?: string;
  archived_at?: string;
  /** Where the archive of an archived sandbox lies: `archive/<name>-<time>`, `archive/` standing for SVC_ARCHIVE_DIR (lifecycle/archive.ts). */
  archive_path?: string;
}

/** A runner host (issue 20, docs/scale-out.md): a Docker engine of the service's own on another machine. */
export interface HostRecord {
  name: string;
  /** Where its engine listens (mutual TLS): an address on the private network; absent for the service's own machine. */
  address?: string;
  port?: number;
  /** The name in the host's server certificate, checked on every connection (the address is not). */
  server_name?: string;
  /** The service's client certificate and key for this host's engine (the key sealed in the database). */
  client_cert?: string;
  client_key?: string;
  /** The service CA that signed both ends. */
  ca_cert?: string;
  /**
   * The host shares this machine's files (a test host in a network namespace): its sandboxes get the
   * service's transfer folder, as on the service's own engine.
   */
  same_machine?: boolean;
  /** Sandbox networks its engine's pool holds (absent: what its engine reports of its pool). */
  networks?: number;
  /**
   * Its engine's sandbox address pool (a CIDR, scripts/runner.sh --pool): this machine's sandboxes are
   * kept off it (egress-firewall.ts), and an address its engine reports outside it is not used.
   */
  pool?: string;
  /**
   * The nameservers its sandboxes' inner containers are given (scripts/runner.sh prints them: the
   * runner's own, which its egress rules let through); absent: the service's SVC_SANDBOX_DNS.
   */
  dns?: string[];
  /** Set while no new sandbox goes there (`svc hosts drain`). */
  drained_at?: string;
  created_at: string;
}

/**
 * A sandbox's move from one host to another (lifecycle/move.ts, docs/scale-out.md): while `copying`
 * the sandbox is taken down on `from` and cannot start anywhere; the placement switching to `to` is
 * the commit. `cleaning`: the copy on `leftover` (the source after a move, the target after a roll-back)
 * is to be removed; the sandbox runs where its placement says meanwhile.
 */
export interface MoveRecord {
  sandbox: string;
  from: string;
  to: string;
  phase: 'copying' | 'cleaning';
  leftover?: string;
  /** The process doing the copy, and when it last said it is alive: another takes over once it is stale. */
  owner: string;
  heartbeat_at: string;
  started_at: string;
  /** Why a move was rolled back (the target did not answer, the copy differed): for the operator. */
  note?: string;
  /** The deadline the move was started with (svc hosts move --deadline), which a process taking it over keeps. */
  deadline_ms?: number;
  /** What the copy writes on `to` (the source's volumes, du): other moves to `to` count it as taken. */
  bytes?: number;
}
