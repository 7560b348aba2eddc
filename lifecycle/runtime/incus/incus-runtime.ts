import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { EngineCerts } from '../../../store/index.ts';
import {
  reachable, RuntimeUnreachable, type ContainerSpec, type DiskUse, type ExecProcess, type ExecResult, type Inspection, type ListOptions,
  type ResourceUse, type RuntimeState, type SandboxExecutor, type SandboxRuntime,
} from '../sandbox-runtime.ts';
import { IncusError, IncusUnreachable, type IncusClient } from './incus-client.ts';
import { archiveInstance } from './incus-archive.ts';
import { incusRun, incusStart } from './incus-exec.ts';

/**
 * The sandbox runtime on Incus (issue 34, docs/incus.md): a sandbox is a system container made from
 * the image alias `svc-sandbox` under the profiles `default` and `svc-sandbox` (scripts/incus-host.sh),
 * on one daemon or a cluster (any member answers for all). Everything the sandbox keeps lives in its
 * root volume, so one move or evacuation carries it whole.
 *
 * Begun, not finished: not wired into the service. Deep sleep is a stopped container marked
 * `user.svc.deep` (a stopped LXC container costs only its disk, and its root volume is its volumes);
 * terminals, the inner engine's client, the events watch and the tool images are not done yet and
 * say so. Addresses come from a pool the runtime scans (one service process; the address table in the
 * store of issue §3 replaces it).
 */
export interface IncusRuntimeOptions {
  /** Names this service's sandboxes (`user.svc.instance`): lists show no other. */
  instance: string;
  /** The routed NICs' pool, a /16 or smaller IPv4 network ("100.73.0.0/16"). */
  addressPool: string;
  /** With `parent`, proxy ARP announces each address on that link (a cluster's shared network). */
  nicParent?: string;
  limits: { memoryMb: number; cpus: number; pids: number };
}

interface InstanceState {
  status: string;
  pid?: number;
  started_at?: string;
  memory?: { usage: number };
  cpu?: { usage: number };
  network?: Record<string, { addresses: Array<{ family: string; address: string }> }>;
}

interface Instance {
  name: string;
  status: string;
  location: string;
  /** null for an instance of a member that does not answer */
  config: Record<string, string>;
  devices: Record<string, Record<string, string>>;
  last_used_at?: string;
  state?: InstanceState;
}

const LIST = '/1.0/instances?recursion=1';
const KEY_INSTANCE = 'user.svc.instance';
const KEY_DEEP = 'user.svc.deep';
const KEY_FINISHED = 'user.svc.finished_at';

export class IncusRuntime implements SandboxRuntime {
  readonly exec: SandboxExecutor;

  constructor(private readonly incus: IncusClient, private readonly opts: IncusRuntimeOptions) {
    this.exec = new IncusExecutor(incus);
  }

  /**
   * From the list, never `GET /1.0/instances/{name}`: a cluster forwards that to the sandbox's member,
   * and a lost member's makes it wait 20 s; the list answers at once and says `Error` for it.
   */
  async inspect(name: string): Promise<Inspection> {
    let found: Instance | undefined;
    try {
      found = (await this.incus.get<Instance[]>(`/1.0/instances?recursion=2&filter=${encodeURIComponent(`name eq ${name}`)}`)).find((i) => i.name === name);
    } catch (err) {
      if (err instanceof IncusUnreachable) return { status: 'unreachable', reason: err.reason };
      throw err;
    }
    // a lost member's instance lists as Error with no config (whose it is cannot be told): unreachable
    if (found?.status === 'Error') return { status: 'unreachable', reason: `Incus member ${found.location} does not answer` };
    if (!found || found.config[KEY_INSTANCE] !== this.opts.instance || found.config[KEY_DEEP] === 'true') return { status: 'deep_sleep' };
    const running = found.status === 'Running';
    const address = running ? found.state?.network?.eth0?.addresses.find((a) => a.family === 'inet')?.address : undefined;
    return {
      status: running ? 'running' : 'exited',
      ...(address ? { address } : {}),
      ...(running && found.state?.started_at ? { startedAt: found.state.started_at } : {}),
      ...(!running && found.config[KEY_FINISHED] ? { finishedAt: found.config[KEY_FINISHED] } : {}),
    };
  }

  read(name: string): Promise<Inspection> {
    return this.inspect(name);
  }

