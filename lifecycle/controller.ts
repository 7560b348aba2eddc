import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { errors } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { notRunning } from '../core/sandbox-status.ts';
import type { SandboxRecord, UserRecord } from '../store/index.ts';
import { normaliseDeepSleepAfter, normaliseIdleTimeout } from './durations.ts';
import { issueEngineCerts } from './engine-certs.ts';
import { KeyedLock } from '../core/keyed-lock.ts';
import { NAME_PREFIX, sandboxName } from './names.ts';
import { observed, reachable, RuntimeUnreachable, type RuntimeState, type SandboxState } from './runtime/sandbox-runtime.ts';
import { containerSpec } from './container-spec.ts';
import { waitForInnerEngine } from './runtime/inner-engine.ts';
import { generatePassword } from '../core/passwords.ts';
import type { WakeKind } from '../core/metrics.ts';
import { engineHost, type SandboxView } from './view.ts';
import type { CreateSandboxInput, LifecycleDeps, SettingsPatch, Wake } from './lifecycle-deps.ts';
import { SleepTimers } from './sleep-timers.ts';
import { finishArchive, newArchivePath } from './archive.ts';
import { installManagerTool } from './manager-access.ts';
import { reconcile } from './reconcile.ts';
import { forkSandbox } from './fork.ts';
import { SandboxViews } from './sandbox-views.ts';
import { SessionClock } from './session-clock.ts';
import { SshKeySync } from './ssh-key-sync.ts';

export const DEFAULT_IDLE_TIMEOUT = '30m';
/** Like Daytona's auto-archive: a week asleep, then only the volumes stay. */
export const DEFAULT_DEEP_SLEEP_AFTER = '7d';
const ENGINE_READY_TIMEOUT_MS = 60_000;

export type { CreateSandboxInput, LifecycleDeps, SettingsPatch, Wake } from './lifecycle-deps.ts';

/**
 * The sandbox state machine of spec section 3. Every transition goes through here; the API,
 * the edge and the queue workers only call it. State is read from the runtime each time (never
 * cached), so a container that died or vanished behind our back is reported as it is. A runtime
 * that cannot be asked stops the transition with 503 (RuntimeUnreachable): each transition asks the
 * engine before it changes a record, and an engine lost mid-way leaves what a retry or the reconcile
 * pass finishes (a DELETE already recorded answers success; SSH keys not written are marked). An
 * unreachable sandbox is never taken for one in deep sleep (re-created) or asleep (timers).
 */
export class Lifecycle {
  private readonly lock: KeyedLock;
  private readonly wakes = new Map<string, Wake>();
  private readonly log: Logger;
  /** The API's records and lists of sandboxes. */
  readonly views: SandboxViews;
  /** Idle sessions: opened by a wake, renewed by activity (`clock.recordActivity`). */
  readonly clock: SessionClock;
  /** Owners' SSH keys in their sandboxes (`sshKeys.syncOwner` after a change). */
  readonly sshKeys: SshKeySync;
  /** The idle and deep-sleep timers the queue's jobs fire (worker.ts). */
  readonly timers: SleepTimers;

  constructor(private readonly deps: LifecycleDeps) {
    this.log = deps.logger.child({ part: 'lifecycle' });
    this.lock = new KeyedLock(deps.leases);
    this.views = new SandboxViews({ ...deps, state: (name) => this.observe(name, true) });
    const held = { log: this.log, exclusive: <T>(name: string, work: () => Promise<T>) => this.exclusive(name, work), status: (name: string) => this.status(name) };
    this.clock = new SessionClock({ ...deps, ...held, waking: (name) => this.wakes.has(name) });
    this.sshKeys = new SshKeySync({ ...deps, ...held });
    this.timers = new SleepTimers({ ...deps, ...held, sleepHeld: (name, reason) => this.sleepHeld(name, reason) });
  }

  /** One transition of a sandbox at a time: in this process (KeyedLock), then across processes (lease). */
  private exclusive<T>(name: string, work: () => Promise<T>): Promise<T> {
    return this.lock.run(name, work);
  }

