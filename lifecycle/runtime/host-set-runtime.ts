import { BlockList, isIPv4 } from 'node:net';
import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import { errors } from '../../core/errors.ts';
import { SingleFlight } from '../../core/keyed-lock.ts';
import { LOCAL_HOST, type HostStore, type EngineCerts, type HostRecord } from '../../store/index.ts';
import type { DockerRuntime, EngineCapacity } from './docker-runtime.ts';
import { ImageSync } from './image-sync.ts';
import {
  RuntimeUnreachable, type ContainerSpec, type DiskUse, type Inspection, type ListOptions, type ResourceUse, type RuntimeState, type SandboxExecutor, type SandboxRuntime,
} from './sandbox-runtime.ts';

/** How long placement waits for a host's figures before it leaves that host out. */
const CAPACITY_ASK_MS = 3000;
/** How long the hosts' sizes added up (machines()) are used before they are asked again. */
const MACHINES_TTL_MS = 30_000;
/**
 * A host that failed an ask is away this long at most without being asked again: its sandboxes'
 * calls answer unreachable at once (an inspect of a silent engine waits 10 s). Probes end it sooner.
 */
const AWAY_MS = 15_000;
/** How often an away host is probed (a ping), and how long a probe waits for its answer. */
const AWAY_PROBE_MS = 1000;
const PROBE_TIMEOUT_MS = 2000;
/**
 * A host is taken for away only when a ping fails too, given this long: a heavy call's own deadline
 * (a capacity count or a listing over hundreds of containers on a loaded engine), or one ping slowed
 * by load, says the engine is slow, not gone, and must not show every sandbox of it unavailable.
 */
const CONFIRM_TIMEOUT_MS = 5000;
/**
 * How often every host is pinged while the service watches (watchStarts): a host that falls silent
 * with its events stream still open (powered off behind a link that stays up) would otherwise go on
 * answering reads from what its events kept.
 */
const WATCH_PROBE_MS = 5000;

/** One host's figures for a placement. */
export interface HostLoad extends EngineCapacity {
  name: string;
}

/**
 * The placement score of a host (docs/scale-out.md): the smallest of its free shares of memory, CPU and
 * networks, counting the limits of its running sandboxes as taken. Memory and CPU are overcommitted
 * (a sleeping sandbox takes nothing, a running one rarely its whole limit), so a share may be below 0;
 * the host with the most room by its scarcest resource still wins. A host without a free network (each
 * sandbox container holds one of its pool's) scores -Infinity: it cannot take one more sandbox at all.
 */
export function placementScore(load: EngineCapacity): number {
  if (load.sandboxes >= load.networks) return -Infinity;
  return Math.min(
    1 - load.committedMemoryBytes / Math.max(1, load.memoryBytes),
    1 - load.committedCpus / Math.max(1, load.cpus),
    1 - load.sandboxes / load.networks,
  );
}

/** The host a new sandbox goes to: best score, then fewest sandboxes, then name; undefined when none can take it. */
export function choosePlacement(loads: HostLoad[]): string | undefined {
  const open = loads.filter((l) => placementScore(l) > -Infinity);
  open.sort((a, b) => placementScore(b) - placementScore(a) || a.sandboxes - b.sandboxes || (a.name < b.name ? -1 : 1));
  return open[0]?.name;
}

/** True when `address` lies in `pool`, an IPv4 CIDR ("10.220.0.0/16"); false for anything malformed. */
export function inPool(address: string, pool: string): boolean {
  const [base, prefix] = pool.split('/');
  const list = new BlockList();
  try {
    list.addSubnet(base!, Number(prefix), 'ipv4');
  } catch {
    return false;
  }
  return isIPv4(address) && list.check(address, 'ipv4');
}

export interface HostSetOptions {
  /** The engine of the machine the service runs on: LOCAL_HOST, a runner host with nothing to configure. */
  local: DockerRuntime;
  hosts: HostStore;
  /** A runtime on a registered host's engine. */
  connect(host: HostRecord): DockerRuntime;
  /** The pool of `local`'s addresses; undefined: its addresses are taken as they come (the main engine). */
  localPool?: string;
  logger: Logger;
}

