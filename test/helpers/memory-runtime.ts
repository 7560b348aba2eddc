import fs from 'node:fs';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import type Docker from 'dockerode';
import {
  reachable,
  RuntimeUnreachable,
  type ContainerSpec,
  type DiskUse,
  type ExecProcess,
  type Inspection,
  type ListOptions,
  type SandboxExecutor,
  type ResourceUse,
  type RuntimeState,
  type SandboxRuntime,
} from '../../lifecycle/runtime/sandbox-runtime.ts';

interface Sandbox {
  /** A container exists (not in deep sleep). */
  container: boolean;
  running: boolean;
  startedAt?: string;
  finishedAt?: string;
  spec?: ContainerSpec;
}

/** What the lifecycle asked of the runtime, in order: `start svc-a`, `create svc-a`, … */
export type RuntimeCall = `${'create' | 'start' | 'stop' | 'takeDown' | 'removeVolumes' | 'archiveVolumes' | 'exec'} ${string}`;

/**
 * A SandboxRuntime in memory, for the state machine's unit tests (test/lifecycle/state-machine.test.ts):
 * the same promises as DockerRuntime (test/runtime/memory-runtime.test.ts runs the contract suite on
 * it), plus what a test needs to act behind the service's back: a container started or stopped
 * outside, an engine that stops answering. Commands "run" and succeed without doing anything; the
 * sandbox's own engine is empty and always answers.
 */
export class MemoryRuntime implements SandboxRuntime {
  private readonly sandboxes = new Map<string, Sandbox>();
  /** Sandboxes whose volumes exist. */
  private readonly volumes = new Set<string>();
  /** Every call that changes something, in order. */
  readonly calls: RuntimeCall[] = [];
  /** Set to a reason: the engine cannot be asked (inspect answers unreachable, every other call rejects). */
  unreachable: string | undefined;
  /** Sandboxes whose engine alone cannot be asked (another host is away), with the reason. */
  readonly unreachableSandboxes = new Map<string, string>();
  /** Calls that find the engine gone, with the reason: `stop x` fails while `inspect x` answers (lost in between). */
  readonly unreachableCalls = new Map<RuntimeCall, string>();
  /** Held calls wait for this before they change anything (to put concurrent callers in the middle of a wake). */
  gate: Promise<void> = Promise.resolve();

  readonly exec: SandboxExecutor = {
    start: async (sandbox) => this.command(sandbox),
    startTerminal: async (sandbox) => {
      await this.command(sandbox);
      return { stream: new PassThrough(), resize: async () => undefined };
    },
    getArchive: async (sandbox) => {
      await this.command(sandbox);
      return Readable.from([]);
    },
    run: async (sandbox) => {
      const proc = await this.command(sandbox);
      return { ...(await proc.done), stdout: Buffer.alloc(0) };
    },
  };

  /** Nothing to keep: every state is in memory already. */
  read(name: string): Promise<Inspection> {
    return this.inspect(name);
  }

  async inspect(name: string): Promise<Inspection> {
    const reason = this.unreachable ?? this.unreachableSandboxes.get(name);
    if (reason) return { status: 'unreachable', reason };
    const s = this.sandboxes.get(name);
    if (!s?.container) return { status: 'deep_sleep' };
    return s.running
      ? { status: 'running', address: `10.213.0.${[...this.sandboxes.keys()].indexOf(name) + 2}`, startedAt: s.startedAt }
      : { status: 'exited', startedAt: s.startedAt, finishedAt: s.finishedAt ?? '0001-01-01T00:00:00Z', exitCode: 0 };
  }

  async create(spec: ContainerSpec): Promise<void> {
    await this.reach(`create ${spec.name}`);
    this.volumes.add(spec.name);
    const s = this.sandboxes.get(spec.name);
    if (!s?.container) this.sandboxes.set(spec.name, { container: true, running: false, spec });
  }

  async start(name: string): Promise<RuntimeState> {
    await this.reach(`start ${name}`);
    const s = this.sandboxes.get(name);
    if (!s?.container) throw Object.assign(new Error(`no such container: ${name}`), { statusCode: 404 });
    this.startOutside(name);
    return reachable(await this.inspect(name));
  }

  async stop(name: string): Promise<void> {
    await this.reach(`stop ${name}`);
    this.stopOutside(name);
  }

  async settle(): Promise<void> {
    await this.reach();
  }

  watchStarts(): () => void {
    return () => undefined;
  }

