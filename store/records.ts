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