/**
 * Sandboxes on several Docker hosts (issue 20): one DockerRuntime per host, the sandbox → host map in
 * the store (HostStore placements). A sandbox is made on the host placement chooses and stays there
 * while it has volumes; every other call goes to its host's engine. A host that does not answer makes
 * its own sandboxes `unreachable` (RuntimeUnreachable for every other call) and leaves out only its own
 * sandboxes from `list` and `withVolumes`: the other hosts go on.
 */
export class HostSetRuntime implements SandboxRuntime {
  readonly exec: SandboxExecutor;
  /** The sandbox image of each runner host, kept the build of this machine's. */
  private readonly images: ImageSync;
  /** Runtimes of registered hosts, made once per record (a record changed by `hosts add` again makes a new one). */
  private readonly engines = new Map<string, { record: HostRecord; runtime: DockerRuntime; unwatch?: () => void }>();
  /**
   * Placements seen: they change only when a sandbox's volumes go (removeVolumes), or by a move, in
   * this process or another (lifecycle-news.ts tells placementChanged).
   */
  private readonly placed = new Map<string, string>();
  private watching = false;
  private machinesSeen?: { at: number; figures: Awaited<ReturnType<HostSetRuntime['machines']>> };
  /** Hosts that failed an ask: why, until when they are not asked, and whether a probe runs. */
  private readonly away = new Map<string, { reason: string; until: number; probing: boolean }>();
  /** Hosts whose ask failed, being pinged before they are taken for away (confirmAway). */
  private readonly confirming = new SingleFlight<void>();

  constructor(private readonly opts: HostSetOptions) {
    this.images = new ImageSync(opts.local, opts.logger);
    const on = async (sandbox: string) => (await this.runtimeOf(sandbox)).exec;
    this.exec = {
      start: async (sandbox, cmd, o) => (await on(sandbox)).start(sandbox, cmd, o),
      startTerminal: async (sandbox, cmd, size) => (await on(sandbox)).startTerminal(sandbox, cmd, size),
      getArchive: async (sandbox, path) => (await on(sandbox)).getArchive(sandbox, path),
      run: async (sandbox, cmd, input) => (await on(sandbox)).run(sandbox, cmd, input),
    };
  }

  /** The host a sandbox lives on: its placement, else LOCAL_HOST (sandboxes from before hosts existed). */
  private async hostNameOf(sandbox: string): Promise<string> {
    const seen = this.placed.get(sandbox);
    if (seen) return seen;
    const host = await this.opts.hosts.placementOf(sandbox);
    if (host) this.placed.set(sandbox, host);
    return host ?? LOCAL_HOST;
  }

  /** The runtime of a registered host; RuntimeUnreachable for a name no longer registered. */
  async engine(host: string): Promise<DockerRuntime> {
    if (host === LOCAL_HOST) return this.opts.local;
    const record = await this.opts.hosts.get(host);
    if (!record?.address) throw new RuntimeUnreachable(`host "${host}" is not registered`);
    const known = this.engines.get(host);
    if (known && JSON.stringify(known.record) === JSON.stringify(record)) return known.runtime;
    known?.unwatch?.();
    const runtime = this.opts.connect(record);
    this.engines.set(host, { record, runtime, unwatch: this.watching ? runtime.watchStarts() : undefined });
    return runtime;
  }

  /** Gives a runner host this machine's build of the sandbox image (image-sync.ts) unless it has it. */
  async ensureImage(host: string, engine?: DockerRuntime): Promise<void> {
    if (host !== LOCAL_HOST) await this.images.ensure(host, engine ?? (await this.engine(host)));
  }

  /**
   * The runtime of the sandbox's host; RuntimeUnreachable at once while that host is away. A host
   * remembered for the sandbox that cannot be asked is checked against the store first: a move by
   * another process (svc hosts evacuate) may have placed the sandbox elsewhere, and its old host be
   * removed or switched off since.
   */
  private async runtimeOf(sandbox: string): Promise<DockerRuntime> {
    const host = await this.hostNameOf(sandbox);
    try {
      this.throwIfAway(host);
      return await this.engine(host);
    } catch (err) {
      if (!(err instanceof RuntimeUnreachable) || (await this.placedAfresh(sandbox)) === host) throw err;
      return this.runtimeOf(sandbox);
    }
  }