  /** The record of a live (not archived) sandbox, or SVC_SANDBOX_NOT_FOUND. */
  async record(name: string): Promise<SandboxRecord> {
    const record = await this.deps.store.sandboxes.get(name);
    if (!record) throw new errors.SandboxNotFound(name);
    if (record.archived_at) throw new errors.SandboxArchived(name);
    return record;
  }

  /** `fill`: under the new sandbox's lease, before its first start (a fork's copy of its source's volumes). */
  async create(owner: UserRecord, input: CreateSandboxInput, fill?: (name: string) => Promise<void>): Promise<SandboxView> {
    const name = input.name ? sandboxName(input.name) : NAME_PREFIX + randomBytes(5).toString('hex');
    const template = input.template ?? 'default';
    this.deps.apps.checkNewName(name);
    const record: SandboxRecord = {
      name,
      owner_id: owner.id,
      template,
      ...(template === 'manager' ? { manager_password: generatePassword() } : {}),
      idle_timeout: normaliseIdleTimeout(input.idle_timeout ?? DEFAULT_IDLE_TIMEOUT),
      deep_sleep_after: normaliseDeepSleepAfter(input.deep_sleep_after ?? DEFAULT_DEEP_SLEEP_AFTER),
      created_at: new Date().toISOString(),
      ...this.deps.admission.limitsFor(owner, input),
      certs: await issueEngineCerts(name, engineHost(name, this.deps.config.domain)),
    };
    const admitted = await this.deps.admission.admitNew(owner, record, () => this.deps.store.sandboxes.insert(record));
    this.log.info({ sandbox: name, owner: owner.name }, 'creating sandbox');
    try {
      await this.exclusive(name, async () => {
        await fill?.(name);
        const state = await this.bringUp(record, owner, { status: 'deep_sleep' }, { creating: true });
        if (record.manager_password) await installManagerTool({ ...this.deps, log: this.log }, record, state);
      });
    } catch (err) {
      this.log.error({ sandbox: name, err }, 'sandbox creation failed; rolling back');
      // An engine that does not answer keeps what it has: the archived record (no archive_path) makes
      // the next reconcile pass that can ask it take the container and volumes away.
      await this.deps.runtime.takeDown(name).catch(() => undefined);
      await this.deps.runtime.removeVolumes(name).catch(() => undefined);
      await this.deps.admission.stopped(name);
      await this.deps.sessions.close(name);
      await this.deps.store.sandboxes.put({ ...record, archived_at: new Date().toISOString() });
      if (err instanceof RuntimeUnreachable) throw err; // 503, its fixed text: never the connect error
      throw new errors.SandboxFailed(name, (err as Error).message);
    } finally {
      await admitted();
    }
    return this.views.view(record);
  }

  /** A new sandbox of the source's owner, its volumes a copy of the source's (lifecycle/fork.ts). */
  fork(owner: UserRecord, source: SandboxRecord, name: string): Promise<SandboxView> {
    return forkSandbox({
      runtime: this.deps.runtime, record: (n) => this.record(n),
      exclusive: (n, work) => this.exclusive(n, work), create: (o, i, fill) => this.create(o, i, fill),
    }, owner, source, name);
  }

  /** What the runtime says of a sandbox now; 503 (RuntimeUnreachable) when it cannot be asked. For transitions. */
  async status(name: string): Promise<RuntimeState> {
    return reachable(await this.deps.runtime.inspect(name));
  }

  /**
   * The same for reads (views, the edge): `unavailable` when the engine cannot be asked, never an error.
   * `kept`: what the engine's events kept may do (runtime.read), for the API's records and lists.
   */
  async observe(name: string, kept = false): Promise<SandboxState> {
    const inspection = kept ? await this.deps.runtime.read(name) : await this.deps.runtime.inspect(name);
    if (inspection.status === 'unreachable') this.log.debug({ sandbox: name, reason: inspection.reason }, 'sandbox unavailable: its engine does not answer');
    return observed(inspection);
  }

