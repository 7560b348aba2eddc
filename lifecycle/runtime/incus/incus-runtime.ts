import type Docker from 'dockerode';
import type { Logger } from '../../../core/logger.ts';
import type { EngineCerts } from '../../../store/index.ts';
import { imageInputs, saveImage } from '../docker-images.ts';
import { innerEngine } from '../inner-engine.ts';
import { KeptStates } from '../kept-states.ts';
import {
  reachable, type ContainerSpec, type DiskUse, type Inspection, type ListOptions, type ResourceUse, type RuntimeState, type SandboxRuntime,
} from '../sandbox-runtime.ts';
import { IncusError, type IncusClient } from './incus-client.ts';
import { archiveInstance } from './incus-archive.ts';
import { copyInstance, instanceConfig, KEY_DEEP, KEY_FINISHED, KEY_INSTANCE, leftFrozen, runs, type Instance } from './incus-instance.ts';
import { diskUse, machines, resourceUse } from './incus-readings.ts';
import { incusRun } from './incus-exec.ts';
import { IncusExecutor } from './incus-executor.ts';
import { guarded as guardedCall, unreachableReason } from './incus-unreachable.ts';
import { sandboxEnvironment } from './incus-sandbox-files.ts';
import { watchInstanceEvents } from './incus-events.ts';
import { IncusHosts } from './incus-hosts.ts';
import { MemberHealth } from './incus-members.ts';
import { InstanceReads } from './incus-reads.ts';
import { routedNic, type SandboxAddresses } from './incus-network.ts';

/**
 * The sandbox runtime on Incus (issue 34, docs/incus.md): a sandbox is a system container made from
 * the image alias `svc-sandbox` under the profiles `default` and `svc-sandbox` (scripts/incus-host.sh),
 * on one daemon or a cluster (any member answers for all). Everything the sandbox keeps lives in its
 * root volume, so one move or evacuation carries it whole.
 *
 * SVC_RUNTIME=incus (open-incus-runtime.ts). Deep sleep is a stopped container marked `user.svc.deep`
 * (a stopped LXC container costs only its disk, and its root volume is its volumes): a create of a
 * sandbox in deep sleep writes its configuration again (environment, limits), as the Docker runtime
 * makes a new container. Addresses come from the store's table (incus-network.ts). No folder
 * is shared with the service (a cluster's members are other machines): files go through exec stdin.
 */
export interface IncusRuntimeOptions {
  /** Names this service's sandboxes (`user.svc.instance`): lists show no other. */
  instance: string;
  /** The routed NICs' addresses (the store's table: incus-network.ts). */
  addresses: SandboxAddresses;
  /** Addresses the pool hands out: what `svc hosts list` shows a member can hold. */
  poolSize: number;
  /** With `parent`, proxy ARP announces each address on that link (a cluster's shared network). */
  nicParent?: string;
  limits: { memoryMb: number; cpus: number; pids: number };
  /** The Docker engine of the service's host that holds the management tool's image; absent: none answers. */
  toolImages?: Docker;
  logger: Logger;
}


export class IncusRuntime implements SandboxRuntime {
  readonly exec: IncusExecutor;
  /** Which cluster members are lost, known sooner than Incus knows it (incus-members.ts). */
  readonly health: MemberHealth;
  /** The members as `svc hosts …` sees them (incus-hosts.ts). */
  readonly hosts: IncusHosts;
  /** What reads take each sandbox's state to be, while Incus's lifecycle events are watched (watchStarts). */
  private readonly kept = new KeptStates();
  /** Incus's instances as the runtime reads them, never held up by a lost member (incus-reads.ts). */
  private readonly reads: InstanceReads;

  constructor(private readonly incus: IncusClient, private readonly opts: IncusRuntimeOptions) {
    this.health = new MemberHealth(incus);
    this.reads = new InstanceReads(incus, this.health, opts.instance);
    this.exec = new IncusExecutor(incus, (sandbox) => this.reads.lostOn(sandbox));
    this.hosts = new IncusHosts(incus, this.health, this, { instance: opts.instance, poolSize: opts.poolSize });
  }