  /** The sandbox's placement as the store has it now (the remembered one dropped). */
  private async placedAfresh(sandbox: string): Promise<string> {
    this.placed.delete(sandbox);
    return this.hostNameOf(sandbox);
  }

  private throwIfAway(host: string): void {
    const away = this.away.get(host);
    if (away && away.until > Date.now()) throw new RuntimeUnreachable(away.reason);
  }

  /**
   * Runs an ask of a host: at once RuntimeUnreachable while it is away; a RuntimeUnreachable from the
   * ask makes it away (AWAY_MS, probed every AWAY_PROBE_MS until it answers) once a ping fails too.
   */
  private async ask<T>(host: string, call: (runtime: DockerRuntime) => Promise<T>): Promise<T> {
    this.throwIfAway(host);
    const runtime = await this.engine(host);
    try {
      return await call(runtime);
    } catch (err) {
      if (err instanceof RuntimeUnreachable) await this.confirmAway(host, runtime);
      throw err;
    }
  }

  /** Marks a host away if it does not answer a ping within CONFIRM_TIMEOUT_MS either; concurrent callers share one ping. */
  private async confirmAway(host: string, runtime: DockerRuntime): Promise<void> {
    if (this.away.has(host)) return;
    await this.confirming.do(host, async () => {
      try {
        await runtime.ping(AbortSignal.timeout(CONFIRM_TIMEOUT_MS));
      } catch (err) {
        if (err instanceof RuntimeUnreachable) this.markAway(host, err.reason);
      }
    });
  }

  private markAway(host: string, reason: string): void {
    const known = this.away.get(host);
    if (!known) this.opts.logger.warn({ host, reason }, 'host does not answer: its sandboxes answer unavailable until it does (probed every second)');
    this.away.set(host, { reason, until: Date.now() + AWAY_MS, probing: known?.probing ?? false });
    void this.probeWhileAway(host);
  }

  /** Pings an away host every AWAY_PROBE_MS until it answers (then it is asked again) or is no longer registered. */
  private async probeWhileAway(host: string): Promise<void> {
    const entry = this.away.get(host);
    if (!entry || entry.probing) return;
    entry.probing = true;
    try {
      for (;;) {
        await new Promise((resolve) => setTimeout(resolve, AWAY_PROBE_MS).unref());
        const runtime = await this.engine(host).catch(() => undefined);
        if (!runtime) return void this.away.delete(host); // no longer registered
        try {
          await runtime.ping(AbortSignal.timeout(PROBE_TIMEOUT_MS));
          this.away.delete(host);
          this.opts.logger.info({ host }, 'host answers again');
          return;
        } catch (err) {
          const current = this.away.get(host);
          if (!current) return;
          current.until = Date.now() + AWAY_MS;
          if (err instanceof RuntimeUnreachable) current.reason = err.reason;
        }
      }
    } finally {
      const current = this.away.get(host);
      if (current) current.probing = false;
    }
  }

  /** Pings every host once (WATCH_PROBE_MS): one that does not answer is away. */
  private async probeAll(): Promise<void> {
    const engines = await this.allEngines().catch(() => []);
    await Promise.all(engines.filter((e) => !this.away.has(e.name)).map(async (e) => {
      try {
        await e.runtime.ping(AbortSignal.timeout(CONFIRM_TIMEOUT_MS));
      } catch (err) {
        if (err instanceof RuntimeUnreachable) this.markAway(e.name, err.reason);
      }
    }));
  }

  /** Every host's runtime that can be asked now, by name; hosts not registered properly are left out. */
  private async allEngines(): Promise<Array<{ name: string; runtime: DockerRuntime; record?: HostRecord }>> {
    const records = await this.opts.hosts.list();
    const remote = await Promise.all(records.filter((h) => h.name !== LOCAL_HOST && h.address)
      .map(async (h) => ({ name: h.name, runtime: await this.engine(h.name), record: h })));
    return [{ name: LOCAL_HOST, runtime: this.opts.local, record: records.find((h) => h.name === LOCAL_HOST) }, ...remote];
  }

  inspect(name: string): Promise<Inspection> {
    return this.inspectWith(name, (runtime) => runtime.inspect(name));
  }

