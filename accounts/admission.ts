import type { Redis } from 'ioredis';
import { errors } from '../core/errors.ts';
import type { Store, SandboxRecord, UserRecord } from '../store/index.ts';
import type { RedisLeases } from '../core/redis-lease.ts';
import { describeQuota, effectiveQuotas, type QuotaValues } from './quotas.ts';

/** A start holds its place this long at most (a wake from deep sleep waits up to a minute for the engine). */
const RESERVATION_MS = 10 * 60_000;
/** The one lease every admission takes, so two checks never both see the last free place. */
const LEASE = 'quota-admission';
/** Retry-After when nothing says when a place frees up. */
const DEFAULT_RETRY_S = 60;

export interface HostCapacity {
  /** Memory and CPUs of the hosts that run sandboxes, added up (this machine's, or an Incus cluster's members' that answer). */
  memoryMb: number;
  cpus: number;
  /** How many hosts these figures add up. */
  hosts: number;
  /** SVC_OVERCOMMIT_MEMORY / SVC_OVERCOMMIT_CPUS: how far the running sandboxes' limits may add up past the host. */
  overcommitMemory: number;
  overcommitCpus: number;
}

export interface AdmissionDeps {
  store: Store;
  redis: Redis;
  prefix: string;
  leases: RedisLeases;
  defaults: QuotaValues;
  /** The hosts' capacity now (Incus members come and go). */
  host(): Promise<HostCapacity>;
  /** When a running sandbox falls asleep if idle (ms since epoch), for Retry-After. */
  stopsAt(sandbox: string): Promise<number | undefined>;
  /** Every refusal, for the audit log. */
  onRefusal?(owner: UserRecord, sandbox: string, error: Error): void;
}

export interface Usage {
  sandboxes: number;
  running: number;
}

type Reservation = { owner: string; memory_mb: number; cpus: number; until: number };
/** A running sandbox as the kept count holds it: `at`, when it was counted. */
type Counted = { owner: string; memory_mb: number; cpus: number; at: number };

/**
 * Who may create and start sandboxes (issue 24): the owner's quotas and the host's overcommit
 * guard, checked before any record or container exists. Checks are serialised across processes
 * by one Redis lease, and a start holds a reservation until its container runs, so two concurrent
 * creates or starts never both take the last place.
 *
 * What runs is a kept count (`<prefix>:admission:running`, each running sandbox with its owner and
 * limits): the lifecycle counts a sandbox once it runs and uncounts it as it stops, and every
 * reconcile pass sets it to what the engines list (a sandbox that stopped or started outside the
 * service is counted right within a pass). A check reads two Redis hashes under the lease, whatever
 * the number of hosts and sandboxes: it lists no engine.
 */
export class Admission {
  constructor(private readonly deps: AdmissionDeps) {}

  private get reservationsKey(): string {
    return `${this.deps.prefix}:admission:starting`;
  }

  private get runningKey(): string {
    return `${this.deps.prefix}:admission:running`;
  }

  /** The sandbox runs now (its start went through): counted until it stops. */
  async ran(record: SandboxRecord): Promise<void> {
    const counted: Counted = { owner: record.owner_id, ...this.limitsOf(record), at: Date.now() };
    await this.deps.redis.hset(this.runningKey, record.name, JSON.stringify(counted));
  }

  /** The sandbox stopped (asleep, deep sleep, archived, moved away). */
  async stopped(name: string): Promise<void> {
    await this.deps.redis.hdel(this.runningKey, name);
  }

  /**
   * A reconcile pass's listing of what runs, begun at `listedAt`: the count becomes that. A sandbox
   * counted after the listing began (a wake that ended meanwhile) stays counted.
   */
  async recount(running: SandboxRecord[], listedAt: number): Promise<void> {
    const kept = await this.deps.redis.hgetall(this.runningKey);
    const listed = new Set(running.map((r) => r.name));
    const tx = this.deps.redis.multi();
    for (const [name, json] of Object.entries(kept)) {
      if (!listed.has(name) && (JSON.parse(json) as Counted).at < listedAt) tx.hdel(this.runningKey, name);
    }
    for (const record of running) if (kept[record.name] === undefined) tx.hset(this.runningKey, record.name, JSON.stringify({ owner: record.owner_id, ...this.limitsOf(record), at: Date.now() } satisfies Counted));
    await tx.exec();
  }

  quotasOf(user: Pick<UserRecord, 'quotas'>): QuotaValues {
    return effectiveQuotas(user, this.deps.defaults);
  }

  /** The limits of a sandbox of `owner` asked for at create: at most the quota, the quota when not given. */
  limitsFor(owner: UserRecord, asked: { memory_mb?: number; cpus?: number }): { memory_mb: number; cpus: number } {
    const q = this.quotasOf(owner);
    if (asked.memory_mb !== undefined && asked.memory_mb > q.memory_mb) {
      throw new errors.QuotaExceeded(`memory_mb ${asked.memory_mb} is over your ${describeQuota('memory_mb', q.memory_mb)}; ask for ${q.memory_mb} or less`);
    }
    if (asked.cpus !== undefined && asked.cpus > q.cpus) {
      throw new errors.QuotaExceeded(`cpus ${asked.cpus} is over your ${describeQuota('cpus', q.cpus)}; ask for ${q.cpus} or less`);
    }
    return { memory_mb: asked.memory_mb ?? q.memory_mb, cpus: asked.cpus ?? q.cpus };
  }

  /** A sandbox's limits as its container has them (a record from before quotas: the defaults). */
  private limitsOf(record: SandboxRecord): { memory_mb: number; cpus: number } {
    return { memory_mb: record.memory_mb ?? this.deps.defaults.memory_mb, cpus: record.cpus ?? this.deps.defaults.cpus };
  }

