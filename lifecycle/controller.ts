import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import type { LifecycleQueue } from '../queue/index.ts';
import type { SandboxRecord, UserRecord } from '../store/records.ts';
import type { Store } from '../store/index.ts';
import { normaliseDeepSleepAfter, normaliseIdleTimeout, parseDuration } from './durations.ts';
import { issueEngineCerts } from './engine-certs.ts';
import { KeyedLock, SingleFlight } from '../core/keyed-lock.ts';
import type { RedisLeases } from '../core/redis-lease.ts';
import { NAME_PREFIX, sandboxName } from './names.ts';
import type { DockerRuntime, RuntimeState } from './runtime/docker-runtime.ts';
import { innerEngine, waitForInnerEngine } from './runtime/inner-engine.ts';
import type { IdleSessions } from './sessions.ts';
import { probe, type AppDirectory } from './apps/app-directory.ts';
import type { AppEntry } from './apps/app-labels.ts';
import { installManager, MANAGER_PORT, mintManagerKey, TOOL_MANAGER, waitForTool } from './manager-tool.ts';
import { generatePassword } from '../accounts/passwords.ts';
import type { Admission } from '../accounts/admission.ts';
import type { ServiceMetrics, WakeKind } from '../ops/metrics.ts';
import { deepSleepAt, engineHost, fullView, summarise, type SandboxSummary, type SandboxView } from './view.ts';

export const DEFAULT_IDLE_TIMEOUT = '30m';
/** Like Daytona's auto-archive: a week asleep, then only the volumes stay. */
export const DEFAULT_DEEP_SLEEP_AFTER = '7d';
const ENGINE_READY_TIMEOUT_MS = 60_000;
const MAX_RENEWAL_INTERVAL_MS = 60_000;
/** A timer this late was lost or is stuck with a dead worker: reconcile runs it itself. */
const TIMER_OVERDUE_MS = 5_000;

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
  runtime: DockerRuntime;
  sessions: IdleSessions;
  /** Sandbox leases across processes (`<prefix>:lease:<sandbox>`). */
  leases: RedisLeases;
  queue: LifecycleQueue;
  apps: AppDirectory;
  logger: Logger;
  /** Quotas and the host guard: checked before a record or container is made. */
  admission: Admission;
  metrics?: ServiceMetrics;
}

/**
 * The sandbox state machine of spec section 3. Every transition goes through here; the API,
 * the edge and the queue workers only call it. State is read from the host engine each time
 * (never cached), so a container that died or vanished behind our back is reported as it is.
 */
export class Lifecycle {
  private readonly lock: KeyedLock;
  private readonly wakes = new SingleFlight<RuntimeState>();
  /** Last renewal per sandbox and its idle timeout, for activity throttling. */
  private readonly renewals = new Map<string, { at: number; idleMs: number }>();
  private readonly log: Logger;

  constructor(private readonly deps: LifecycleDeps) {
    this.log = deps.logger.child({ part: 'lifecycle' });
    this.lock = new KeyedLock(deps.leases);
  }

  /** One transition of a sandbox at a time: in this process (KeyedLock), then across processes (lease). */
  private exclusive<T>(name: string, work: () => Promise<T>): Promise<T> {
    return this.lock.run(name, work);
  }

  private get ctx() {
    return { domain: this.deps.config.domain, httpsPort: this.deps.config.httpsPort };
  }

  /** The record of a live (not archived) sandbox, or SVC_SANDBOX_NOT_FOUND. */
  async record(name: string): Promise<SandboxRecord> {
    const record = await this.deps.store.sandboxes.get(name);
    if (!record) throw new errors.SandboxNotFound(name);
    if (record.archived_at) throw new errors.SandboxArchived(name);
    return record;
  }

