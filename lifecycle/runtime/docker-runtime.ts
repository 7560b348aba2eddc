import fs from 'node:fs';
import path from 'node:path';
import type Docker from 'dockerode';
import { isIPv4 } from 'node:net';
import type { SandboxRuntimeMode } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import type { EngineCerts } from '../../store/index.ts';
import { resourceNames } from '../names.ts';
import { shortenArpRetries } from './arp-retries.ts';
import { delegateCgroups } from './cgroup-delegation.ts';
import { guarded, statusCode, unreachableReason } from './engine-client.ts';
import { moveFromMainEngine, type EngineMoveOptions } from './engine-move.ts';
import { sandboxContainerOptions, TRANSFER_MOUNT, transferFolder, transferOf } from './host-config.ts';
import { innerEngine } from './inner-engine.ts';
import type { HostOperations } from './host-operations.ts';
import { KeptStates } from './kept-states.ts';
import { OneMachineHosts } from './one-machine-hosts.ts';
import { SandboxExec } from './sandbox-exec.ts';
import type { ContainerSpec, DiskUse, Inspection, ListOptions, ResourceUse, RuntimeState, SandboxRuntime } from './sandbox-runtime.ts';
import { resumeLeftPause } from './volume-copy.ts';
import { isHelper, LABEL_CPUS, LABEL_INSTANCE, LABEL_MEMORY_MB, LABEL_SANDBOX, sandboxBridge } from './docker-labels.ts';
import { imageInputs, saveImage } from './docker-images.ts';
import { capacity, diskUse, resourceUse, type EngineCapacity } from './docker-readings.ts';
import { watchContainerEvents } from './docker-events.ts';
import { DockerVolumes } from './docker-volumes.ts';

export { LABEL_INSTANCE, LABEL_SANDBOX, SANDBOX_BRIDGE_PREFIX, sandboxBridge } from './docker-labels.ts';

/** How long an inspect waits for the engine before it answers "unreachable". */
const INSPECT_TIMEOUT_MS = 10_000;
/** An admin's list of every sandbox must not wait long on the engine's name. */
const HOST_ASK_MS = 2000;

export interface DockerRuntimeOptions {
  image: string;
  runtime: SandboxRuntimeMode;
  limits: { memoryMb: number; cpus: number; pids: number };
  instance: string;
  logger: Logger;
  /** Where sandboxes' transfer folders are made (files/transfer-pipes.ts). */
  transferRoot: string;
  /** Where sandboxes made on the main engine come from at their next creation (userns mode). */
  move?: Omit<EngineMoveOptions, 'to' | 'labels' | 'logger'>;
}

/**
 * The sandbox runtime on one Docker engine of this host: the only code that creates, starts, stops
 * or removes sandbox containers there (SandboxExec, its `exec`, runs commands in them).
 */
export class DockerRuntime implements SandboxRuntime {
  readonly exec: SandboxExec;
  /** Volumes and the helpers that reach them (docker-volumes.ts). */
  private readonly volumes: DockerVolumes;
  /** Its one machine, as `svc hosts …` sees it (one-machine-hosts.ts): listed, nowhere to move to. */
  readonly hosts: HostOperations = new OneMachineHosts(this);
  private engineName?: Promise<string>;
  /** What reads take each sandbox's state to be, while the engine's events are watched (watchStarts). */
  private readonly kept = new KeptStates();

  constructor(
    private readonly docker: Docker,
    private readonly opts: DockerRuntimeOptions,
  ) {
    this.exec = new SandboxExec(docker);
    this.volumes = new DockerVolumes(docker, opts);
  }

  /**
   * The host a sandbox runs on, as its engine names itself (`docker info`): one engine today, so
   * the same for every sandbox. Asked once, given HOST_ASK_MS; null (asked again next time) when
   * the engine does not answer by then.
   */
  async hostOf(_name: string): Promise<string | null> {
    // dockerode passes abortSignal on to its request, though its types for info() take no options
    const info = this.docker.info as unknown as (opts: { abortSignal: AbortSignal }) => Promise<{ Name: string }>;
    this.engineName ??= info.call(this.docker, { abortSignal: AbortSignal.timeout(HOST_ASK_MS) }).then((answer) => answer.Name);
    try {
      return await this.engineName;
    } catch {
      this.engineName = undefined;
      return null;
    }
  }

  /**
   * inspect()'s answer for reads (lists, records): while the engine's events are watched, what they
   * kept of the sandbox since its last inspect. Transitions use inspect().
   */
  read(name: string): Promise<Inspection> {
    return this.kept.read(name, (n) => this.inspect(n));
  }

