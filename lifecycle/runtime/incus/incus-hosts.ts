import { errors } from '../../../core/errors.ts';
import type {
  EvacuateOptions, Evacuation, HostFigures, HostOperations, HostReading, MoveOptions, MoveProgress, Mover,
} from '../host-operations.ts';
import type { SandboxRuntime } from '../sandbox-runtime.ts';
import { IncusError, IncusUnreachable, type IncusClient, type Operation } from './incus-client.ts';
import { KEY_DEEP, KEY_INSTANCE, LIST, runs, type Instance } from './incus-instance.ts';
import type { Member, MemberHealth } from './incus-members.ts';

/**
 * The members of an Incus cluster as the operator's `svc hosts …` drives them (issue 34 §4,
 * docs/scale-out.md): a host is a member. Incus does the work the runner hosts' layer does itself:
 *
 * - drain / undrain: the member's `scheduler.instance` is `manual` (Incus's scheduler places nothing
 *   there unless asked by name; the runtime never asks) / back to `all`, and an evacuated member is
 *   restored (`incus cluster restore`);
 * - move: the sandbox put to sleep under its lease (as the runner layer does), then one Incus move of
 *   the stopped instance (`POST /1.0/instances/{name}?target=`): its root volume, which holds all it
 *   keeps, goes whole, its routed NIC and address with it; it wakes on the new member at its next request;
 * - evacuate: every sandbox of the drained member moved that way, one after another (each with its
 *   lease, progress and audit row), then the member evacuated (`incus cluster evacuate`), so Incus
 *   itself keeps everything off it until it is undrained;
 * - remove: refused while the member holds a sandbox, and unless drained; then the member leaves the
 *   cluster (`incus cluster remove`).
 */
export interface IncusHostsOptions {
  /** This service's instances (`user.svc.instance`). */
  instance: string;
  /** Sandboxes the address pool has room for: what `svc hosts list` shows a member can hold. */
  poolSize: number;
}

/** Limits as the runtime writes them: `limits.memory` "512MiB", `limits.cpu.allowance` "150%". */
const memoryOf = (i: Instance) => Number.parseInt(i.config['limits.memory'] ?? '0', 10) * 1024 * 1024;
const cpusOf = (i: Instance) => Number.parseInt(i.config['limits.cpu.allowance'] ?? '0', 10) / 100;
const drainedOf = (m: Member) => m.config['scheduler.instance'] === 'manual' || m.status === 'Evacuated';
const MOVE_TIMEOUT_S = 3600;
/** How long a move given up tries to cancel Incus's migration (its list of operations waits on a lost member until Incus marks it offline). */
const CANCEL_MS = 30_000;

export class IncusHosts implements HostOperations {
  constructor(
    private readonly incus: IncusClient,
    private readonly health: MemberHealth,
    /**
     * The sandboxes' runtime: a move puts a sandbox to sleep through it (its stop and deep sleep), and
     * tells it where the sandbox went; its list of instances, which a lost member does not hold up, is
     * what `svc hosts list` counts.
     */
    private readonly runtime: Pick<SandboxRuntime, 'stop' | 'takeDown'> & { instances(): Promise<Instance[]>; movedTo(name: string, member: string): void },
    private readonly opts: IncusHostsOptions,
  ) {}

  async readings(): Promise<HostReading[]> {
    const members = await this.health.check();
    const ours = await this.runtime.instances().catch(() => undefined);
    return Promise.all(members.map(async (m): Promise<HostReading> => {
      const url = new URL(m.url);
      const base = { name: m.name, address: url.hostname, port: Number(url.port || 8443), drained: drainedOf(m) };
      if (m.lost) return { ...base, error: m.lost };
      if (!ours) return { ...base, error: 'the list of instances did not answer' };
      try {
        return { ...base, figures: await this.figures(m.name, ours.filter((i) => i.location === m.name)) };
      } catch (err) {
        return { ...base, error: (err as Error).message };
      }
    }));
  }