  /**
   * A client of a running sandbox's own engine, or 409 (asleep, or engine access not enabled).
   * `timeoutMs: 0` for streams that may stay quiet.
   */
  async runningEngine(name: string, opts: { timeoutMs?: number } = {}): Promise<Docker> {
    const record = await this.record(name);
    if (!record.certs) throw new errors.EngineAccessDisabled(name, name);
    const state = await this.status(name);
    if (state.status !== 'running' || !state.address) throw notRunning(name, state.status);
    return answering(this.deps.runtime.innerEngine(name, state.address, record.certs, opts), name);
  }

  /** The sandbox's owner; SVC_SANDBOX_NOT_FOUND when the account is gone. */
  async owner(record: SandboxRecord): Promise<UserRecord> {
    const owner = await this.deps.store.users.get(record.owner_id);
    if (!owner) throw new errors.SandboxNotFound(record.name);
    return owner;
  }

  /**
   * Wakes a sandbox from asleep or deep sleep and resolves once its engine answers.
   * Concurrent callers share one wake: a hundred requests start the container once.
   */
  start(name: string): Promise<RuntimeState> {
    return this.wake(name).done;
  }

  /**
   * The wake of a sandbox, shared by every caller while it runs (a hundred requests start the
   * container once). `known`: the record and owner the caller read already (the edge, for the
   * owner's wake limit), so that a wake reads each of them once.
   */
  wake(name: string, known: { record?: SandboxRecord; owner?: UserRecord } = {}): Wake {
    const under = this.wakes.get(name);
    if (under) return under;
    let ran: (state: RuntimeState) => void = () => undefined;
    const running = new Promise<RuntimeState>((resolve) => { ran = resolve; });
    const done = this.wakeNow(name, known, (state) => ran(state)).finally(() => this.wakes.delete(name));
    const wake: Wake = { running: Promise.race([running, done]), done };
    wake.running.catch(() => undefined); // the failure is `done`'s to report
    this.wakes.set(name, wake);
    return wake;
  }

  private async wakeNow(name: string, known: { record?: SandboxRecord; owner?: UserRecord }, ran: (state: RuntimeState) => void): Promise<RuntimeState> {
    const record = known.record ?? (await this.record(name));
    const owner = known.owner ?? (await this.owner(record));
    return this.exclusive(name, async () => {
      // What the engine's events kept (the edge looked just before, as a rule), under the lease: a
      // sandbox that runs is asked again before it is trusted; one that does not is started (the
      // start answers its state), so a wake asks its engine once more at most.
      const seen = reachable(await this.deps.runtime.read(name));
      if (seen.status === 'running') return this.bringUp(record, owner, await this.status(name), { ran });
      const admitted = await this.deps.admission.admitStart(record, owner);
      try {
        return await this.bringUp(record, owner, seen, { ran });
      } finally {
        await admitted();
      }
    });
  }

  /**
   * Brings a sandbox from `state` (its engine's word, under its lease) to running with its engine
   * answering. `creating`: the first start of a new sandbox, which is not a wake. `ran`: told as
   * soon as its container runs at its address.
   */
  private async bringUp(record: SandboxRecord, owner: UserRecord, state: RuntimeState, opts: { creating?: boolean; ran?: (state: RuntimeState) => void } = {}): Promise<RuntimeState> {
    const { runtime } = this.deps;
    const began = Date.now();
    const from: WakeKind | null = state.status === 'running' ? null : state.status === 'deep_sleep' ? 'deep_sleep' : 'asleep';
    if (state.status === 'deep_sleep') await runtime.create(containerSpec(record, owner, this.deps.config));
    if (state.status !== 'running') state = await runtime.start(record.name);
    if (state.status !== 'running' || !state.address) {
      throw new Error(`the sandbox container is not running after start (exit code ${state.exitCode ?? 'unknown'})`);
    }
    await this.deps.admission.ran(record);
    opts.ran?.(state);
    // Its apps may answer before its engine does: no running sandbox is ever without a session,
    // even if this process dies in the wait below. Opened again once the engine answers, so the
    // countdown starts from a usable sandbox.
    await this.clock.open(record);
    if (record.certs) {
      const engine = runtime.innerEngine(record.name, state.address, record.certs);
      await waitForInnerEngine(engine, ENGINE_READY_TIMEOUT_MS);
      await this.deps.apps.watch(record.name, engine);
    }
    await this.clock.open(record);
    await this.sshKeys.push(record, owner);
    this.log.info({ sandbox: record.name, ms: Date.now() - began }, 'sandbox running');
    if (from && !opts.creating) this.deps.metrics?.wakeDone(from, Date.now() - began);
    return state;
  }

