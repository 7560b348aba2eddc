import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import { errors } from '../../core/errors.ts';
import { LOCAL_HOST, type HostStore, type EngineCerts, type HostRecord } from '../../store/index.ts';
import type { DockerRuntime } from './docker-runtime.ts';
import { HostHealth } from './host-health.ts';
import type { Capacity, HostOperations } from './host-operations.ts';
import { HostPlacement, inPool } from './host-placement.ts';
import { HostSetOperations } from './host-set-operations.ts';
import { ImageSync } from './image-sync.ts';
import {
  RuntimeUnreachable, type ContainerSpec, type DiskUse, type Inspection, type ListOptions, type ResourceUse, type RuntimeState, type SandboxExecutor, type SandboxRuntime,
} from './sandbox-runtime.ts';

/**
 * How often every host is pinged while the service watches (watchStarts): a host that falls silent
 * with its events stream still open (powered off behind a link that stays up) would otherwise go on
 * answering reads from what its events kept.
 */
const WATCH_PROBE_MS = 5000;

export interface HostSetOptions {
  /** The engine of the machine the service runs on: LOCAL_HOST, a runner host with nothing to configure. */
  local: DockerRuntime;
  hosts: HostStore;
  /** A runtime on a registered host's engine. */
  connect(host: HostRecord): DockerRuntime;
  /** The pool of `local`'s addresses; undefined: its addresses are taken as they come (the main engine). */
  localPool?: string;
  logger: Logger;
  /** The set of hosts changed (one removed): this machine's routes to their pools follow. */
  poolsChanged?: () => Promise<void>;
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
  private readonly health: HostHealth<DockerRuntime>;
  /** Where new sandboxes and moves go, from each host's figures. */
  readonly placement: HostPlacement<DockerRuntime>;
  /** Its hosts as `svc hosts …` and reconcile's move recovery use them. */
  readonly hosts: HostOperations;

  constructor(private readonly opts: HostSetOptions) {
    this.images = new ImageSync(opts.local, opts.logger);
    this.health = new HostHealth({ logger: opts.logger, engine: (host) => this.engine(host) });
    this.placement = new HostPlacement({ hosts: () => this.allEngines(), ask: (host, call) => this.ask(host, call), logger: opts.logger });
    this.hosts = new HostSetOperations(this, opts.hosts, opts.poolsChanged ?? (async () => undefined));
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
      this.health.throwIfAway(host);
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

  private ask<T>(host: string, call: (runtime: DockerRuntime) => Promise<T>): Promise<T> {
    return this.health.ask(host, call);
  }

  /** Pings every host once (WATCH_PROBE_MS): one that does not answer is away. */
  private async probeAll(): Promise<void> {
    const engines = await this.allEngines().catch(() => []);
    await this.health.probe(engines.map((e) => ({ name: e.name, engine: e.runtime })));
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
      const legacy = await this.opts.local.volumes.holds(spec.name);
      host = await this.opts.hosts.place(spec.name, legacy ? LOCAL_HOST : await this.placement.choose());
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

  /** The hosts that answer, added up (placement keeps the figures a while). */
  capacity(): Promise<Capacity | undefined> {
    return this.placement.capacity();
  }
}