  async setDrained(name: string, drained: boolean): Promise<void> {
    const m = await this.member(name);
    if (!drained && m.status === 'Evacuated') await this.incus.act('POST', `/1.0/cluster/members/${encodeURIComponent(name)}/state`, { action: 'restore' }, MOVE_TIMEOUT_S);
    await this.memberConfig(name, { 'scheduler.instance': drained ? 'manual' : null });
  }

  async remove(name: string): Promise<void> {
    const m = await this.member(name);
    if (!drainedOf(m)) throw new errors.Conflict(`host "${name}" is not drained: svc hosts drain ${name} first (no new sandbox goes there then)`);
    if (m.lost) throw new errors.Conflict(`host "${name}" does not answer (${m.lost}): its sandboxes cannot be told; bring it back or remove it with incus cluster remove --force`);
    const on = (await this.ours()).filter((i) => i.location === name).map((i) => i.name).sort();
    if (on.length > 0) throw new errors.Conflict(`host "${name}" holds ${on.length} sandbox(es) (${on.slice(0, 5).join(', ')}${on.length > 5 ? ', …' : ''}): delete or move them first (svc hosts evacuate ${name})`);
    await this.incus.act('DELETE', `/1.0/cluster/members/${encodeURIComponent(name)}`);
  }

  async move(mover: Mover, name: string, opts: MoveOptions = {}): Promise<MoveProgress> {
    const record = await mover.store.sandboxes.get(name);
    if (!record) throw new errors.SandboxNotFound(name);
    if (record.archived_at) throw new errors.SandboxArchived(name);
    const listed = await this.incus.get<Instance[]>(LIST, { timeoutMs: 25_000 });
    const all = listed.filter((i) => i.config?.[KEY_INSTANCE] === this.opts.instance);
    const instance = all.find((i) => i.name === name);
    // a lost member's instance lists without its config (Error): say which member
    const away = listed.find((i) => i.name === name && !i.config);
    if (!instance && away) throw new errors.Conflict(`host "${away.location}" does not answer: sandbox "${name}" cannot be moved off it now`);
    if (!instance) throw new errors.Conflict(`sandbox "${name}" has no instance on the cluster (never woken)`);
    const from = instance.location;
    if (opts.from !== undefined && opts.from !== from) throw new errors.Conflict(`sandbox "${name}" is on host "${from}", not "${opts.from}"`);
    const members = await this.health.check();
    const to = opts.to ?? choose(members, all, from);
    if (!to) throw new errors.Conflict(`no host can take sandbox "${name}": every other member is drained or does not answer`);
    const target = members.find((m) => m.name === to);
    if (!target) throw new errors.NotFound(`no host named "${to}" (svc hosts list)`);
    if (to === from) throw new errors.BadRequest(`sandbox "${name}" is on "${to}" already`);
    if (target.lost) throw new errors.Conflict(`host "${to}" does not answer: ${target.lost}`);
    if (drainedOf(target)) throw new errors.Conflict(`host "${to}" is drained: no sandbox goes there`);
    const lostSource = members.find((m) => m.name === from)?.lost;
    if (lostSource) throw new errors.Conflict(`host "${from}" does not answer (${lostSource}): sandbox "${name}" cannot be moved off it now`);

    const t0 = Date.now();
    const deadlineS = Math.ceil((opts.deadlineMs ?? mover.deadlineMs) / 1000);
    const bytes = await this.rootBytes(instance);
    await mover.exclusive(name, async () => {
      await mover.goingDown(name);
      // asleep as the runner layer leaves a moved sandbox: it wakes on the new member at its next request
      // (one in deep sleep already is a stopped instance: nothing to put down)
      if ((await this.ours()).find((i) => i.name === name)?.config[KEY_DEEP] !== 'true') {
        await this.runtime.stop(name);
        await this.runtime.takeDown(name);
      }
      try {
        const { operation } = await this.incus.call('POST', `/1.0/instances/${encodeURIComponent(name)}?target=${encodeURIComponent(to)}`, { name, migration: true, live: false });
        if (operation) await this.untilMoved(operation, name, from, to, Math.min(deadlineS, MOVE_TIMEOUT_S));
      } catch (err) {
        throw leftover(err, name, from, to);
      }
      this.runtime.movedTo(name, to);
    });
    const done: MoveProgress = { sandbox: name, from, to, phase: 'moved', bytes, total: bytes, ms: Date.now() - t0 };
    opts.onProgress?.(done);
    return done;
  }

