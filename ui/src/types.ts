import type { SandboxStatus, SandboxSummary, SandboxView } from '../../core/sandbox-summary.ts';

/** The API's own definitions (core/sandbox-summary.ts), read by a type-only import that the build erases. */
export type { SandboxSummary };
/** `unavailable`: the host that holds the sandbox does not answer (issue 20); it shows its real status again once it does. */
export type Status = SandboxStatus;
/** One sandbox as GET /api/sandboxes/:name answers (the certificates only where the caller may have them). */
export type Sandbox = SandboxView;

export interface User { id: string; name: string; admin: boolean; created_at: string }

export interface Quotas { max_sandboxes: number; max_running: number; memory_mb: number; cpus: number; wakes_per_hour: number }
export interface AdminUser extends User {
  disabled_at?: string;
  last_sign_in_at?: string;
  quotas: Quotas;
  own_quotas: Array<keyof Quotas>;
  usage: { sandboxes: number; running: number };
}
export interface AdminSandbox {
  name: string; owner: string; status: Status; created_at: string; memory_mb: number; cpus: number; idle_timeout: string;
  stops_at: string | null; last_activity_at: string | null;
  /** The engine host that runs it; null if it did not answer in time. */
  host: string | null;
  /** Memory in use now, MB; null when not running or not answered in time. */
  memory_now_mb: number | null;
}
export interface AuditRow { id: string; at: string; action: string; outcome: string; source: string; actor_id?: string; actor_name?: string; token_id?: string; sandbox?: string; target?: string; detail?: string }
export interface Me extends User { quotas: Quotas; usage: { sandboxes: number; running: number; wakes_this_hour: number } }

export interface Token { id: string; name?: string; sandbox?: string; created_at: string; revoked_at?: string; last_used_at?: string }
export interface SshKey { id: string; key: string; fingerprint: string; created_at: string }
/** A secret as GET /me/secrets shows it: never its value. */
export interface Secret { name: string; scope: 'all' | string[]; created_at: string; updated_at: string }
export interface FileEntry { name: string; type: 'dir' | 'file' | 'link' | 'other'; size: number; mtime: string }
export interface Volume { name: string; path: string; project?: string | null; containers: Array<{ name: string; service?: string | null; running: boolean; mount: string }> }

export interface RegistryReport {
  sandbox: string;
  images: Array<{
    name: string;
    visibility: 'public' | 'private';
    reason: string;
    versions: Array<{ digest: string; tags: string[]; pushed_at: string; scan: { state: string; reason?: string }; findings: Array<{ path: string; rule: string; line?: number; fingerprint?: string; vendored?: boolean }> }>;
  }>;
}
