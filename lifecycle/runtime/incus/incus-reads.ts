import { RuntimeUnreachable } from '../sandbox-runtime.ts';
import { IncusError, type IncusClient } from './incus-client.ts';
import { unreachableReason } from './incus-unreachable.ts';
import { KEY_INSTANCE, LIST, type Instance } from './incus-instance.ts';
import type { MemberHealth } from './incus-members.ts';

/** How long a list of all instances may take before a member's loss is suspected (list()). */
const LIST_MS = 1000;
/** One instance's read while a member is lost: its member answers within it, or it is left out. */
const ONE_MS = 1500;
const READS_AT_ONCE = 8;

/**
 * The runtime's reads of Incus's instances, none of them held up by a lost cluster member: a lost
 * member's instance answers at once, from where it was last seen (MemberHealth knows the loss within
 * a few seconds, Incus within 7–11 s, and every request Incus forwards to a lost member waits 20 s).
 */
export class InstanceReads {
  /** The member each instance was last seen on (lists, reads, Incus's events). */
  readonly where = new Map<string, string>();

  constructor(private readonly incus: IncusClient, private readonly health: MemberHealth, private readonly instance: string) {}

  /** Why `name` cannot be asked now: it was last seen on a member known lost. */
  lostOn(name: string): string | undefined {
    const on = this.where.get(name);
    return on === undefined ? undefined : this.health.lost().get(on);
  }

  /**
   * This service's instances, answered within a second or two also while a member is lost. A lost
   * member's are left out (Incus lists them as Error without their config; reads show them
   * unreachable), as a host that did not answer was left out before.
   *
   * Incus's list with recursion asks every member for its instances and waits 20 s on a lost one until
   * Incus marks it offline: every list asked meanwhile waited that long. So while a member is lost and
   * Incus still lists it Online, or when the list is slower than LIST_MS and a member missed its last
   * dial, the list is read instance by instance instead (byInstance).
   */
  async list(): Promise<Instance[]> {
    let listed: Instance[] | undefined;
    if (this.health.unmarked().length === 0) {
      const listing = this.incus.get<Instance[]>(LIST);
      listed = await Promise.race([listing, new Promise<undefined>((r) => { setTimeout(() => r(undefined), LIST_MS).unref(); })]);
      // slow: a member lost that nobody knows of yet, or only a busy machine (one round of dials tells)
      if (!listed && (await this.health.check().then(() => this.health.unmarked().length === 0, () => false))) listed = await listing;
      if (!listed) listing.catch(() => undefined);
    }
    const ours = (listed ?? await this.byInstance()).filter((i) => i.config?.[KEY_INSTANCE] === this.instance);
    for (const i of ours) this.where.set(i.name, i.location);
    return ours;
  }

  /**
   * One instance (undefined when there is none), without its state. One last seen on a lost member, or
   * that Incus gives without its config (its member does not answer), is unreachable: it may be ours.
   */
  async one(name: string): Promise<Instance | undefined> {
    const i = await this.get(name, '');
    if (i && !i.config) throw new RuntimeUnreachable(`Incus member ${i.location} does not answer`);
    return i;
  }

  /** One of this service's instances, or undefined. */
  async ours(name: string): Promise<Instance | undefined> {
    const i = await this.one(name);
    return i?.config[KEY_INSTANCE] === this.instance ? i : undefined;
  }

  /** One instance with its state (undefined when there is none); forwarded to its member. */
  withState(name: string, signal?: AbortSignal): Promise<Instance | undefined> {
    return this.get(name, '?recursion=1', signal);
  }

  /**
   * `GET /1.0/instances/{name}`, forwarded by Incus to the instance's member: RuntimeUnreachable at
   * once for one last seen on a member known lost (the forward would wait 20 s on it), and when the
   * read fails for want of its member (incus-unreachable.ts: a 5xx of a read says nothing about it).
   */
  private async get(name: string, query: string, signal?: AbortSignal): Promise<Instance | undefined> {
    const lost = this.lostOn(name);
    if (lost) throw new RuntimeUnreachable(lost);
    try {
      const i = await this.incus.get<Instance>(`/1.0/instances/${encodeURIComponent(name)}${query}`, { signal });
      if (i.location) this.where.set(name, i.location);
      return i;
    } catch (err) {
      if (err instanceof IncusError && err.status === 404) return undefined;
      const reason = unreachableReason(err, { read: true });
      throw reason ? new RuntimeUnreachable(reason) : err;
    }
  }

  /**
   * The instances last seen on `member`, now lost, asked again where Incus's database puts them (each
   * within ONE_MS; one still there does not answer and stays lost): one that another process moved
   * since this one last read it (`svc hosts move`, whose runtime's movedTo is its own) answers from its
   * new member and is no longer taken for lost. Returns those found elsewhere.
   */
  async seenElsewhere(member: string): Promise<string[]> {
    const names = [...this.where].filter(([, on]) => on === member).map(([name]) => name);
    const found = await Promise.all(names.map(async (name) => {
      try {
        const i = await this.incus.get<Instance>(`/1.0/instances/${encodeURIComponent(name)}`, { timeoutMs: ONE_MS });
        if (!i.config || !i.location || i.location === member) return undefined;
        this.where.set(name, i.location);
        return name;
      } catch (err) {
        if (err instanceof IncusError && err.status === 404 && this.where.get(name) === member) this.where.delete(name); // gone: nothing of it is lost
        return undefined;
      }
    }));
    return found.filter((name): name is string => name !== undefined);
  }

  /**
   * Every instance read on its own (`GET /1.0/instances` without recursion is Incus's database alone;
   * one instance's read is forwarded to its member alone), each within ONE_MS; those last seen on a
   * member that is lost or missed its last dial, and those that do not answer in time, left out.
   */
  private async byInstance(): Promise<Instance[]> {
    const urls = await this.incus.get<string[]>('/1.0/instances', { timeoutMs: 5000 });
    const names = urls.map((u) => decodeURIComponent(u.split('?')[0]!.split('/').pop()!));
    const silent = new Set(this.health.unmarked());
    const read: Array<Instance | undefined> = [];
    for (let at = 0; at < names.length; at += READS_AT_ONCE) {
      read.push(...await Promise.all(names.slice(at, at + READS_AT_ONCE).map((name) => (this.lostOn(name) || silent.has(this.where.get(name) ?? '')
        ? undefined
        : this.incus.get<Instance>(`/1.0/instances/${encodeURIComponent(name)}`, { timeoutMs: ONE_MS }).catch(() => undefined)))));
    }
    return read.filter((i): i is Instance => !!i && !!i.config);
  }
}