  /** POST keep-awake: restarts the idle countdown of a running sandbox; never wakes one. */
  async keepAwake(name: string): Promise<SandboxView> {
    const record = await this.record(name);
    const state = await this.status(name);
    if (state.status !== 'running') throw notRunning(name, state.status);
    await this.clock.open(record);
    return this.views.view(record);
  }

  /** Puts a running sandbox to sleep: the whole container stops, the deep-sleep timer starts. */
  async sleep(name: string, reason: string): Promise<void> {
    await this.exclusive(name, () => this.sleepHeld(name, reason));
  }

  /**
   * The owner's account was disabled (by whichever process: lifecycle-news.ts, or a reconcile pass):
   * each of its running sandboxes goes to sleep now. None is woken again (admission refuses a disabled owner).
   */
  async sleepOwner(ownerId: string): Promise<void> {
    for (const record of await this.deps.store.sandboxes.listByOwner(ownerId, { secrets: false })) {
      if (record.archived_at) continue;
      await this.sleepIfRunning(record.name, 'owner disabled')
        .catch((err) => this.log.warn({ sandbox: record.name, err }, 'a disabled owner\'s sandbox did not go to sleep; the next reconcile pass tries again'));
    }
  }

  private sleepIfRunning(name: string, reason: string): Promise<void> {
    return this.exclusive(name, async () => {
      if ((await this.status(name)).status === 'running') await this.sleepHeld(name, reason);
    });
  }

  private async sleepHeld(name: string, reason: string): Promise<void> {
    const record = await this.deps.store.sandboxes.get(name);
    if (!record || record.archived_at) return;
    this.log.info({ sandbox: name, reason }, 'sandbox going to sleep');
    this.deps.apps.unwatch(name);
    await this.deps.runtime.stop(name);
    await this.deps.admission.stopped(name);
    this.deps.metrics?.slept('sleep');
    await this.deps.sessions.close(name);
    this.clock.forget(name);
    await this.timers.scheduleDeepSleep(record, await this.status(name));
  }

  /** One reconcile pass (lifecycle/reconcile.ts); runs every RECONCILE_EVERY_MS. */
  async reconcile(): Promise<void> {
    await reconcile({ ...this.deps, log: this.log }, {
      exclusive: (name, work) => this.exclusive(name, work),
      state: (name) => this.status(name),
      openSession: (record) => this.clock.open(record),
      onIdleCheck: (name, at) => this.timers.onIdleCheck(name, at),
      onDeepSleep: (name, at) => this.timers.onDeepSleep(name, at),
      finishArchive: (record) => finishArchive({ ...this.deps, archiveDir: this.deps.config.archiveDir }, record),
      pushMarkedSshKeys: (record, running) => this.sshKeys.pushMarked(record, running),
      sleepIfRunning: (name, reason) => this.sleepIfRunning(name, reason),
    });
  }

  /** PATCH: validates everything before changing anything; applies both values at once. */
  async updateSettings(name: string, patch: SettingsPatch): Promise<SandboxView> {
    const idle = patch.idle_timeout === undefined ? undefined : normaliseIdleTimeout(patch.idle_timeout);
    const deep = patch.deep_sleep_after === undefined ? undefined : normaliseDeepSleepAfter(patch.deep_sleep_after);
    return this.exclusive(name, async () => {
      const current = await this.record(name);
      const record = { ...current, ...(idle && { idle_timeout: idle }), ...(deep && { deep_sleep_after: deep }) };
      const state = await this.status(name); // an engine that cannot be asked: 503 before the record changes
      await this.deps.store.sandboxes.put(record);
      if (idle && state.status === 'running') await this.clock.open(record);
      if (deep) await this.timers.scheduleDeepSleep(record, state);
      return this.views.view(record);
    });
  }