  async create(spec: ContainerSpec): Promise<void> {
    await guarded(async () => {
      const existing = await this.ours(spec.name);
      if (existing) {
        if (existing.config[KEY_DEEP] === 'true') await this.setConfig(existing, { [KEY_DEEP]: null });
        return;
      }
      const memoryMb = spec.limits?.memoryMb ?? this.opts.limits.memoryMb;
      const cpus = spec.limits?.cpus ?? this.opts.limits.cpus;
      await this.incus.act('POST', '/1.0/instances', {
        name: spec.name, type: 'container', source: { type: 'image', alias: 'svc-sandbox' }, profiles: ['default', 'svc-sandbox'],
        config: {
          [KEY_INSTANCE]: this.opts.instance,
          'limits.memory': `${memoryMb}MiB`,
          'limits.cpu.allowance': `${Math.round(cpus * 100)}%`,
          'limits.processes': String(this.opts.limits.pids),
          ...Object.fromEntries(Object.entries(spec.env).map(([k, v]) => [`environment.${k}`, v])),
        },
        devices: { eth0: { type: 'nic', nictype: 'routed', 'ipv4.address': await this.freeAddress(), ...(this.opts.nicParent ? { parent: this.opts.nicParent } : {}) } },
      });
    });
  }

  /** Starts it, and answers its state then (with its address). */
  async start(name: string): Promise<RuntimeState> {
    await guarded(async () => {
      const i = await this.mustExist(name);
      if (i.status !== 'Running') {
        await this.incus.act('PUT', `/1.0/instances/${encodeURIComponent(name)}/state`, { action: 'start' });
        await this.acceptsCommands(name);
      }
    });
    return reachable(await this.inspect(name));
  }