  /**
   * A new sandbox: checks every quota and the host, then `insert`s its record, all under the
   * admission lease. Resolves to the release of its start reservation (call it once it runs or failed).
   */
  admitNew(owner: UserRecord, record: SandboxRecord, insert: () => Promise<void>): Promise<() => Promise<void>> {
    return this.admit(owner, record, async () => {
      const total = (await this.deps.store.sandboxes.listByOwner(owner.id, { secrets: false })).filter((s) => !s.archived_at).length;
      const { max_sandboxes } = this.quotasOf(owner);
      if (total >= max_sandboxes) {
        throw new errors.QuotaExceeded(`${describeQuota('max_sandboxes', max_sandboxes)} reached: you have ${total}; delete one (DELETE /api/sandboxes/:name) or ask an administrator to raise it`);
      }
    }, insert);
  }

  /** A start of a sandbox that is not running, by its owner (read by the caller). Resolves to the release of its reservation. */
  async admitStart(record: SandboxRecord, owner: UserRecord): Promise<() => Promise<void>> {
    return this.admit(owner, record, async () => undefined, async () => undefined);
  }

  private async admit(owner: UserRecord, record: SandboxRecord, first: () => Promise<void>, then: () => Promise<void>): Promise<() => Promise<void>> {
    try {
      if (owner.disabled_at) throw new errors.AccountDisabled(owner.name);
      await this.deps.leases.hold(LEASE, async () => {
        await first();
        await this.checkRunning(owner, record);
        await then();
        const mine = this.limitsOf(record);
        const reservation: Reservation = { owner: owner.id, ...mine, until: Date.now() + RESERVATION_MS };
        await this.deps.redis.hset(this.reservationsKey, record.name, JSON.stringify(reservation));
      });
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'SVC_QUOTA_EXCEEDED' || code === 'SVC_QUOTA_RUNNING' || code === 'SVC_HOST_FULL') {
        this.deps.onRefusal?.(owner, record.name, err as Error);
      }
      throw err;
    }
    return async () => { await this.deps.redis.hdel(this.reservationsKey, record.name); };
  }

  /** Running and starting sandboxes other than `except`, with their owner and limits: two reads of Redis. */
  private async active(except: string): Promise<Array<{ name: string; owner: string; memory_mb: number; cpus: number }>> {
    const [running, starting] = await Promise.all([this.deps.redis.hgetall(this.runningKey), this.deps.redis.hgetall(this.reservationsKey)]);
    const out = new Map<string, { name: string; owner: string; memory_mb: number; cpus: number }>();
    for (const [name, json] of Object.entries(running)) {
      const c = JSON.parse(json) as Counted;
      if (name !== except) out.set(name, { name, owner: c.owner, memory_mb: c.memory_mb, cpus: c.cpus });
    }
    const now = Date.now();
    for (const [name, json] of Object.entries(starting)) {
      const r = JSON.parse(json) as Reservation;
      if (r.until < now) { void this.deps.redis.hdel(this.reservationsKey, name); continue; } // its process died mid-start
      if (name !== except && !out.has(name)) out.set(name, { name, owner: r.owner, memory_mb: r.memory_mb, cpus: r.cpus });
    }
    return [...out.values()];
  }

  private async checkRunning(owner: UserRecord, record: SandboxRecord): Promise<void> {
    const active = await this.active(record.name);
    const { max_running } = this.quotasOf(owner);
    const mine = active.filter((a) => a.owner === owner.id);
    if (mine.length >= max_running) {
      const stops = (await Promise.all(mine.map((a) => this.deps.stopsAt(a.name)))).filter((t): t is number => t !== undefined);
      const retryAfter = stops.length ? (Math.min(...stops) - Date.now()) / 1000 : DEFAULT_RETRY_S;
      throw new errors.RunningQuota(retryAfter, `${describeQuota('max_running', max_running)} reached: ${mine.length} of your sandboxes are running; let one sleep (or stop it) and try again, or ask an administrator to raise it`);
    }
    const host = await this.deps.host();
    const limits = this.limitsOf(record);
    const memory = active.reduce((sum, a) => sum + a.memory_mb, limits.memory_mb);
    const cpus = active.reduce((sum, a) => sum + a.cpus, limits.cpus);
    const memoryCap = Math.floor(host.memoryMb * host.overcommitMemory);
    const cpuCap = host.cpus * host.overcommitCpus;
    if (memory > memoryCap || cpus > cpuCap) {
      const allows = host.hosts === 1 ? 'this host allows' : `the ${host.hosts} hosts allow`;
      const what = memory > memoryCap
        ? `${memory} MB of memory limits (${allows} ${memoryCap} MB: ${host.memoryMb} MB × SVC_OVERCOMMIT_MEMORY ${host.overcommitMemory})`
        : `${Math.round(cpus * 100) / 100} CPUs (${allows} ${cpuCap}: ${host.cpus} × SVC_OVERCOMMIT_CPUS ${host.overcommitCpus})`;
      throw new errors.HostFull(DEFAULT_RETRY_S, `the host is full: starting this sandbox would bring the running sandboxes to ${what}; try again once others sleep`);
    }
  }

  /** What the user uses now, against their quotas. */
  async usage(user: UserRecord): Promise<Usage> {
    const [own, active] = await Promise.all([this.deps.store.sandboxes.listByOwner(user.id, { secrets: false }), this.active('')]);
    return {
      sandboxes: own.filter((s) => !s.archived_at).length,
      running: active.filter((a) => a.owner === user.id).length,
    };
  }
}