  read(name: string): Promise<Inspection> {
    return this.inspectWith(name, (runtime) => runtime.read(name));
  }

  private async inspectWith(name: string, look: (runtime: DockerRuntime) => Promise<Inspection>): Promise<Inspection> {
    const cached = this.placed.get(name);
    const answer = await this.inspectOn(await this.hostNameOf(name), name, look);
    if ((answer.status !== 'deep_sleep' && answer.status !== 'unreachable') || cached === undefined) return answer;
    // a placement seen before may have been replaced by another process (volumes removed, made
    // elsewhere, moved: its old host then gone or away)
    const host = await this.placedAfresh(name);
    return host === cached ? answer : this.inspectOn(host, name, look);
  }

  private async inspectOn(host: string, name: string, look: (runtime: DockerRuntime) => Promise<Inspection>): Promise<Inspection> {
    try {
      return this.withinPool(host, name, await this.ask(host, async (runtime) => {
        const answer = await look(runtime);
        if (answer.status === 'unreachable') throw new RuntimeUnreachable(answer.reason);
        return answer;
      }));
    } catch (err) {
      if (err instanceof RuntimeUnreachable) return { status: 'unreachable', reason: err.reason };
      throw err;
    }
  }

  /**
   * The edge connects public clients to the address an engine reports: a runner host's (which may be
   * compromised) is used only inside that host's recorded pool, never 127.0.0.1 nor another host's
   * sandbox. One outside (or from a host with no pool recorded) leaves the sandbox without an address.
   */
  private withinPool<T extends Inspection>(host: string, name: string, answer: T): T {
    if (answer.status === 'unreachable' || answer.address === undefined) return answer;
    const pool = host === LOCAL_HOST ? this.opts.localPool : this.engines.get(host)?.record.pool;
    if (pool === undefined ? host === LOCAL_HOST : inPool(answer.address, pool)) return answer;
    this.opts.logger.warn({ host, sandbox: name, address: answer.address, pool: pool ?? null }, 'a host reported a sandbox address outside its pool: not used');
    const { address: _outside, ...rest } = answer;
    return rest as T;
  }

  /**
   * Makes the sandbox on its host: the one it is placed on, LOCAL_HOST for one that has volumes there
   * from before placements, else the host placement chooses (written once, atomically: of two
   * processes making the same sandbox, both use the first one's choice).
   */
  async create(spec: ContainerSpec): Promise<void> {
    await this.notMoving(spec.name);
    let host = await this.opts.hosts.placementOf(spec.name);
    let placedNow = false;
    if (!host) {
      // asked even when it makes the create wait for this machine's engine: volumes of a sandbox from
      // before placements (or from before isolation, on the main engine) must never be left behind for
      // an empty sandbox on another host
      const legacy = await this.opts.local.holds(spec.name);
      host = await this.opts.hosts.place(spec.name, legacy ? LOCAL_HOST : await this.choose());
      placedNow = true;
    }
    this.placed.set(spec.name, host);
    const engine = await this.engine(host).catch(async (err: unknown) => {
      // the host was removed between its choice and the placement (store/hosts.ts remove): nothing is there
      if (placedNow) {
        await this.opts.hosts.unplace(spec.name);
        this.placed.delete(spec.name);
      }
      throw err;
    });
    await this.ensureImage(host, engine);
    // a runner's sandboxes ask its nameservers: the ones its egress rules let through (scripts/runner.sh)
    const dns = host === LOCAL_HOST ? undefined : this.engines.get(host)?.record.dns; // the record engine() just read
    await engine.create(dns?.length ? { ...spec, env: { ...spec.env, SVC_DNS: dns.join(',') } } : spec);
  }

  /**
   * A sandbox being copied to another host (lifecycle/move.ts) starts nowhere: on its old host it would
   * run beside the copy, and its volumes there are being read. 503 with Retry-After (the edge keeps
   * showing the waiting page).
   */
  private async notMoving(name: string): Promise<void> {
    if (await this.opts.hosts.copying(name)) throw new errors.Busy(10, `sandbox "${name}" is moving to another host; try again shortly`);
  }

