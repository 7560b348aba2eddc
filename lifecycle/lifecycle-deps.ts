import type { Admission } from '../accounts/index.ts';
import type { Config } from '../core/config.ts';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import type { RedisLeases } from '../core/redis-lease.ts';
import type { LifecycleQueue } from '../queue/index.ts';
import type { Store } from '../store/index.ts';
import type { AppDirectory } from './apps/app-directory.ts';
import type { RuntimeState, SandboxRuntime } from './runtime/sandbox-runtime.ts';
import type { IdleSessions } from './sessions.ts';
import type { SshKeyMarks } from './ssh-key-marks.ts';

/** What the lifecycle controller (controller.ts) is given and given to do. */
export interface CreateSandboxInput {
  name?: string;
  template?: 'default' | 'manager';
  idle_timeout?: string;
  deep_sleep_after?: string;
  /** At most the owner's quota; the quota when absent. */
  memory_mb?: number;
  cpus?: number;
}

export interface SettingsPatch {
  idle_timeout?: string;
  deep_sleep_after?: string;
}

export interface LifecycleDeps {
  config: Config;
  store: Store;
  runtime: SandboxRuntime;
  sessions: IdleSessions;
  /** Sandboxes whose SSH keys a change could not reach: reconcile writes them. */
  sshKeyMarks: SshKeyMarks;
  /** Sandbox leases across processes (`<prefix>:lease:<sandbox>`). */
  leases: RedisLeases;
  queue: LifecycleQueue;
  apps: AppDirectory;
  logger: Logger;
  /** Quotas and the host guard: checked before a record or container is made. */
  admission: Admission;
  metrics?: ServiceMetrics;
}

/** A wake under way, shared by every caller while it runs. */
export interface Wake {
  /** Settles once the sandbox's container runs at its address (its apps and engine may still be starting); rejects when the wake failed. */
  running: Promise<RuntimeState>;
  /** Settles once its engine answers too: the whole wake. */
  done: Promise<RuntimeState>;
}
