import type { Logger } from '../core/logger.ts';
import type { LifecycleQueue } from '../queue/index.ts';
import type { SandboxRecord, Store } from '../store/index.ts';
import { parseDuration } from './durations.ts';
import type { RuntimeState } from './runtime/sandbox-runtime.ts';
import type { IdleSessions } from './sessions.ts';

const MAX_RENEWAL_INTERVAL_MS = 60_000;

/** The idle countdown of each sandbox (spec 3, rule 2): opened by a wake, renewed by activity, throttled here. */
export class SessionClock {
  /** Last renewal per sandbox and its idle timeout, for activity throttling. */
  private readonly renewals = new Map<string, { at: number; idleMs: number }>();

  constructor(
    private readonly parts: {
      store: Store;
      sessions: IdleSessions;
      queue: LifecycleQueue;
      log: Logger;
      exclusive: <T>(name: string, work: () => Promise<T>) => Promise<T>;
      status: (name: string) => Promise<RuntimeState>;
      /** True while a wake of the sandbox runs: it opens the session itself. */
      waking: (name: string) => boolean;
    },
  ) {}

  /** Opens or extends the idle session to now + idle_timeout, and makes sure a timer fires by then. */
  async open(record: SandboxRecord): Promise<number> {
    const idleMs = parseDuration(record.idle_timeout) ?? parseDuration('87600h')!;
    const now = Date.now();
    const expiresAt = now + idleMs;
    const existing = await this.parts.sessions.get(record.name);
    let timerAt = existing?.timerAt ?? 0;
    if (timerAt <= now || expiresAt < timerAt) {
      timerAt = expiresAt;
      await this.parts.queue.scheduleIdleCheck(record.name, timerAt);
    }
    await this.parts.sessions.set(record.name, { expiresAt, timerAt });
    this.renewals.set(record.name, { at: now, idleMs });
    return expiresAt;
  }

  /** The sandbox stopped here (sleep, archive, a move away): its next activity renews at once. */
  forget(name: string): void {
    this.renewals.delete(name);
  }

  /**
   * Activity from the edge or engine traffic (spec 3, rule 2). Cheap and synchronous: it renews
   * the session at most once per min(60 s, idle_timeout / 4), so steady traffic keeps even a
   * short-timeout sandbox awake. Activity never wakes a sandbox.
   */
  recordActivity(name: string): void {
    if (this.parts.waking(name)) return; // the wake opens the session itself, once its container runs and again at its end
    const now = Date.now();
    const last = this.renewals.get(name);
    const interval = last ? Math.min(MAX_RENEWAL_INTERVAL_MS, last.idleMs / 4) : 0;
    if (last && now - last.at < interval) return;
    this.renewals.set(name, { at: now, idleMs: last?.idleMs ?? MAX_RENEWAL_INTERVAL_MS * 4 });
    void this.renew(name).catch((err) => this.parts.log.warn({ sandbox: name, err }, 'session renewal failed'));
  }

  private async renew(name: string): Promise<void> {
    const record = await this.parts.store.sandboxes.get(name);
    if (!record || record.archived_at) return;
    if (await this.parts.sessions.get(name)) {
      await this.open(record);
      return;
    }
    // Traffic to a running sandbox without a session (its wake's process was killed, Redis lost
    // it): open one now rather than at the next reconcile, under the lock so a sleep under way
    // finishes first (traffic never wakes a sandbox).
    await this.parts.exclusive(name, async () => {
      if (!(await this.parts.sessions.get(name)) && (await this.parts.status(name)).status === 'running') await this.open(record);
    });
  }
}