  async create(owner: UserRecord, input: CreateSandboxInput): Promise<SandboxView> {
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
        const state = await this.bringUp(record, true);
        if (record.manager_password) await this.installManager(record, state);
      });
    } catch (err) {
      this.log.error({ sandbox: name, err }, 'sandbox creation failed; rolling back');
      await this.deps.runtime.takeDown(name).catch(() => undefined);
      await this.deps.runtime.removeVolumes(name).catch(() => undefined);
      await this.deps.sessions.close(name);
      await this.deps.store.sandboxes.put({ ...record, archived_at: new Date().toISOString() });
      throw new errors.SandboxFailed(name, (err as Error).message);
    } finally {
      await admitted();
    }
    return this.view(record);
  }

  async view(recordOrName: SandboxRecord | string): Promise<SandboxView> {
    const record = typeof recordOrName === 'string' ? await this.record(recordOrName) : recordOrName;
    const [state, session, owner] = await Promise.all([
      this.deps.runtime.inspect(record.name),
      this.deps.sessions.get(record.name),
      this.deps.store.users.get(record.owner_id),
    ]);
    const entries = this.deps.apps.appsOf(record.name);
    const apps = await Promise.all(
      entries.map(async (a) => ({
        url: this.appUrl(a.label),
        answers: state.address ? await probe(state.address, a.hostPort) : false,
      })),
    );
    return fullView(record, owner?.name ?? record.owner_id, state, session, apps, this.ctx, this.extras(record, entries));
  }

  /**
   * Spec 2.1 extras: the management tool's address when a container of the tool is published on
   * all interfaces (the template's, or one in the user's own compose project: the image's label
   * tells), and the password the service made for a manager sandbox.
   */
  private extras(record: SandboxRecord, entries: AppEntry[]): Record<string, string> {
    const tool = managerEntry(entries);
    return {
      ...(tool ? { manager_url: this.appUrl(tool.label) } : {}),
      ...(record.manager_password ? { manager_password: record.manager_password } : {}),
    };
  }

  /** Starts the management tool in a new manager sandbox and puts its address in the app table. */
  private async installManager(record: SandboxRecord, state: RuntimeState): Promise<void> {
    if (!record.certs || !state.address || !record.manager_password) throw new Error('a manager sandbox needs engine access and a running container');
    const began = Date.now();
    // image loads take seconds of silence from the engine: a longer idle timeout than the default
    const engine = innerEngine(record.name, state.address, record.certs, { timeoutMs: 120_000 });
    await installManager({ source: this.deps.runtime, engine, image: this.deps.config.managerImage, password: record.manager_password, address: state.address });
    await this.deps.apps.refresh(record.name, engine);
    this.log.info({ sandbox: record.name, ms: Date.now() - began }, 'management tool running');
  }

  /**
   * The export folder's SVC_MANAGER_URL and SVC_MANAGER_TOKEN (a new API key of the tool), or
   * why they are absent. Never wakes the sandbox.
   */
  async managerAccess(record: SandboxRecord): Promise<{ url: string; token: string } | { reason: string }> {
    const tool = managerEntry(this.deps.apps.appsOf(record.name));
    if (!tool) return { reason: 'this sandbox has no management tool' };
    const url = this.appUrl(tool.label);
    if (!record.manager_password) return { reason: `the tool at ${url} was started inside the sandbox, so the service does not know its password; make an API key in the tool` };
    const state = await this.deps.runtime.inspect(record.name);
    if (state.status !== 'running' || !state.address) return { reason: 'the sandbox is not running; start it and export again' };
    // just woken: the engine restarts the tool a moment after the sandbox
    await waitForTool(state.address, tool.hostPort, 30_000);
    const token = await mintManagerKey(state.address, tool.hostPort, record.manager_password, `svc export ${new Date().toISOString().slice(0, 16)}`);
    return { url, token };
  }

  /** The sandbox's app addresses, each with the container and published port it goes to. */
  appAddresses(name: string): Array<AppEntry & { url: string }> {
    return this.deps.apps.appsOf(name).map((a) => ({ ...a, url: this.appUrl(a.label) }));
  }

  appUrl(label: string): string {
    const { domain, httpsPort } = this.deps.config;
    return `https://${label}.${domain}${httpsPort === 443 ? '' : `:${httpsPort}`}`;
  }

  async list(records: SandboxRecord[]): Promise<SandboxSummary[]> {
    return Promise.all(
      records
        .filter((r) => !r.archived_at)
        .map(async (r) =>
          summarise(
            r,
            await this.deps.runtime.inspect(r.name),
            await this.deps.sessions.get(r.name),
            this.deps.apps.appsOf(r.name).map((a) => this.appUrl(a.label)),
            this.ctx,
          ),
        ),
    );
  }

  async status(name: string): Promise<RuntimeState> {
    return this.deps.runtime.inspect(name);
  }

  /** The host the sandbox runs on (the admin view); null when its engine did not say in time. */
  hostOf(name: string): Promise<string | null> {
    return this.deps.runtime.hostOf(name);
  }

  /**
   * Wakes a sandbox from asleep or deep sleep and resolves once its engine answers.
   * Concurrent callers share one wake: a hundred requests start the container once.
   */
  start(name: string): Promise<RuntimeState> {
    return this.wakes.do(name, async () => {
      const record = await this.record(name);
      return this.exclusive(name, async () => {
        if ((await this.deps.runtime.inspect(name)).status === 'running') return this.bringUp(record);
        const admitted = await this.deps.admission.admitStart(record);
        try {
          return await this.bringUp(record);
        } finally {
          await admitted();
        }
      });
    });
  }

  /** `creating`: the first start of a new sandbox, which is not a wake. */
  private async bringUp(record: SandboxRecord, creating = false): Promise<RuntimeState> {
    const { runtime } = this.deps;
    const began = Date.now();
    let state = await runtime.inspect(record.name);
    const from: WakeKind | null = state.status === 'running' ? null : state.status === 'deep_sleep' ? 'deep_sleep' : 'asleep';
    if (state.status === 'deep_sleep') {
      await runtime.create({ name: record.name, env: await this.containerEnv(record), limits: limitsOf(record) });
    }
    if (state.status !== 'running') {
      await runtime.start(record.name);
      state = await runtime.inspect(record.name);
    }
    if (state.status !== 'running' || !state.address) {
      throw new Error(`the sandbox container is not running after start (exit code ${state.exitCode ?? 'unknown'})`);
    }
    // Its apps may answer before its engine does: no running sandbox is ever without a session,
    // even if this process dies in the wait below. Opened again once the engine answers, so the
    // countdown starts from a usable sandbox.
    await this.openSession(record);
    if (record.certs) {
      const engine = innerEngine(record.name, state.address, record.certs);
      await waitForInnerEngine(engine, ENGINE_READY_TIMEOUT_MS);
      await this.deps.apps.watch(record.name, engine);
    }
    await this.openSession(record);
    await this.pushSshKeys(record);
    this.log.info({ sandbox: record.name, ms: Date.now() - began }, 'sandbox running');
    if (from && !creating) this.deps.metrics?.wakeDone(from, Date.now() - began);
    return state;
  }

  private async pushSshKeys(record: SandboxRecord): Promise<void> {
    const owner = await this.deps.store.users.get(record.owner_id);
    await this.deps.runtime.writeAuthorizedKeys(record.name, (owner?.ssh_keys ?? []).map((k) => k.key).join('\n'));
  }

  /** The owner's SSH keys changed: running sandboxes accept exactly the new set at once; others on wake. */
  async syncSshKeys(ownerId: string): Promise<void> {
    for (const record of await this.deps.store.sandboxes.listByOwner(ownerId)) {
      if (record.archived_at || (await this.deps.runtime.inspect(record.name)).status !== 'running') continue;
      await this.exclusive(record.name, () => this.pushSshKeys(record));
    }
  }

  private async containerEnv(record: SandboxRecord): Promise<Record<string, string>> {
    const owner = await this.deps.store.users.get(record.owner_id);
    const env: Record<string, string> = {
      SVC_SANDBOX: record.name,
      SVC_DNS: this.deps.config.sandboxDns.join(','),
      SVC_SSH_AUTHORIZED_KEYS: (owner?.ssh_keys ?? []).map((k) => k.key).join('\n'),
    };
    if (record.certs) {
      env.SVC_TLS_CA = record.certs.ca_cert;
      env.SVC_TLS_CERT = record.certs.server_cert;
      env.SVC_TLS_KEY = record.certs.server_key;
    }
    return env;
  }

  /** Opens or extends the idle session to now + idle_timeout, and makes sure a timer fires by then. */
  private async openSession(record: SandboxRecord): Promise<number> {
    const idleMs = parseDuration(record.idle_timeout) ?? parseDuration('87600h')!;
    const now = Date.now();
    const expiresAt = now + idleMs;
    const existing = await this.deps.sessions.get(record.name);
    let timerAt = existing?.timerAt ?? 0;
    if (timerAt <= now || expiresAt < timerAt) {
      timerAt = expiresAt;
      await this.deps.queue.scheduleIdleCheck(record.name, timerAt);
    }
    await this.deps.sessions.set(record.name, { expiresAt, timerAt });
    this.renewals.set(record.name, { at: now, idleMs });
    return expiresAt;
  }

  /**
   * Activity from the edge or engine traffic (spec 3, rule 2). Cheap and synchronous: it renews
   * the session at most once per min(60 s, idle_timeout / 4), so steady traffic keeps even a
   * short-timeout sandbox awake. Activity never wakes a sandbox.
   */
  recordActivity(name: string): void {
    const now = Date.now();
    const last = this.renewals.get(name);
    const interval = last ? Math.min(MAX_RENEWAL_INTERVAL_MS, last.idleMs / 4) : 0;
    if (last && now - last.at < interval) return;
    this.renewals.set(name, { at: now, idleMs: last?.idleMs ?? MAX_RENEWAL_INTERVAL_MS * 4 });
    void this.renew(name).catch((err) => this.log.warn({ sandbox: name, err }, 'session renewal failed'));
  }

  private async renew(name: string): Promise<void> {
    const record = await this.deps.store.sandboxes.get(name);
    if (!record || record.archived_at) return;
    if (await this.deps.sessions.get(name)) {
      await this.openSession(record);
      return;
    }
    // Traffic to a running sandbox without a session (its wake's process was killed, Redis lost
    // it): open one now rather than at the next reconcile, under the lock so a sleep under way
    // finishes first (traffic never wakes a sandbox).
    await this.exclusive(name, async () => {
      if (!(await this.deps.sessions.get(name)) && (await this.deps.runtime.inspect(name)).status === 'running') await this.openSession(record);
    });
  }

  /** POST keep-awake: restarts the idle countdown of a running sandbox; never wakes one. */
  async keepAwake(name: string): Promise<SandboxView> {
    const record = await this.record(name);
    const state = await this.deps.runtime.inspect(name);
    if (state.status !== 'running') throw new errors.SandboxNotRunning(name, describe(state.status), name);
    await this.openSession(record);
    return this.view(record);
  }

  /** Puts a running sandbox to sleep: the whole container stops, the deep-sleep timer starts. */
  async sleep(name: string, reason: string): Promise<void> {
    await this.exclusive(name, () => this.sleepHeld(name, reason));
  }

  private async sleepHeld(name: string, reason: string): Promise<void> {
    const record = await this.deps.store.sandboxes.get(name);
    if (!record || record.archived_at) return;
    this.log.info({ sandbox: name, reason }, 'sandbox going to sleep');
    this.deps.apps.unwatch(name);
    await this.deps.runtime.stop(name);
    this.deps.metrics?.slept('sleep');
    await this.deps.sessions.close(name);
    this.renewals.delete(name);
    await this.scheduleDeepSleep(record, await this.deps.runtime.inspect(name));
  }

  private async scheduleDeepSleep(record: SandboxRecord, state: RuntimeState): Promise<void> {
    const at = deepSleepAt(record, state);
    if (at !== null) await this.deps.queue.scheduleDeepSleep(record.name, at);
  }

  /**
   * Idle-check timer fired: sleep if the session really ran out, else re-arm for the new expiry.
   * Checked again under the lock: a wake or traffic holding it may have renewed the session.
   */
  async onIdleCheck(name: string, at: number): Promise<void> {
    const due = async (): Promise<boolean> => {
      const session = await this.deps.sessions.get(name);
      if (!session || session.timerAt !== at) return false; // closed, or superseded by an earlier timer
      if (session.expiresAt <= Date.now() + 250) return true;
      await this.deps.sessions.set(name, { ...session, timerAt: session.expiresAt });
      await this.deps.queue.scheduleIdleCheck(name, session.expiresAt);
      return false;
    };
    if (!(await due())) return;
    await this.exclusive(name, async () => {
      if (await due()) await this.sleepHeld(name, 'idle timeout');
    });
  }

  /** Deep-sleep timer fired: take the container and network down if it is still asleep and due. */
  async onDeepSleep(name: string, at: number): Promise<void> {
    await this.exclusive(name, async () => {
      const record = await this.deps.store.sandboxes.get(name);
      if (!record || record.archived_at) return;
      const state = await this.deps.runtime.inspect(name);
      const due = deepSleepAt(record, state);
      if (due === null) return; // running again, already down, or deep sleep turned off
      if (due > Date.now() + 250) {
        if (due !== at) await this.deps.queue.scheduleDeepSleep(name, due);
        return;
      }
      this.log.info({ sandbox: name }, 'sandbox going into deep sleep');
      await this.deps.runtime.takeDown(name);
      this.deps.metrics?.slept('deep_sleep');
    });
  }

  /**
   * Compares what runs with sessions and timers (spec 3, rules 3 and 4): a sandbox started
   * outside the service gets an idle session; one stopped outside loses its session and gets
   * its deep-sleep timer. Idempotent; runs every RECONCILE_EVERY_MS.
   */
  async reconcile(): Promise<void> {
    // pub/sub is best-effort: every pass starts from the whole app table as Redis holds it
    await this.deps.apps.reload();
    const archived = new Set<string>();
    for (const name of await this.deps.runtime.withVolumes()) {
      const record = await this.deps.store.sandboxes.get(name);
      if (record?.archived_at) archived.add(name);
    }
    for (const { name, running } of await this.deps.runtime.list()) {
      const record = await this.deps.store.sandboxes.get(name);
      if (record?.archived_at) archived.add(name);
      if (!record || record.archived_at) continue;
      await this.reconcileOne(record, running).catch((err) => this.log.error({ sandbox: name, err }, 'reconcile: this sandbox failed; the others go on'));
    }
    for (const name of archived) {
      this.log.info({ sandbox: name }, 'finishing the archive of a sandbox (the service stopped during its DELETE)');
      await this.exclusive(name, async () => {
        const record = await this.deps.store.sandboxes.get(name);
        if (record?.archived_at) await this.finishArchive(record);
      }).catch((err) => this.log.error({ sandbox: name, err }, 'reconcile: finishing the archive failed; next pass tries again'));
    }
  }

  /**
   * One sandbox of a reconcile pass. A timer overdue by TIMER_OVERDUE_MS is run here: its job was
   * lost with Redis, or is held by a worker that was killed (BullMQ hands it on only after its lock
   * expires, and a new job with the same id is a no-op meanwhile).
   */
  private async reconcileOne(record: SandboxRecord, running: boolean): Promise<void> {
    const name = record.name;
    const session = await this.deps.sessions.get(name);
    if (running) await this.deps.runtime.settle(name);
    if (running && !session) {
      this.log.info({ sandbox: name }, 'sandbox running without an idle session (started outside the service); opening one');
      await this.openSession(record);
    } else if (running && session && session.timerAt < Date.now() - TIMER_OVERDUE_MS) {
      await this.onIdleCheck(name, session.timerAt);
    }
    if (running && record.certs && !this.deps.apps.isWatching(name)) {
      // under the sandbox's lease: a sleep under way finishes first, and one that follows finds the watcher
      await this.exclusive(name, async () => {
        const { status, address } = await this.deps.runtime.inspect(name);
        if (status === 'running' && address && !this.deps.apps.isWatching(name)) await this.deps.apps.watch(name, innerEngine(name, address, record.certs!));
      });
    } else if (!running) {
      this.deps.apps.unwatch(name);
      if (session) await this.deps.sessions.close(name);
      const due = deepSleepAt(record, await this.deps.runtime.inspect(name));
      if (due !== null && due < Date.now() - TIMER_OVERDUE_MS) await this.onDeepSleep(name, due);
      else if (due !== null) await this.deps.queue.scheduleDeepSleep(name, due);
    }
  }

  /** PATCH: validates everything before changing anything; applies both values at once. */
  async updateSettings(name: string, patch: SettingsPatch): Promise<SandboxView> {
    const idle = patch.idle_timeout === undefined ? undefined : normaliseIdleTimeout(patch.idle_timeout);
    const deep = patch.deep_sleep_after === undefined ? undefined : normaliseDeepSleepAfter(patch.deep_sleep_after);
    return this.exclusive(name, async () => {
      const current = await this.record(name);
      const record = { ...current, ...(idle && { idle_timeout: idle }), ...(deep && { deep_sleep_after: deep }) };
      await this.deps.store.sandboxes.put(record);
      const state = await this.deps.runtime.inspect(name);
      if (idle && state.status === 'running') await this.openSession(record);
      if (deep) await this.scheduleDeepSleep(record, state);
      return this.view(record);
    });
  }

  /** Issues engine certificates for a `needs-certs` sandbox and recreates its container to use them. */
  async enableEngineAccess(name: string): Promise<SandboxView> {
    const record = await this.exclusive(name, async () => {
      const current = await this.record(name);
      if (current.certs) throw new errors.Conflict(`engine access of "${name}" is already enabled`);
      const updated = { ...current, certs: await issueEngineCerts(name, engineHost(name, this.deps.config.domain)) };
      const state = await this.deps.runtime.inspect(name);
      await this.deps.store.sandboxes.put(updated);
      this.deps.apps.unwatch(name);
      await this.deps.runtime.takeDown(name);
      if (state.status === 'exited') await this.deps.runtime.create({ name, env: await this.containerEnv(updated), limits: limitsOf(updated) });
      this.log.info({ sandbox: name }, 'engine access enabled');
      return { updated, wasRunning: state.status === 'running' };
    });
    if (record.wasRunning) await this.start(name);
    return this.view(record.updated);
  }

  /**
   * DELETE: the sandbox stops, its configuration and persistent folders go to an archive under
   * the data folder, and everything on the engine is removed. The name stays reserved.
   */
  async archive(name: string): Promise<{ name: string; archive: string }> {
    return this.exclusive(name, async () => {
      const current = await this.record(name);
      const stamp = new Date().toISOString().replace(/[:.]/g, '-');
      const relative = path.join('archive', `${name}-${stamp}`);
      // Recorded before anything is removed: a service killed halfway finds an archived sandbox
      // with leftovers, and its reconcile finishes the archive (never a live one with lost parts).
      const record: SandboxRecord = { ...current, archived_at: new Date().toISOString(), archive_path: relative };
      await this.deps.store.sandboxes.put(record);
      this.log.info({ sandbox: name, archive: relative }, 'archiving sandbox');
      await this.deps.sessions.close(name);
      this.renewals.delete(name);
      await this.finishArchive(record);
      return { name, archive: relative };
    });
  }

  /** The steps of an archive, each safe to run again: folders to the archive, then removal. */
  private async finishArchive(record: SandboxRecord): Promise<void> {
    const { runtime } = this.deps;
    const name = record.name;
    this.deps.apps.unwatch(name);
    await runtime.stop(name);
    await runtime.removeArchivers(name);
    if (record.archive_path) {
      const dir = path.join(this.deps.config.dataDir, record.archive_path);
      const configFile = path.join(dir, 'sandbox.json');
      if (!fs.existsSync(configFile)) { // written last: the folders before it are complete
        await runtime.archiveVolumes(name, dir);
        const { certs: _secrets, manager_password: _password, ...configuration } = record;
        await fs.promises.writeFile(`${configFile}.tmp`, JSON.stringify(configuration, null, 2) + '\n', { mode: 0o600 });
        await fs.promises.rename(`${configFile}.tmp`, configFile);
      }
    }
    await runtime.takeDown(name);
    await runtime.removeVolumes(name);
    await this.deps.apps.forget(name);
  }
}

/** The management tool's address: its own port if published, else the first port of the tool's container. */
function managerEntry(entries: AppEntry[]): AppEntry | undefined {
  const tools = entries.filter((e) => e.tool === TOOL_MANAGER);
  return tools.find((e) => e.containerPort === MANAGER_PORT) ?? tools[0];
}

/** The container limits chosen at create; a record from before quotas takes the runtime's defaults. */
function limitsOf(record: SandboxRecord): { memoryMb?: number; cpus?: number } {
  return { memoryMb: record.memory_mb, cpus: record.cpus };
}

function describe(status: string): string {
  return status === 'exited' ? 'asleep' : status === 'deep_sleep' ? 'in deep sleep' : status;
}