  async evacuate(mover: Mover, host: string, opts: EvacuateOptions = {}): Promise<Evacuation> {
    const m = await this.member(host);
    if (!drainedOf(m)) throw new errors.Conflict(`host "${host}" is not drained: svc hosts drain ${host} first (no new sandbox goes there then)`);
    const on = (await this.ours()).filter((i) => i.location === host).map((i) => i.name).sort();
    const moved: string[] = [];
    const failed: Array<{ sandbox: string; error: string }> = [];
    for (const sandbox of on) {
      try {
        const done = await this.move(mover, sandbox, {
          from: host, ...(opts.onProgress ? { onProgress: opts.onProgress } : {}), ...(opts.deadlineMs !== undefined ? { deadlineMs: opts.deadlineMs } : {}),
        });
        moved.push(sandbox);
        await opts.onMoved?.(done);
      } catch (err) {
        failed.push({ sandbox, error: (err as Error).message });
      }
    }
    // Incus's own evacuation then: whatever else runs there moves, and nothing is placed there until restored
    if (failed.length === 0 && m.status !== 'Evacuated') {
      await this.incus.act('POST', `/1.0/cluster/members/${encodeURIComponent(host)}/state`, { action: 'evacuate' }, MOVE_TIMEOUT_S);
    }
    return { moved, failed };
  }