  /**
   * A sandbox on a member known lost (MemberHealth) is unreachable at once, without asking Incus: a
   * cluster forwards a request for it to its member, and a list of all waits 20 s on a lost one.
   * Else `GET /1.0/instances/{name}` (forwarded to its live member).
   */
  async inspect(name: string): Promise<Inspection> {
    const lost = this.reads.lostOn(name);
    if (lost) return { status: 'unreachable', reason: lost };
    let found: Instance | undefined;
    try {
      found = await this.reads.withState(name);
    } catch (err) {
      const reason = unreachableReason(err, { read: true });
      if (reason) return { status: 'unreachable', reason };
      throw err;
    }
    // a lost member's instance lists as Error with no config (whose it is cannot be told): unreachable
    if (found?.status === 'Error') return { status: 'unreachable', reason: `Incus member ${found.location} does not answer` };
    if (!found || found.config[KEY_INSTANCE] !== this.opts.instance || found.config[KEY_DEEP] === 'true') return { status: 'deep_sleep' };
    const running = runs(found);
    const address = running ? found.state?.network?.eth0?.addresses.find((a) => a.family === 'inet')?.address : undefined;
    return {
      status: running ? 'running' : 'exited',
      ...(address ? { address } : {}),
      ...(running && found.state?.started_at ? { startedAt: found.state.started_at } : {}),
      ...(!running && found.config[KEY_FINISHED] ? { finishedAt: found.config[KEY_FINISHED] } : {}),
    };
  }

  /** inspect()'s answer for reads: while the events are watched, what they kept of the sandbox since its last inspect. */
  read(name: string): Promise<Inspection> {
    return this.kept.read(name, (n) => this.inspect(n));
  }

  /** Runs a call that changes a sandbox, then forgets what reads kept of it. */
  private async changing<T>(name: string, call: () => Promise<T>): Promise<T> {
    try {
      return await this.guarded(name, call);
    } finally {
      this.kept.changed(name);
    }
  }

  /** A call about sandbox `name`: a failure that means its member cannot be reached is RuntimeUnreachable (incus-unreachable.ts). */
  private guarded<T>(name: string, call: () => Promise<T>): Promise<T> {
    return guardedCall(call, () => this.reads.lostOn(name));
  }

  /**
   * A new instance, or, for one in deep sleep (or a fork's copy), its configuration written again
   * from `spec`: the environment (certificates, keys) and limits of now, as a new Docker container has.
   */
  create(spec: ContainerSpec): Promise<void> {
    return this.changing(spec.name, async () => {
      const existing = await this.reads.ours(spec.name);
      if (existing && existing.config[KEY_DEEP] !== 'true') return;
      const env = sandboxEnvironment(spec.env);
      if (existing) {
        await this.setConfig(existing, instanceConfig(spec, env.environment, this.opts), { dropEnvironment: true });
      } else {
        await this.incus.act('POST', '/1.0/instances', {
          name: spec.name, type: 'container', source: { type: 'image', alias: 'svc-sandbox' }, profiles: ['default', 'svc-sandbox'],
          config: { ...instanceConfig(spec, env.environment, this.opts), [KEY_DEEP]: 'true' },
          devices: { eth0: await this.nic(spec.name) },
        });
      }
      // in deep sleep until its files are written: a create cut short is made again, never started half made
      await env.write(this.incus, spec.name);
      await this.setConfig((await this.reads.ours(spec.name))!, { [KEY_DEEP]: null });
    });
  }

  /** The sandbox's routed NIC, with the address it holds (held now if it has none). */
  private async nic(name: string): Promise<Record<string, string>> {
    return routedNic(await this.opts.addresses.hold(name), this.opts.nicParent);
  }

  /** Starts it, and answers its state once its own engine answers (with its address). */
  start(name: string): Promise<RuntimeState> {
    return this.guarded(name, async () => {
      const i = await this.mustExist(name);
      this.kept.ownStart(name, i.status !== 'Running');
      try {
        if (i.status === 'Frozen') await this.state(name, 'unfreeze'); // a fork's freeze its process did not end
        else if (i.status !== 'Running') await this.state(name, 'start');
        await this.acceptsCommands(name);
        return await this.kept.afterChange(name, async () => reachable(await this.inspect(name)));
      } catch (err) {
        this.kept.changed(name);
        throw err;
      }
    });
  }

  /** Already stopped, in deep sleep or gone: nothing to do (a finished archive's second finish, a DELETE of a sandbox in deep sleep). */
  stop(name: string): Promise<void> {
    return this.changing(name, async () => {
      const i = await this.reads.ours(name);
      if (i && i.config[KEY_DEEP] !== 'true' && runs(i)) {
        // dockerd stops its containers on the profile's halt signal (SIGTERM); LXC kills after the timeout
        await this.state(name, 'stop', { timeout: 30 });
        await this.setConfig(i, { [KEY_FINISHED]: new Date().toISOString() });
      }
    });
  }

  private async state(name: string, action: string, more: Record<string, unknown> = {}): Promise<void> {
    await this.incus.act('PUT', `/1.0/instances/${encodeURIComponent(name)}/state`, { action, ...more });
  }