  /** Runs a call that changes a sandbox, then forgets what reads kept of it (its events may come after the call returns). */
  private async changing<T>(name: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } finally {
      this.kept.changed(name);
    }
  }

  async inspect(name: string): Promise<Inspection> {
    try {
      return this.stateOf(name, await this.docker.getContainer(resourceNames(name).container).inspect({ abortSignal: AbortSignal.timeout(INSPECT_TIMEOUT_MS) }));
    } catch (err) {
      if (statusCode(err) === 404) return { status: 'deep_sleep' };
      const reason = unreachableReason(err);
      if (reason) return { status: 'unreachable', reason };
      throw err;
    }
  }

  /** What an inspect of the sandbox's container says of it. */
  private stateOf(name: string, info: Docker.ContainerInspectInfo): RuntimeState {
    const running = info.State.Running && !info.State.Restarting;
    const net = info.NetworkSettings.Networks[resourceNames(name).network];
    return {
      status: running ? 'running' : 'exited',
      // the engine may be another machine's: only an address goes on (to the edge, HAProxy's maps)
      address: running && isIPv4(net?.IPAddress ?? '') ? net!.IPAddress : undefined,
      startedAt: info.State.StartedAt,
      finishedAt: info.State.FinishedAt,
      exitCode: info.State.ExitCode,
      ...transferOf(info.Mounts.find((m) => m.Destination === TRANSFER_MOUNT)?.Source),
    };
  }

  /** Creates volumes (kept), network and container of a sandbox; does not start it. */
  create(spec: ContainerSpec): Promise<void> {
    return this.changing(spec.name, () => this.createNow(spec));
  }

  private createNow(spec: ContainerSpec): Promise<void> {
    return guarded(async () => {
      const names = resourceNames(spec.name);
      const labels = { [LABEL_SANDBOX]: spec.name, [LABEL_INSTANCE]: this.opts.instance };
      if (this.opts.move) {
        await moveFromMainEngine(spec.name, { ...this.opts.move, to: this.docker, labels: () => labels, logger: this.opts.logger });
      }
      await this.volumes.createVolumes(spec.name);
      try {
        await this.docker.createNetwork({
          Name: names.network, Driver: 'bridge', Labels: labels, CheckDuplicate: true,
          Options: { 'com.docker.network.bridge.name': sandboxBridge(names.network) },
        });
      } catch (err) {
        if (statusCode(err) !== 409) throw err;
      }
      // 0711: the pipes in it have unguessable names (user-namespaced runtimes reach them as others)
      const transfer = transferFolder(this.opts.transferRoot, spec.name);
      await fs.promises.mkdir(transfer, { recursive: true, mode: 0o711 });
      const limits = {
        ...this.opts.limits,
        memoryMb: spec.limits?.memoryMb ?? this.opts.limits.memoryMb,
        cpus: spec.limits?.cpus ?? this.opts.limits.cpus,
      };
      try {
        await this.docker.createContainer(
          sandboxContainerOptions({
            name: names.container,
            image: this.opts.image,
            network: names.network,
            volumes: names.volumes,
            transferFolder: transfer,
            env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
            labels: { ...labels, [LABEL_MEMORY_MB]: String(limits.memoryMb), [LABEL_CPUS]: String(limits.cpus) },
            runtime: this.opts.runtime,
            limits,
          }),
        );
      } catch (err) {
        if (statusCode(err) !== 409) throw err;
      }
      this.opts.logger.debug({ sandbox: spec.name }, 'sandbox container created');
    });
  }

  /**
   * Starts the container and settles it with the one inspect that follows (its pid for the cgroups,
   * its address for the answer), which reads then keep: the engine's start event that comes after
   * neither settles it again nor makes reads ask again.
   */
  start(name: string): Promise<RuntimeState> {
    return guarded(async () => {
      // set at every start: the bridge may predate this setting, or the engine made it again at its restart
      await shortenArpRetries(sandboxBridge(resourceNames(name).network));
      const container = this.docker.getContainer(resourceNames(name).container);
      this.kept.ownStart(name);
      try {
        try {
          await container.start();
        } catch (err) {
          this.kept.ownStart(name, false); // it ran already (304): no start event follows
          if (statusCode(err) !== 304) throw err;
        }
        return await this.kept.afterChange(name, async () => {
          const info = await container.inspect({ abortSignal: AbortSignal.timeout(INSPECT_TIMEOUT_MS) });
          await this.settleWith(info);
          return this.stateOf(name, info);
        });
      } catch (err) {
        this.kept.changed(name);
        throw err;
      }
    });
  }

  /**
   * What a running sandbox container needs from the host once it runs, whoever started it (a wake,
   * its restart policy, an engine restart): in a user namespace, its own cgroups; a pause of a fork's copy
   * whose process is gone, ended. Idempotent and cheap; reconcile calls it for every running sandbox.
   */
  settle(name: string): Promise<void> {
    return guarded(async () => {
      const info = await this.docker.getContainer(resourceNames(name).container).inspect().catch((err) => {
        if (statusCode(err) === 404) return null;
        throw err;
      });
      // a fork's pause that its process did not end (volume-copy.ts)
      if (info?.State.Paused) await resumeLeftPause(this.docker, `${LABEL_INSTANCE}=${this.opts.instance}`, name, this.opts.logger);
      if (info) await this.settleWith(info);
    });
  }

  /** Whether this runtime hands sandboxes their cgroups (userns). */
  private get settles(): boolean {
    return this.opts.runtime === 'userns';
  }

  private async settleWith(info: Docker.ContainerInspectInfo): Promise<void> {
    if (!this.settles || !info.State.Running || !info.State.Pid) return;
    await delegateCgroups(info.State.Pid).catch((err: NodeJS.ErrnoException) => {
      // the container stopped meanwhile: its cgroups are gone
      if (err.code !== 'ENOENT' && err.code !== 'ESRCH') throw err;
    });
  }

  stop(name: string): Promise<void> {
    return this.changing(name, () => guarded(async () => {
      try {
        await this.docker.getContainer(resourceNames(name).container).stop();
      } catch (err) {
        if (statusCode(err) !== 304 && statusCode(err) !== 404) throw err;
      }
    }));
  }

  /**
   * Settles every sandbox container the engine starts by itself (its restart policy after a crash or an
   * out-of-memory kill, an engine restart) the moment it starts, instead of at the next reconcile pass:
   * its entrypoint waits for the cgroups. The same events keep what reads know (read()): only while
   * the stream is up (docker-events.ts). Returns a function that stops watching.
   */
  watchStarts(): () => void {
    const onStart = (name: string) =>
      void this.settle(name).catch((err) => this.opts.logger.warn({ sandbox: name, err: (err as Error).message }, 'cgroup hand-over failed'));
    return watchContainerEvents(this.docker, { instance: this.opts.instance, kept: this.kept, ...(this.settles ? { onStart } : {}) });
  }

  /** Deep sleep: container and network go, volumes stay. */
  takeDown(name: string): Promise<void> {
    return this.changing(name, () => this.takeDownNow(name));
  }

  private takeDownNow(name: string): Promise<void> {
    return guarded(async () => {
      const names = resourceNames(name);
      const state = await this.inspect(name);
      try {
        await this.docker.getContainer(names.container).remove({ force: true });
      } catch (err) {
        if (statusCode(err) !== 404) throw err;
      }
      try {
        await this.docker.getNetwork(names.network).remove();
      } catch (err) {
        if (statusCode(err) !== 404) throw err;
      }
      // The pipes' folder goes with the container, whichever process's data folder it is in (the next
      // container gets one of its maker's). Only a folder named for this sandbox, as transferFolder makes them.
      const mounted = state.status === 'exited' || state.status === 'running' ? state.transferFolder : undefined;
      if (mounted && path.basename(mounted) === name) await fs.promises.rm(mounted, { recursive: true, force: true });
    });
  }


  copyVolumes(from: string, to: string): Promise<void> {
    return this.volumes.copyVolumes(from, to);
  }





  archiveVolumes(name: string, dir: string): Promise<void> {
    return this.volumes.archiveVolumes(name, dir);
  }

  removeVolumes(name: string): Promise<void> {
    return this.volumes.removeVolumes(name);
  }


  /** Resource use of a running sandbox (docker-readings.ts). */
  resourceUse(name: string, signal?: AbortSignal): Promise<ResourceUse | undefined> {
    return resourceUse(this.docker, name, signal);
  }

  diskUse(name: string): Promise<DiskUse> {
    return diskUse(this.exec, name);
  }

  /** Images of this engine (docker-images.ts). */
  imageInputs(image: string): Promise<string | undefined> {
    return imageInputs(this.docker, image);
  }

  saveImage(image: string): Promise<NodeJS.ReadableStream> {
    return saveImage(this.docker, image);
  }

  innerEngine(name: string, address: string, certs: EngineCerts, opts: { timeoutMs?: number } = {}): Docker {
    return innerEngine(name, address, certs, opts);
  }

  /** `signal` bounds the call (a silent engine never answers). */
  async ping(signal?: AbortSignal): Promise<void> {
    // dockerode passes abortSignal on to its request, though its types for ping() take no options
    const ping = this.docker.ping as unknown as (opts: { abortSignal?: AbortSignal }) => Promise<unknown>;
    await guarded(() => ping.call(this.docker, { abortSignal: signal }));
  }

  /** The engine's machine and what this instance's sandboxes hold of it (docker-readings.ts), for `svc hosts list`. */
  figures(signal?: AbortSignal): Promise<EngineCapacity> {
    return capacity(this.docker, this.opts, signal);
  }


  withVolumes(): Promise<string[]> {
    return this.volumes.withVolumes();
  }

  /** Sandbox containers of this instance that the host engine knows, with their state. */
  list(opts: ListOptions = {}): Promise<Array<{ name: string; running: boolean }>> {
    return guarded(async () => {
      const containers = await this.docker.listContainers({
        all: !opts.running,
        // paused (a fork's copy, volume-copy.ts) is running, as inspect says: its session and watchers stay
        filters: { label: [`${LABEL_INSTANCE}=${this.opts.instance}`], ...(opts.running ? { status: ['running', 'paused'] } : {}) },
      });
      return containers
        .filter((c) => !isHelper(c))
        .map((c) => ({ name: c.Labels[LABEL_SANDBOX]!, running: c.State === 'running' || c.State === 'paused' }));
    });
  }
}