  /** Issues engine certificates for a `needs-certs` sandbox and recreates its container to use them. */
  async enableEngineAccess(name: string): Promise<SandboxView> {
    const record = await this.exclusive(name, async () => {
      const current = await this.record(name);
      if (current.certs) throw new errors.Conflict(`engine access of "${name}" is already enabled`);
      const updated = { ...current, certs: await issueEngineCerts(name, engineHost(name, this.deps.config.domain)) };
      const state = await this.status(name);
      this.deps.apps.unwatch(name);
      await this.deps.runtime.takeDown(name);
      if (state.status === 'exited') await this.deps.runtime.create(containerSpec(updated, await this.deps.store.users.get(updated.owner_id), this.deps.config));
      // Saved once the old container is gone and any new one has the certs: an engine lost before
      // leaves the record without them (a retry does it all again), never certs with a container without TLS.
      await this.deps.store.sandboxes.put(updated);
      this.log.info({ sandbox: name }, 'engine access enabled');
      return { updated, wasRunning: state.status === 'running' };
    });
    if (record.wasRunning) await this.start(name);
    return this.views.view(record.updated);
  }

  /**
   * DELETE: the sandbox stops, its configuration and persistent folders go to an archive in the
   * archive folder (SVC_ARCHIVE_DIR), and everything on the engine is removed. The name stays reserved.
   */
  async archive(name: string): Promise<{ name: string; archive: string }> {
    return this.exclusive(name, async () => {
      const current = await this.record(name);
      await this.status(name); // an engine that cannot be asked: 503 before the record changes
      const now = new Date();
      // Recorded before anything is removed: a service killed halfway finds an archived sandbox
      // with leftovers, and its reconcile finishes the archive (never a live one with lost parts).
      const record: SandboxRecord = { ...current, archived_at: now.toISOString(), archive_path: newArchivePath(name, now) };
      await this.deps.store.sandboxes.put(record);
      this.log.info({ sandbox: name, archive: record.archive_path }, 'archiving sandbox');
      await this.deps.admission.stopped(name);
      await this.deps.sessions.close(name);
      this.clock.forget(name);
      try {
        await finishArchive({ ...this.deps, archiveDir: this.deps.config.archiveDir }, record);
      } catch (err) {
        // The record says archived (a retry would be 410): lost mid-way, the engine's part is the
        // reconcile pass's, which finishes every archived sandbox that still has a container or volumes.
        if (!(err instanceof RuntimeUnreachable)) throw err;
        this.log.warn({ sandbox: name, err }, 'archive recorded; the engine stopped answering, a reconcile pass finishes it');
      }
      return { name, archive: record.archive_path! };
    });
  }
}

/** The wait a refused engine's 503 asks for (Retry-After), as for an engine host that does not answer. */
const RETRY_AFTER_S = 5;
/** How a connection to a sandbox's own engine fails when that dockerd is not listening or gone (starting, restarting, or its root's firewall). */
const NO_ANSWER = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE']);

/**
 * The sandbox's engine for the API's routes, its connection failures told as the catalogue's 503
 * (try again) rather than a 500: what the sandbox runs decides whether its dockerd answers, so a
 * refusal is the sandbox's state, not the service's fault. Every dockerode call goes through the
 * modem's `dial`, hence one wrap.
 */
function answering(engine: Docker, name: string): Docker {
  type Dial = (options: unknown, callback: (err: unknown, data?: unknown) => void) => unknown;
  const modem = engine.modem as { dial: Dial };
  const dial = modem.dial.bind(modem);
  modem.dial = (options, callback) => dial(options, (err, data) => callback(
    NO_ANSWER.has((err as NodeJS.ErrnoException | null)?.code ?? '')
      ? new errors.Busy(RETRY_AFTER_S, `the engine of sandbox "${name}" did not answer (it may be starting or restarting); try again shortly`)
      : err,
    data,
  ));
  return engine;
}