  /**
   * Waits until the sandbox's own engine answers a command run in it. Until then Incus's exec fails now
   * and then (`Failed to retrieve PID of executing child process`: 3 of 10 execs right after a start,
   * and 1 of 10 after a first `true` had run), seemingly while the inner dockerd sets up its cgroups.
   */
  private async acceptsCommands(name: string): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        if ((await incusRun(this.incus, name, ['docker', 'version', '--format', '{{.Server.Version}}'])).exitCode === 0) return;
      } catch (err) {
        if (!(err instanceof IncusError)) throw err;
      }
      if (i >= 400) throw new Error(`the engine in sandbox ${name} did not answer within 20 s of its start`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * A freeze that a fork's copy left (its process died between freeze and unfreeze) is ended; LXC gives
   * cgroups and network itself. A fork at work is left alone: a reconcile pass's settle that unfroze
   * the source mid-snapshot made the fork's own unfreeze fail ("The container is already running").
   */
  settle(name: string): Promise<void> {
    return this.guarded(name, async () => {
      const i = await this.reads.ours(name);
      if (i && leftFrozen(i)) {
        this.opts.logger.warn({ sandbox: name }, 'a fork left the sandbox frozen: unfrozen');
        await this.state(name, 'unfreeze');
      }
    });
  }

  /**
   * Incus's lifecycle events (incus-events.ts): each instance event makes reads ask again, and a start
   * that is not this runtime's own (a member's restart, `incus cluster restore`) is settled. Returns a
   * function that stops watching.
   */
  watchStarts(): () => void {
    const stopEvents = watchInstanceEvents(this.incus, (e) => {
      // (a cluster move's `instance-migrated` comes from the member it left: m3 for a move m3 → m1 here)
      if (e.location && e.action !== 'instance-migrated') this.reads.where.set(e.instance, e.location);
      if (e.action === 'instance-started' && this.kept.startedByUs(e.instance)) return;
      this.kept.changed(e.instance);
      if (e.action === 'instance-started') {
        void this.settle(e.instance).catch((err) => this.opts.logger.warn({ sandbox: e.instance, err: (err as Error).message }, 'settling a sandbox Incus started failed'));
      }
    }, (up) => this.kept.eventsNow(up));
    // a member lost or back: what reads kept of its sandboxes goes; those another process moved off it
    // since they were last read here are found where they went (their reads would take them for lost)
    const stopHealth = this.health.watch((member, lost) => {
      for (const [name, on] of this.reads.where) if (on === member) this.kept.changed(name);
      if (lost) {
        void this.reads.seenElsewhere(member).then((moved) => { for (const name of moved) this.kept.changed(name); }, () => undefined);
      }
    });
    return () => {
      stopEvents();
      stopHealth();
    };
  }

  takeDown(name: string): Promise<void> {
    return this.changing(name, async () => {
      const i = await this.reads.ours(name);
      if (!i || i.config[KEY_DEEP] === 'true') return;
      if (runs(i)) await this.state(name, 'stop', { timeout: 30 });
      await this.setConfig(i, { [KEY_DEEP]: 'true' });
    });
  }

  async archiveVolumes(name: string, dir: string): Promise<void> {
    await this.guarded(name, async () => {
      await this.mustHaveVolumes(name);
      await archiveInstance(this.incus, name, dir);
    });
  }

  /** The instance goes, and then its address (also when a failed create or copy made no instance). */
  removeVolumes(name: string): Promise<void> {
    return this.changing(name, async () => {
      // a lost member's instance is unreachable (reads.one): it may be ours, and it holds its address
      const i = await this.reads.one(name);
      if (i?.config[KEY_INSTANCE] !== this.opts.instance) {
        if (!i) await this.opts.addresses.release(name);
        return;
      }
      if (runs(i)) await this.state(name, 'stop', { force: true });
      await this.incus.act('DELETE', `/1.0/instances/${encodeURIComponent(name)}`).catch((err) => {
        if (!(err instanceof IncusError && err.status === 404)) throw err;
      });
      await this.opts.addresses.release(name);
    });
  }

  /**
   * A fork: `to` made as an Incus copy of `from` on `from`'s member (incus-instance.ts), in deep sleep
   * with an address of its own until its create writes its configuration.
   */
  copyVolumes(from: string, to: string): Promise<void> {
    return this.changing(to, async () => {
      const source = await this.mustHaveVolumes(from);
      if (await this.reads.ours(to)) throw new Error(`sandbox ${to} exists already`);
      await copyInstance(this.incus, source, to, { [KEY_DEEP]: 'true' }, { eth0: await this.nic(to) });
    });
  }

  /**
   * Where a sandbox is since a move (IncusHosts', this process's or, told by the lifecycle news, the
   * operator's `svc hosts move`): a read of it while its old member is lost must not take it for lost,
   * and what reads kept of it goes.
   */
  movedTo(name: string, member: string): void {
    this.reads.where.set(name, member);
    this.kept.changed(name);
  }

  /** This service's instances: a lost member's left out, and never waited for (incus-reads.ts). */
  instances(): Promise<Instance[]> {
    return this.reads.list();
  }

  async list(opts: ListOptions = {}): Promise<Array<{ name: string; running: boolean }>> {
    return guardedCall(async () => (await this.instances())
      .filter((i) => i.config[KEY_DEEP] !== 'true' && (!opts.running || runs(i)))
      .map((i) => ({ name: i.name, running: runs(i) })));
  }

  async withVolumes(): Promise<string[]> {
    return guardedCall(async () => (await this.instances()).map((i) => i.name));
  }

  /** The sandbox's own dockerd at its routed address, over the mutual TLS users get (as on Docker). */
  innerEngine(name: string, address: string, certs: EngineCerts, opts: { timeoutMs?: number } = {}): Docker {
    return innerEngine(name, address, certs, opts);
  }

  /** The daemon's machine, or the cluster's online members, added up: what the admission guard measures on. */
  capacity(): Promise<{ memoryMb: number; cpus: number; hosts: number } | undefined> {
    return guardedCall(() => machines(this.incus));
  }

  /** The client's connections closed (the service's close): no handle left open. Stop watchStarts first. */
  async close(): Promise<void> {
    await this.incus.close();
  }

  async ping(): Promise<void> {
    await guardedCall(() => this.incus.get('/1.0'));
  }

  /**
   * The cluster member the sandbox is on (its `location`; `none` for a daemon that is not clustered):
   * a lost member's sandbox by where it was last seen (asking would wait on the member), else asked.
   */
  async hostOf(name: string): Promise<string | null> {
    if (this.reads.lostOn(name)) return this.reads.where.get(name)!;
    try {
      return (await this.reads.withState(name))?.location ?? null;
    } catch {
      return null;
    }
  }

  /** A sandbox on a member known lost is RuntimeUnreachable at once; `signal` bounds the read (a forward to a member just lost waits its dial). */
  async resourceUse(name: string, signal?: AbortSignal): Promise<ResourceUse | undefined> {
    return this.guarded(name, async () => resourceUse(await this.reads.withState(name, signal)));
  }

  diskUse(name: string): Promise<DiskUse> {
    return diskUse(this.exec, name);
  }

  /** The management tool's image comes from the Docker engine of the service's host (where setup builds it). */
  imageInputs(image: string): Promise<string | undefined> {
    return imageInputs(this.toolEngine(), image);
  }

  saveImage(image: string): Promise<NodeJS.ReadableStream> {
    return saveImage(this.toolEngine(), image);
  }

  private toolEngine(): Docker {
    if (!this.opts.toolImages) {
      throw new Error('the management tool image is loaded from a Docker engine on the service\'s host, and none answered when the service started: install Docker there and build the image ("npm run setup"), then restart the service');
    }
    return this.opts.toolImages;
  }

  private async mustHaveVolumes(name: string): Promise<Instance> {
    const i = await this.reads.ours(name);
    if (!i) throw new Error(`no volumes for sandbox ${name}`);
    return i;
  }

  private async mustExist(name: string): Promise<Instance> {
    const i = await this.reads.ours(name);
    if (!i || i.config[KEY_DEEP] === 'true') throw new Error(`no container for sandbox ${name}`);
    return i;
  }

  /**
   * Sets (or, with null, removes) config keys of an instance; PATCH merges, so a removal is a PUT.
   * `dropEnvironment`: its `environment.*` keys go first (the new ones are in `keys`).
   */
  private async setConfig(i: Instance, keys: Record<string, string | null>, opts: { dropEnvironment?: boolean } = {}): Promise<void> {
    const path = `/1.0/instances/${encodeURIComponent(i.name)}`;
    // only keys set: one PATCH (a sleep's mark costs no read of the whole instance)
    if (!opts.dropEnvironment && Object.values(keys).every((v) => v !== null)) return void (await this.incus.act('PATCH', path, { config: keys }));
    const current = await this.incus.get<Instance & { profiles: string[]; description: string }>(path);
    const config = Object.fromEntries(Object.entries(current.config).filter(([k]) => !(opts.dropEnvironment && k.startsWith('environment.'))));
    for (const [k, v] of Object.entries(keys)) if (v === null) delete config[k]; else config[k] = v;
    await this.incus.act('PUT', path, { config, devices: current.devices, profiles: current.profiles, description: current.description });
  }
}
