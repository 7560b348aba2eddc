import type { Admission } from '../accounts/index.ts';
import type { Logger } from '../core/logger.ts';
import type { LifecycleQueue } from '../queue/index.ts';
import type { Store, SandboxRecord } from '../store/index.ts';
import type { AppDirectory } from './apps/app-directory.ts';
import { RuntimeUnreachable, type RuntimeState, type SandboxRuntime } from './runtime/sandbox-runtime.ts';
import type { IdleSessions } from './sessions.ts';
import { deepSleepAt } from './view.ts';

/**
 * How a sandbox's failure in a pass is logged: its engine not answering (RuntimeUnreachable: a lost
 * cluster member, shown `unavailable` meanwhile) is expected and retried at the next pass, a warning;
 * anything else is an error.
 */
const levelOf = (err: unknown) => (err instanceof RuntimeUnreachable ? 'warn' : 'error');

/** A timer this late was lost or is stuck with a dead worker: reconcile runs it itself. */
const TIMER_OVERDUE_MS = 5_000;

/** The transitions of the state machine (Lifecycle) that a reconcile pass runs. */
export interface ReconcileTransitions {
  /** One transition of a sandbox at a time, across processes. */
  exclusive<T>(name: string, work: () => Promise<T>): Promise<T>;
  /** The engine's state; RuntimeUnreachable when it cannot be asked (that sandbox is left as it is). */
  state(name: string): Promise<RuntimeState>;
  openSession(record: SandboxRecord): Promise<unknown>;
  onIdleCheck(name: string, at: number): Promise<void>;
  onDeepSleep(name: string, at: number): Promise<void>;
  finishArchive(record: SandboxRecord): Promise<void>;
  /** Writes the owner's SSH keys into a sandbox a key change could not reach (SshKeyMarks). */
  pushMarkedSshKeys(record: SandboxRecord, running: boolean): Promise<void>;
  /** Puts the sandbox to sleep if it runs (checked under its lease). */
  sleepIfRunning(name: string, reason: string): Promise<void>;
}

type ReconcileParts = { runtime: SandboxRuntime; store: Store; sessions: IdleSessions; queue: LifecycleQueue; apps: AppDirectory; admission: Admission; log: Logger };

/**
 * Compares what runs with sessions and timers (spec 3, rules 3 and 4): a sandbox started outside
 * the service gets an idle session; one stopped outside loses its session and gets its deep-sleep
 * timer; an archive a killed process left half done is finished; a sandbox an SSH key change could
 * not reach gets its owner's keys; a running sandbox of a disabled owner goes to sleep (the news of
 * the disabling, lifecycle-news.ts, may have been missed); the admission's kept count of what runs
 * becomes what the engines list. Idempotent. An engine that cannot
 * be asked fails the pass (or that sandbox) and changes nothing: its sandboxes are never taken for
 * stopped or gone.
 */
export async function reconcile(parts: ReconcileParts, machine: ReconcileTransitions): Promise<void> {
  // pub/sub is best-effort: every pass starts from the whole app table as Redis holds it
  await parts.apps.reload();
  const archived = new Set<string>();
  for (const name of await parts.runtime.withVolumes()) {
    const record = await parts.store.sandboxes.get(name);
    if (record?.archived_at) archived.add(name);
  }
  const disabled = new Set((await parts.store.users.list()).filter((u) => u.disabled_at).map((u) => u.id));
  const listedAt = Date.now();
  const runs: SandboxRecord[] = [];
  for (const { name, running } of await parts.runtime.list()) {
    const record = await parts.store.sandboxes.get(name);
    if (record?.archived_at) archived.add(name);
    if (!record || record.archived_at) continue;
    if (running && disabled.has(record.owner_id)) {
      parts.log.info({ sandbox: name }, 'reconcile: the owner is disabled; putting the sandbox to sleep');
      await machine.sleepIfRunning(name, 'owner disabled').catch((err) => parts.log[levelOf(err)]({ sandbox: name, err }, 'reconcile: a disabled owner\'s sandbox did not go to sleep; next pass tries again'));
      continue;
    }
    if (running) runs.push(record);
    await reconcileOne(parts, machine, record, running).catch((err) => parts.log[levelOf(err)]({ sandbox: name, err }, 'reconcile: this sandbox failed; the others go on'));
  }
  await parts.admission.recount(runs, listedAt);
  for (const name of archived) {
    parts.log.info({ sandbox: name }, 'finishing the archive of a sandbox (the service stopped during its DELETE)');
    await machine.exclusive(name, async () => {
      const record = await parts.store.sandboxes.get(name);
      if (record?.archived_at) await machine.finishArchive(record);
    }).catch((err) => parts.log[levelOf(err)]({ sandbox: name, err }, 'reconcile: finishing the archive failed; next pass tries again'));
  }
}

/**
 * One sandbox of a reconcile pass. A timer overdue by TIMER_OVERDUE_MS is run here: its job was
 * lost with Redis, or is held by a worker that was killed (BullMQ hands it on only after its lock
 * expires, and a new job with the same id is a no-op meanwhile).
 */
async function reconcileOne(
  parts: ReconcileParts,
  machine: ReconcileTransitions,
  record: SandboxRecord,
  running: boolean,
): Promise<void> {
  const { runtime, sessions, apps } = parts;
  const name = record.name;
  const session = await sessions.get(name);
  if (running) await runtime.settle(name);
  // its own failure: the mark stays for the next pass, and the session and timers below go on
  await machine.pushMarkedSshKeys(record, running).catch((err) => parts.log.warn({ sandbox: name, err }, 'reconcile: SSH keys not written; next pass tries again'));
  if (running && !session) {
    parts.log.info({ sandbox: name }, 'sandbox running without an idle session (started outside the service); opening one');
    await machine.openSession(record);
  } else if (running && session && session.timerAt < Date.now() - TIMER_OVERDUE_MS) {
    await machine.onIdleCheck(name, session.timerAt);
  }
  if (running && record.certs && !apps.isWatching(name)) {
    // under the sandbox's lease: a sleep under way finishes first, and one that follows finds the watcher
    await machine.exclusive(name, async () => {
      const { status, address } = await machine.state(name);
      if (status === 'running' && address && !apps.isWatching(name)) await apps.watch(name, runtime.innerEngine(name, address, record.certs!));
    });
  } else if (!running) {
    apps.unwatch(name);
    if (session) await sessions.close(name);
    const due = deepSleepAt(record, await machine.state(name));
    if (due !== null && due < Date.now() - TIMER_OVERDUE_MS) await machine.onDeepSleep(name, due);
    else if (due !== null) await parts.queue.scheduleDeepSleep(name, due);
  }
}