  /**
   * Waits for Incus's move of `name`, asking every second whether its two members still answer
   * (MemberHealth). Incus itself waits on a lost member for its TCP timeout (2 min measured), and the
   * instance cannot start meanwhile ("Instance is busy running a \"migrate\" operation"): a lost
   * member ends the move at once, Incus's migration cancelled, so the instance is free again on `from`.
   */
  private async untilMoved(op: Operation, name: string, from: string, to: string, timeoutS: number): Promise<void> {
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      // (not `/wait?timeout=1`: forwarded to another member, its timeout is a 500 "context deadline
      // exceeded"; its member lost: no answer, the members' health below tells)
      const now = await this.incus.get<Operation>(`/1.0/operations/${encodeURIComponent(op.id)}`, { timeoutMs: 10_000 })
        .catch((err: unknown) => { if (err instanceof IncusUnreachable) return undefined; throw err; });
      if (now?.status_code === 200) return;
      if (now && now.status_code >= 400) throw new IncusError(now.status_code, `the move of sandbox "${name}" from "${from}" to "${to}" failed: ${now.err || now.status}`);
      const lost = (await this.health.check().catch(() => [])).find((m) => (m.name === to || m.name === from) && m.lost);
      if (lost || Date.now() > deadline) {
        await this.cancelMigration(name);
        const why = lost ? `host "${lost.name}" stopped answering during the move of sandbox "${name}" (${lost.lost})` : `the move of sandbox "${name}" took longer than its deadline (${timeoutS} s)`;
        throw new errors.Conflict(lost?.name === from
          ? `${why}: the move is given up; "${name}" stays on "${from}", unavailable until it answers again`
          : `${why}: the move is given up and "${name}" stays on "${from}" with its files, asleep (it wakes there at its next request); move it to another host (svc hosts move ${name} --to HOST): "${to}" may keep what this move had copied, and then refuses "${name}" until an operator removes it there`);
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  /**
   * Cancels the cancellable operations of Incus's migration of `name` (the source's side): the instance
   * may start again. Incus's list of operations asks every member that has some, and waits on a lost
   * one until Incus marks it offline (7–11 s after the loss here): asked again until then.
   */
  private async cancelMigration(name: string): Promise<void> {
    type Running = Operation & { may_cancel?: boolean; resources?: { instances?: string[] } };
    const until = Date.now() + CANCEL_MS;
    let ops: { running?: Running[] } | undefined;
    while (!ops && Date.now() < until) ops = await this.incus.get<{ running?: Running[] }>('/1.0/operations?recursion=1', { timeoutMs: 5000 }).catch(() => undefined);
    for (const o of ops?.running ?? []) {
      if (!o.may_cancel || !o.resources?.instances?.includes(`/1.0/instances/${name}`)) continue;
      await this.incus.call('DELETE', `/1.0/operations/${encodeURIComponent(o.id)}`, undefined, { timeoutMs: 5000 }).catch(() => undefined);
    }
  }

  /** This service's instances; a lost member's are listed as Error without config, so they are not counted. */
  private async ours(): Promise<Instance[]> {
    return (await this.incus.get<Instance[]>(LIST, { timeoutMs: 25_000 })).filter((i) => i.config?.[KEY_INSTANCE] === this.opts.instance);
  }

  private async member(name: string): Promise<Member> {
    const m = (await this.health.check()).find((x) => x.name === name);
    if (!m) throw new errors.NotFound(`no host named "${name}" (svc hosts list)`);
    return m;
  }

  /** Sets (or, with null, removes) config keys of a member: its record is read and put back whole. */
  private async memberConfig(name: string, keys: Record<string, string | null>): Promise<void> {
    const path = `/1.0/cluster/members/${encodeURIComponent(name)}`;
    const current = await this.incus.get<{ config: Record<string, string>; description: string; roles: string[]; failure_domain: string; groups: string[] }>(path);
    const config = { ...current.config };
    for (const [k, v] of Object.entries(keys)) if (v === null) delete config[k]; else config[k] = v;
    await this.incus.act('PUT', path, { config, description: current.description, roles: current.roles, failure_domain: current.failure_domain, groups: current.groups });
  }

  private async figures(member: string, on: Instance[]): Promise<HostFigures> {
    const r = await this.incus.get<{ cpu: { total: number }; memory: { total: number } }>(`/1.0/resources?target=${encodeURIComponent(member)}`, { timeoutMs: 5000 });
    const running = on.filter(runs);
    return {
      memoryBytes: r.memory.total,
      cpus: r.cpu.total,
      sandboxes: on.length,
      running: running.length,
      networks: this.opts.poolSize,
      committedMemoryBytes: running.reduce((n, i) => n + memoryOf(i), 0),
      committedCpus: running.reduce((n, i) => n + cpusOf(i), 0),
    };
  }

  /** What the move carries: the root volume's use as its pool reports it (0 where the driver does not say). */
  private async rootBytes(i: Instance): Promise<number> {
    const pool = (i as Instance & { expanded_devices?: Record<string, Record<string, string>> }).expanded_devices?.root?.pool;
    if (!pool) return 0;
    try {
      const state = await this.incus.get<{ usage?: { used?: number } }>(
        `/1.0/storage-pools/${encodeURIComponent(pool)}/volumes/container/${encodeURIComponent(i.name)}/state?target=${encodeURIComponent(i.location)}`, { timeoutMs: 10_000 },
      );
      return state.usage?.used ?? 0;
    } catch (err) {
      if (err instanceof IncusError) return 0;
      throw err;
    }
  }
}

/** The member a moved sandbox goes to: answering, not drained, not its own; the one with the fewest of this service's sandboxes. */
function choose(members: Member[], ours: Instance[], from: string): string | undefined {
  const count = (m: string) => ours.filter((i) => i.location === m).length;
  return members.filter((m) => !m.lost && !drainedOf(m) && m.name !== from)
    .sort((a, b) => count(a.name) - count(b.name) || (a.name < b.name ? -1 : 1))[0]?.name;
}

/**
 * A move refused because the target still holds the volume an interrupted move of the same sandbox
 * left there (Incus: `Cannot create volume, already exists on migration target storage`; Incus's API
 * cannot remove it: docs/incus.md, "Left to do"): said as what to do. Anything else as it was.
 */
function leftover(err: unknown, name: string, from: string, to: string): unknown {
  if (!(err instanceof IncusError) || !/already exists on migration target/i.test(err.message)) return err;
  return new errors.Conflict(`host "${to}" still holds what an earlier interrupted move of sandbox "${name}" left there, so Incus refuses this move (${err.message}): "${name}" stays on "${from}" with its files, asleep (it wakes there at its next request); move it to another host (svc hosts move ${name} --to HOST)`);
}