  async stop(name: string): Promise<void> {
    await guarded(async () => {
      const i = await this.mustExist(name);
      if (i.status === 'Running') {
        // dockerd stops its containers on the profile's halt signal (SIGTERM); LXC kills after the timeout
        await this.incus.act('PUT', `/1.0/instances/${encodeURIComponent(name)}/state`, { action: 'stop', timeout: 30 });
        await this.setConfig(i, { [KEY_FINISHED]: new Date().toISOString() });
      }
    });
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

  /** Nothing to settle: LXC gives a container its cgroups and network as it starts. */
  async settle(_name: string): Promise<void> {}

  watchStarts(): () => void {
    throw new Error('IncusRuntime.watchStarts: the lifecycle events stream is not done yet');
  }

  async takeDown(name: string): Promise<void> {
    await guarded(async () => {
      const i = await this.ours(name);
      if (!i || i.config[KEY_DEEP] === 'true') return;
      if (i.status === 'Running') await this.incus.act('PUT', `/1.0/instances/${encodeURIComponent(name)}/state`, { action: 'stop', timeout: 30 });
      await this.setConfig(i, { [KEY_DEEP]: 'true' });
    });
  }

  async archiveVolumes(name: string, dir: string): Promise<void> {
    await guarded(async () => {
      await this.mustHaveVolumes(name);
      await archiveInstance(this.incus, name, dir);
    });
  }

  async removeVolumes(name: string): Promise<void> {
    await guarded(async () => {
      const i = await this.ours(name);
      if (!i) return;
      if (i.status === 'Running') await this.incus.act('PUT', `/1.0/instances/${encodeURIComponent(name)}/state`, { action: 'stop', force: true });
      await this.incus.act('DELETE', `/1.0/instances/${encodeURIComponent(name)}`).catch((err) => {
        if (!(err instanceof IncusError && err.status === 404)) throw err;
      });
    });
  }

  async list(opts: ListOptions = {}): Promise<Array<{ name: string; running: boolean }>> {
    return guarded(async () => (await this.all())
      .filter((i) => i.config[KEY_DEEP] !== 'true' && (!opts.running || i.status === 'Running'))
      .map((i) => ({ name: i.name, running: i.status === 'Running' })));
  }

  async withVolumes(): Promise<string[]> {
    return guarded(async () => (await this.all()).map((i) => i.name));
  }

  innerEngine(_name: string, _address: string, _certs: EngineCerts): Docker {
    throw new Error('IncusRuntime.innerEngine is not done yet');
  }

  async ping(): Promise<void> {
    await guarded(() => this.incus.get('/1.0'));
  }

  /** The cluster member the sandbox is on (its `location`; `none` for a daemon that is not clustered). */
  async hostOf(name: string): Promise<string | null> {
    try {
      return (await this.ours(name))?.location ?? null;
    } catch {
      return null;
    }
  }

  /** Nothing kept: every call asks Incus, which knows each sandbox's member. */
  placementChanged(_name: string): void {}

  async resourceUse(name: string): Promise<ResourceUse | undefined> {
    return guarded(async () => {
      const i = (await this.incus.get<Instance[]>(`/1.0/instances?recursion=2&filter=${encodeURIComponent(`name eq ${name}`)}`)).find((x) => x.name === name);
      if (!i || i.status !== 'Running' || !i.state) return undefined;
      return {
        at: Date.now(),
        cpuNs: i.state.cpu?.usage ?? 0,
        cpuLimit: Number.parseInt(i.config['limits.cpu.allowance'] ?? '100', 10) / 100,
        memoryBytes: i.state.memory?.usage ?? 0,
        memoryLimitBytes: Number.parseInt(i.config['limits.memory'] ?? '0', 10) * 1024 * 1024,
      };
    });
  }

  async diskUse(name: string): Promise<DiskUse> {
    const r = await this.exec.run(name, ['sh', '-c', 'du -sxk / 2>/dev/null | cut -f1; df -Pk / | awk "NR==2 {print \\$4}"']);
    const [used, free] = r.stdout.toString().trim().split('\n').map((x) => Number(x));
    if (r.exitCode !== 0 || !Number.isFinite(used) || !Number.isFinite(free)) throw new Error(`could not read the disk use of ${name}`);
    return { usedBytes: used! * 1024, freeBytes: free! * 1024, complete: true };
  }

  imageInputs(_image: string): Promise<string | undefined> {
    return Promise.reject(new Error('IncusRuntime.imageInputs is not done yet'));
  }

  saveImage(_image: string): Promise<NodeJS.ReadableStream> {
    return Promise.reject(new Error('IncusRuntime.saveImage is not done yet'));
  }

  /**
   * This service's instances. A lost member's are left out (Incus lists them as Error without their
   * config), as the runner hosts' runtime leaves out the sandboxes of a host that does not answer.
   */
  private async all(): Promise<Instance[]> {
    return (await this.incus.get<Instance[]>(LIST)).filter((i) => i.config?.[KEY_INSTANCE] === this.opts.instance);
  }

  private async ours(name: string): Promise<Instance | undefined> {
    return (await this.all()).find((i) => i.name === name);
  }

  private async mustHaveVolumes(name: string): Promise<Instance> {
    const i = await this.ours(name);
    if (!i) throw new Error(`no volumes for sandbox ${name}`);
    return i;
  }

  private async mustExist(name: string): Promise<Instance> {
    const i = await this.ours(name);
    if (!i || i.config[KEY_DEEP] === 'true') throw new Error(`no container for sandbox ${name}`);
    return i;
  }

  /** Sets (or, with null, removes) config keys of an instance; PATCH merges, so a removal is a PUT. */
  private async setConfig(i: Instance, keys: Record<string, string | null>): Promise<void> {
    const path = `/1.0/instances/${encodeURIComponent(i.name)}`;
    const current = await this.incus.get<Instance & { profiles: string[]; description: string }>(path);
    const config = { ...current.config };
    for (const [k, v] of Object.entries(keys)) if (v === null) delete config[k]; else config[k] = v;
    await this.incus.act('PUT', path, { config, devices: current.devices, profiles: current.profiles, description: current.description });
  }

  /** The lowest address of the pool that no instance of the daemon (or cluster) holds. */
  private async freeAddress(): Promise<string> {
    // a lost member's instances list without devices: their addresses are unknown, so none is handed out then
    const all = await this.incus.get<Instance[]>(LIST);
    if (all.some((i) => !i.devices)) throw new RuntimeUnreachable('an Incus member does not answer: the addresses its sandboxes hold are unknown');
    const taken = new Set(all.map((i) => i.devices.eth0?.['ipv4.address']).filter(Boolean));
    const [base, bits] = this.opts.addressPool.split('/');
    const start = base!.split('.').reduce((n, o) => n * 256 + Number(o), 0);
    const size = 2 ** (32 - Number(bits));
    for (let n = 2; n < size - 1; n++) {
      const v = start + n;
      const address = [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
      if (!taken.has(address)) return address;
    }
    throw new Error(`no free address left in ${this.opts.addressPool}`);
  }
}

/** Commands in a running sandbox (terminals are not done yet). */
class IncusExecutor implements SandboxExecutor {
  constructor(private readonly incus: IncusClient) {}

  run(sandbox: string, cmd: string[], input?: Buffer | string): Promise<ExecResult & { stdout: Buffer }> {
    return guarded(() => incusRun(this.incus, sandbox, cmd, input));
  }

  start(sandbox: string, cmd: string[], opts: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void } = {}): Promise<ExecProcess> {
    return guarded(() => incusStart(this.incus, sandbox, cmd, opts));
  }

  startTerminal(): Promise<never> {
    return Promise.reject(new Error('IncusExecutor.startTerminal is not done yet'));
  }

  /** A tar of `path` as `docker cp` gives it: its last component at the top. */
  async getArchive(sandbox: string, path: string): Promise<Readable> {
    const p = await this.start(sandbox, ['tar', '-C', posix.dirname(path), '-cf', '-', posix.basename(path)]);
    p.done.then((r) => { if (r.exitCode !== 0) p.stdout.destroy(new Error(`no archive of ${path}: ${r.stderr.trim().slice(-200)}`)); }, (err) => p.stdout.destroy(err));
    return p.stdout;
  }
}

/** Incus that cannot be asked becomes the runtime's RuntimeUnreachable (a 503 for callers). */
async function guarded<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof IncusUnreachable) throw new RuntimeUnreachable(err.reason);
    throw err;
  }
}