  /** The host with the most room (placementScore) among those not drained that answer in time, but `except`. */
  async choose(except?: string): Promise<string> {
    const loads = await Promise.all((await this.allEngines()).filter((h) => !h.record?.drained_at && h.name !== except).map(async (h): Promise<HostLoad | undefined> => {
      try {
        return { name: h.name, ...(await this.ask(h.name, (runtime) => runtime.capacity(AbortSignal.timeout(CAPACITY_ASK_MS)))) };
      } catch (err) {
        this.opts.logger.warn({ host: h.name, err: (err as Error).message }, 'placement: host left out (no answer)');
        return undefined;
      }
    }));
    const chosen = choosePlacement(loads.filter((l): l is HostLoad => l !== undefined));
    if (!chosen) throw new errors.HostFull(30, 'no host can take a new sandbox now (all drained, away, or without a free network); try again later');
    return chosen;
  }

  async start(name: string): Promise<RuntimeState> {
    await this.notMoving(name);
    const state = await (await this.runtimeOf(name)).start(name);
    return this.withinPool(await this.hostNameOf(name), name, state);
  }

  placementChanged(name: string): void {
    this.placed.delete(name);
  }

  async stop(name: string): Promise<void> {
    await (await this.runtimeOf(name)).stop(name);
  }

  async settle(name: string): Promise<void> {
    await (await this.runtimeOf(name)).settle(name);
  }

  /** Watches every host's engine known now, and each host's engine as it is first used. */
  watchStarts(): () => void {
    this.watching = true;
    const local = this.opts.local.watchStarts();
    for (const e of this.engines.values()) e.unwatch ??= e.runtime.watchStarts();
    void this.allEngines().catch(() => undefined);
    const probes = setInterval(() => void this.probeAll(), WATCH_PROBE_MS).unref();
    return () => {
      this.watching = false;
      clearInterval(probes);
      local();
      for (const e of this.engines.values()) {
        e.unwatch?.();
        e.unwatch = undefined;
      }
    };
  }

  async takeDown(name: string): Promise<void> {
    await (await this.runtimeOf(name)).takeDown(name);
  }

  async archiveVolumes(name: string, dir: string): Promise<void> {
    await this.notMoving(name);
    await (await this.runtimeOf(name)).archiveVolumes(name, dir);
  }

  /**
   * A fork is placed on its source's host (a copy within one engine, no transfer between hosts; a move
   * takes it elsewhere later), then its volumes are copied there.
   */
  async copyVolumes(from: string, to: string): Promise<void> {
    await this.notMoving(from);
    const host = await this.hostNameOf(from);
    const placedOn = await this.opts.hosts.place(to, host);
    if (placedOn !== host) throw new Error(`sandbox "${to}" is placed on "${placedOn}", not on its source's host "${host}"`);
    this.placed.set(to, host);
    await (await this.runtimeOf(from)).copyVolumes(from, to);
  }

  /** Removes the volumes, then the placement: nothing holds the sandbox to its host any more. */
  async removeVolumes(name: string): Promise<void> {
    await this.notMoving(name);
    await (await this.runtimeOf(name)).removeVolumes(name);
    await this.opts.hosts.unplace(name);
    this.placed.delete(name);
  }

  list(opts?: ListOptions): Promise<Array<{ name: string; running: boolean }>> {
    return this.gather((r) => r.list(opts), (s) => s.name);
  }

  withVolumes(): Promise<string[]> {
    return this.gather((r) => r.withVolumes(), (name) => name);
  }

