/**
 * The sandbox as the API shows it (spec 2.1): types only, with no imports, so that the web UI's own
 * build (ui/, Vite, tsc -p ui) reads the same definitions by a type-only import as the API does.
 */

/** What an engine that answers says of a sandbox (spec 2.1): `exited` is asleep, `deep_sleep` has no containers at all. */
export type EngineStatus = 'running' | 'exited' | 'deep_sleep';

/**
 * The status users see: spec 2.1's values, plus `unavailable` (issue 20, an extension): the engine
 * that holds the sandbox does not answer, so nothing is known of it now; it is not gone, and it
 * comes back in its real state when that engine answers. A healthy host never shows it.
 */
export type SandboxStatus = EngineStatus | 'unavailable';

export interface EngineAccess {
  host: string;
  port: number;
  /** Ready to paste: `tcp://<host>:<port>`. */
  docker_host: string;
  state: 'ready' | 'needs-certs';
}

/** A row of GET /sandboxes. */
export interface SandboxSummary {
  name: string;
  status: SandboxStatus;
  template: string;
  created_at: string;
  idle_timeout: string;
  deep_sleep_after: string;
  stops_at: string | null;
  deep_sleep_at: string | null;
  engine_access: EngineAccess;
  hint?: string;
  tunnel_urls: string[];
}

/** The sandbox record of spec 2.1. */
export interface SandboxView extends SandboxSummary {
  owner: string;
  ca_cert?: string;
  client_cert?: string;
  client_key?: string;
  /** `visibility`: its `tunnel.visibility` label when not public (docs/apps-and-edge.md, private app addresses). */
  apps: Array<{ url: string; answers: boolean; visibility?: 'authenticated' | 'owner' }>;
  extras: Record<string, string>;
}
