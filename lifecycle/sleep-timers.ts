import type { Admission } from '../accounts/index.ts';
import type { Logger } from '../core/logger.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import type { LifecycleQueue } from '../queue/index.ts';
import type { SandboxRecord, Store } from '../store/index.ts';
import type { RuntimeState, SandboxRuntime } from './runtime/sandbox-runtime.ts';
import type { IdleSessions } from './sessions.ts';
import { deepSleepAt } from './view.ts';

/** The two timers of spec 3: idle timeout → asleep, deep_sleep_after → deep sleep. Queue jobs (worker.ts) call in here. */
export class SleepTimers {
  constructor(
    private readonly parts: {
      store: Store;
      runtime: SandboxRuntime;
      sessions: IdleSessions;
      queue: LifecycleQueue;
      admission: Admission;
      metrics?: ServiceMetrics;
      log: Logger;
      exclusive: <T>(name: string, work: () => Promise<T>) => Promise<T>;
      status: (name: string) => Promise<RuntimeState>;
      /** Puts the sandbox to sleep; the caller holds its lease. */
      sleepHeld: (name: string, reason: string) => Promise<void>;
    },
  ) {}

  /** Arms the deep-sleep timer of a sandbox in `state`, if it has one (deepSleepAt). */
  async scheduleDeepSleep(record: SandboxRecord, state: RuntimeState): Promise<void> {
    const at = deepSleepAt(record, state);
    if (at !== null) await this.parts.queue.scheduleDeepSleep(record.name, at);
  }

  /**
   * Idle-check timer fired: sleep if the session really ran out, else re-arm for the new expiry.
   * Checked again under the lock: a wake or traffic holding it may have renewed the session.
   */
  async onIdleCheck(name: string, at: number): Promise<void> {
    const { sessions, queue } = this.parts;
    const due = async (): Promise<boolean> => {
      const session = await sessions.get(name);
      if (!session || session.timerAt !== at) return false; // closed, or superseded by an earlier timer
      if (session.expiresAt <= Date.now() + 250) return true;
      await sessions.set(name, { ...session, timerAt: session.expiresAt });
      await queue.scheduleIdleCheck(name, session.expiresAt);
      return false;
    };
    if (!(await due())) return;
    await this.parts.exclusive(name, async () => {
      if (await due()) await this.parts.sleepHeld(name, 'idle timeout');
    });
  }

  /** Deep-sleep timer fired: take the container and network down if it is still asleep and due. */
  async onDeepSleep(name: string, at: number): Promise<void> {
    await this.parts.exclusive(name, async () => {
      const record = await this.parts.store.sandboxes.get(name);
      if (!record || record.archived_at) return;
      const state = await this.parts.status(name);
      const due = deepSleepAt(record, state);
      if (due === null) return; // running again, already down, or deep sleep turned off
      if (due > Date.now() + 250) {
        if (due !== at) await this.parts.queue.scheduleDeepSleep(name, due);
        return;
      }
      this.parts.log.info({ sandbox: name }, 'sandbox going into deep sleep');
      await this.parts.runtime.takeDown(name);
      await this.parts.admission.stopped(name);
      this.parts.metrics?.slept('deep_sleep');
    });
  }
}