  /**
   * One listing over every host. A host that cannot be asked is left out (logged): its sandboxes are
   * then not acted on, which is what reconcile does with a sandbox it does not see. Only when no host
   * answers does the listing fail. Each host answers only for the sandboxes placed on it: a container
   * left on another host, or one an engine on another machine merely claims, is never taken for the
   * sandbox (reconcile would act on the real one by its placement).
   */
  private async gather<T>(ask: (runtime: DockerRuntime) => Promise<T[]>, nameOf: (item: T) => string): Promise<T[]> {
    const engines = await this.allEngines();
    const answers = await Promise.allSettled(engines.map((e) => this.ask(e.name, ask)));
    // read after the answers: a sandbox placed is placed before its container is made. Only the
    // placements of the sandboxes answered (one query, store/hosts.ts): a wake lists the running ones
    // under the admission lease, and need not read the placements of 400 asleep ones.
    const named = [...new Set(answers.flatMap((a) => (a.status === 'fulfilled' ? a.value.map(nameOf) : [])))];
    const hosts = await Promise.all(named.map((name) => this.opts.hosts.placementOf(name)));
    const placements = new Map(named.map((name, i) => [name, hosts[i]]));
    const out: T[] = [];
    let failure: unknown;
    answers.forEach((a, i) => {
      const host = engines[i]!.name;
      if (a.status === 'fulfilled') return void out.push(...a.value.filter((item) => (placements.get(nameOf(item)) ?? LOCAL_HOST) === host));
      failure ??= a.reason;
      if (!(a.reason instanceof RuntimeUnreachable)) throw a.reason;
      this.opts.logger.debug({ host: engines[i]!.name, err: a.reason.reason }, 'host does not answer: its sandboxes are left out of this listing');
    });
    if (answers.every((a) => a.status === 'rejected')) throw failure;
    return out;
  }

  innerEngine(name: string, address: string, certs: EngineCerts, opts?: { timeoutMs?: number }): Docker {
    return this.opts.local.innerEngine(name, address, certs, opts);
  }

  /** Answers once any host's engine answers (the service works for the sandboxes of those). */
  async ping(): Promise<void> {
    await Promise.any((await this.allEngines()).map((e) => this.ask(e.name, (runtime) => runtime.ping()))).catch((err: AggregateError) => {
      throw err.errors[0];
    });
  }

  /**
   * The host a sandbox runs on, once its engine answers (null while it does not): a runner host by its
   * registered name, this machine by the name its engine gives (as before hosts existed).
   */
  async hostOf(name: string): Promise<string | null> {
    const host = await this.hostNameOf(name);
    const runtime = await this.engine(host).catch(() => undefined);
    const answer = runtime ? await runtime.hostOf(name) : null;
    return answer !== null && host !== LOCAL_HOST ? host : answer;
  }

  async resourceUse(name: string, signal?: AbortSignal): Promise<ResourceUse | undefined> {
    return (await this.runtimeOf(name)).resourceUse(name, signal);
  }

  async diskUse(name: string): Promise<DiskUse> {
    return (await this.runtimeOf(name)).diskUse(name);
  }

  /** Images come from the service machine's engine: the management tool loads them into a sandbox's own engine. */
  imageInputs(image: string): Promise<string | undefined> {
    return this.opts.local.imageInputs(image);
  }

  saveImage(image: string): Promise<NodeJS.ReadableStream> {
    return this.opts.local.saveImage(image);
  }

  /**
   * Memory (MB) and cores of every host that answers, added up, for the admission guard; asked at most
   * every MACHINES_TTL_MS (a host's size does not change, the set of hosts rarely). Undefined when none answers.
   */
  async machines(): Promise<{ memoryMb: number; cpus: number; hosts: number } | undefined> {
    if (!this.machinesSeen || Date.now() - this.machinesSeen.at > MACHINES_TTL_MS) {
      const loads = (await this.loads()).flatMap((h) => (h.load ? [h.load] : []));
      const figures = loads.length === 0 ? undefined : {
        memoryMb: Math.floor(loads.reduce((sum, l) => sum + l.memoryBytes, 0) / 2 ** 20),
        cpus: loads.reduce((sum, l) => sum + l.cpus, 0),
        hosts: loads.length,
      };
      this.machinesSeen = { at: Date.now(), figures };
    }
    return this.machinesSeen.figures;
  }

  /** Every host with its figures, for `svc hosts list`: undefined figures for a host that does not answer. */
  async loads(): Promise<Array<{ name: string; record?: HostRecord; load?: EngineCapacity; error?: string }>> {
    return Promise.all((await this.allEngines()).map(async (h) => {
      try {
        return { name: h.name, record: h.record, load: await this.ask(h.name, (runtime) => runtime.capacity(AbortSignal.timeout(CAPACITY_ASK_MS))) };
      } catch (err) {
        return { name: h.name, record: h.record, error: err instanceof RuntimeUnreachable ? err.reason : (err as Error).message };
      }
    }));
  }
}