  async takeDown(name: string): Promise<void> {
    await this.reach(`takeDown ${name}`);
    this.sandboxes.delete(name);
  }

  async archiveVolumes(name: string, dir: string): Promise<void> {
    await this.reach(`archiveVolumes ${name}`);
    await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 });
    // one empty gzip member per folder: what DockerRuntime writes for an empty folder, without its tar
    for (const folder of ['root', 'home', 'srv', 'opt', 'var-lib-docker-volumes']) {
      await fs.promises.writeFile(path.join(dir, `${folder}.tar.gz`), EMPTY_GZIP, { mode: 0o600 });
    }
  }

  async removeVolumes(name: string): Promise<void> {
    await this.reach(`removeVolumes ${name}`);
    this.volumes.delete(name);
  }

  async list(opts: ListOptions = {}): Promise<Array<{ name: string; running: boolean }>> {
    await this.reach();
    return [...this.sandboxes].filter(([, s]) => s.container && (!opts.running || s.running)).map(([name, s]) => ({ name, running: s.running }));
  }

  async withVolumes(): Promise<string[]> {
    await this.reach();
    return [...this.volumes];
  }

  innerEngine(): Docker {
    // an empty engine that always answers: no apps to discover
    return {
      ping: async () => 'OK',
      listContainers: async () => [],
      getEvents: async () => new PassThrough(),
    } as unknown as Docker;
  }

  async ping(): Promise<void> {
    await this.reach();
  }

  async hostOf(): Promise<string | null> {
    return this.unreachable ? null : 'memory';
  }

  async imageInputs(): Promise<string | undefined> {
    await this.reach();
    return undefined;
  }

  async saveImage(image: string): Promise<NodeJS.ReadableStream> {
    await this.reach();
    throw Object.assign(new Error(`no such image: ${image}`), { statusCode: 404 });
  }

  async resourceUse(name: string): Promise<ResourceUse | undefined> {
    await this.reach();
    const s = this.sandboxes.get(name);
    if (!s?.running) return undefined;
    return { at: Date.now(), cpuNs: 0, cpuLimit: s.spec?.limits?.cpus ?? 1, memoryBytes: 0, memoryLimitBytes: (s.spec?.limits?.memoryMb ?? 1024) * 1024 * 1024 };
  }

  async diskUse(name: string): Promise<DiskUse> {
    await this.command(name);
    return { usedBytes: 0, freeBytes: 1 << 30, complete: true };
  }

  /** A container started behind the service's back (its restart policy, a user on the host). */
  startOutside(name: string): void {
    const s = this.sandboxes.get(name);
    if (!s?.container || s.running) return;
    s.running = true;
    s.startedAt = new Date().toISOString();
  }

  /** A container stopped behind the service's back (a crash, an out-of-memory kill), `at` its stop time. */
  stopOutside(name: string, at = new Date()): void {
    const s = this.sandboxes.get(name);
    if (!s?.running) return;
    s.running = false;
    s.finishedAt = at.toISOString();
  }

  /** Whether a sandbox still has volumes. */
  hasVolumes(name: string): boolean {
    return this.volumes.has(name);
  }

  /** The calls of one kind, e.g. `count('start')`. */
  count(kind: string, name?: string): number {
    return this.calls.filter((c) => c.startsWith(`${kind} `) && (name === undefined || c === `${kind} ${name}`)).length;
  }

  private async reach(call?: RuntimeCall): Promise<void> {
    const down = () => this.unreachable ?? (call && (this.unreachableSandboxes.get(call.split(' ')[1]) ?? this.unreachableCalls.get(call)));
    if (down()) throw new RuntimeUnreachable(down()!);
    await this.gate;
    if (down()) throw new RuntimeUnreachable(down()!);
    if (call) this.calls.push(call);
  }

  private async command(sandbox: string): Promise<ExecProcess> {
    await this.reach(`exec ${sandbox}`);
    if (!this.sandboxes.get(sandbox)?.running) throw Object.assign(new Error(`container ${sandbox} is not running`), { statusCode: 409 });
    const stdout = new PassThrough();
    stdout.end();
    return { stdout, stdin: new PassThrough(), done: Promise.resolve({ exitCode: 0, stderr: '' }) };
  }
}

/** A gzip stream of nothing. */
const EMPTY_GZIP = Buffer.from('1f8b0800000000000003030000000000000000', 'hex');
