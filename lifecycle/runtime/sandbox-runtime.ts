import type { Duplex, Readable, Writable } from 'node:stream';
import type Docker from 'dockerode';
import { errors } from '../../core/errors.ts';
import type { EngineStatus } from '../../core/sandbox-status.ts';
import type { EngineCerts } from '../../store/index.ts';
import type { Capacity, HostOperations } from './host-operations.ts';

/**
 * What runs sandboxes, as the lifecycle, files, exec, logs and the composition root see it.
 * `DockerRuntime` (one engine on this host) and `IncusRuntime` (an Incus daemon or cluster) implement
 * it; a next one (a Kubernetes driver: docs/architecture.md, "The runtime interface") implements the
 * same promises, which test/runtime/runtime-contract.ts checks against each of them.
 *
 * Every call is idempotent ("already started", "already stopped", "already gone" are success). A
 * call whose engine cannot be asked rejects with `RuntimeUnreachable`; `inspect` answers
 * `unreachable` instead, never `deep_sleep`: only an engine that answers can say a container is gone.
 */
export interface SandboxRuntime extends ToolImages {
  /** The sandbox's state as its engine tells it now. */
  inspect(name: string): Promise<Inspection>;
  /**
   * The same for reads that change nothing (lists, records): it may come from what the engine's
   * events kept since the sandbox's last inspect (while watchStarts watches), never older than them.
   */
  read(name: string): Promise<Inspection>;
  /** Volumes (kept), network and container of a sandbox; does not start it. */
  create(spec: ContainerSpec): Promise<void>;
  /** Starts the container, then settles it; answers its state then (its address: a start asks nothing more). */
  start(name: string): Promise<RuntimeState>;
  /** Sleep: the whole container stops, everything stays. */
  stop(name: string): Promise<void>;
  /**
   * What a running sandbox needs from its host once it runs, whoever started it (a wake, its restart
   * policy, an engine restart). Cheap; reconcile calls it for every running sandbox.
   */
  settle(name: string): Promise<void>;
  /** Settles every sandbox its engine starts by itself, as it starts. Returns a function that stops watching. */
  watchStarts(): () => void;
  /** Deep sleep: the container and its network go, the volumes stay. */
  takeDown(name: string): Promise<void>;
  /** Writes the persistent folders of a sandbox (not running) as gzipped tars into `dir`. */
  archiveVolumes(name: string, dir: string): Promise<void>;
  /** Removes what a sandbox keeps beyond its container: its volumes and whatever holds them. */
  removeVolumes(name: string): Promise<void>;
  /** Sandboxes of this service that have a container, with whether it runs. */
  list(opts?: ListOptions): Promise<Array<{ name: string; running: boolean }>>;
  /** Sandboxes of this service that still have volumes (with or without a container). */
  withVolumes(): Promise<string[]>;
  /** Commands and archive reads inside running sandboxes. */
  readonly exec: SandboxExecutor;
  /**
   * A client of a running sandbox's own engine at `address` (its inspect's), over the mutual TLS users
   * get. `timeoutMs: 0` for streams that may stay quiet.
   */
  innerEngine(name: string, address: string, certs: EngineCerts, opts?: { timeoutMs?: number }): Docker;
  /** Answers once the runtime's engine answers (readiness). */
  ping(): Promise<void>;
  /** The host a sandbox runs on, by the name its engine gives (admins see it); null when the engine did not say in time. */
  hostOf(name: string): Promise<string | null>;
  /** CPU and memory a running sandbox uses now (inner containers included); undefined when it does not run. */
  resourceUse(name: string, signal?: AbortSignal): Promise<ResourceUse | undefined>;
  /** Disk its persistent folders take, and the space left where they live (a running sandbox). */
  diskUse(name: string): Promise<DiskUse>;
  /**
   * A fork (lifecycle/fork.ts): the volumes of `to` (a sandbox not made yet) made where `from`'s are and
   * filled with a consistent copy of them; `from` (running, asleep or in deep sleep) is left as it was.
   * Absent on a runtime that cannot copy a sandbox's storage: forks answer 409 there.
   */
  copyVolumes?(from: string, to: string): Promise<void>;
  /**
   * Memory and cores of the machines that run sandboxes, added up (those that answer; undefined when
   * none does): the admission guard's overcommit is measured on them. Absent: the guard measures the
   * machine the service runs on.
   */
  capacity?(): Promise<Capacity | undefined>;
  /**
   * Its machines as the operator's `svc hosts …` lists, drains, evacuates and removes them, and moves
   * sandboxes between them (host-operations.ts): an Incus cluster's members, or the Docker runtime's
   * one machine, which has nowhere to move to and says so. Absent on a test double.
   */
  readonly hosts?: HostOperations;
  /**
   * Sandbox `name` is on host `host` now: another process moved it (`svc hosts move`, told through the
   * lifecycle news). Absent where nothing of where a sandbox runs is kept (one machine).
   */
  movedTo?(name: string, host: string): void;
  /** Lets go of its connections to the engine (the service's close, after everything that uses it). Absent: nothing to let go. */
  close?(): Promise<void>;
}

export interface ListOptions {
  /** Only the running ones: the engine builds no entry for the others (with 400 asleep, a few times faster). */
  running?: boolean;
}

/** One reading of a running sandbox's CPU and memory. */
export interface ResourceUse {
  /** When the engine read it (ms since the epoch). */
  at: number;
  /** CPU time used since the container started, in nanoseconds: a rate needs two readings. */
  cpuNs: number;
  /** Cores the sandbox may use. */
  cpuLimit: number;
  memoryBytes: number;
  memoryLimitBytes: number;
}

export interface DiskUse {
  usedBytes: number;
  /** Free space on the file system that holds the sandbox's folders (shared with the host's other data). */
  freeBytes: number;
  /** False when the count was cut off (it reads every file): usedBytes counts only the folders it finished. */
  complete: boolean;
}

/** The images the runtime's engine holds, to load into a sandbox's own engine (the management tool). */
export interface ToolImages {
  /** The image's svc.inputs label (which build it is), or undefined if the engine lacks the image. */
  imageInputs(image: string): Promise<string | undefined>;
  /** `docker save` of the image. */
  saveImage(image: string): Promise<NodeJS.ReadableStream>;
}

/** What an engine that answers says about one sandbox right now: the truth, never the record's wish. */
export interface RuntimeState {
  status: EngineStatus;
  /** Address of the sandbox on its own network, while running: where the edge dials its apps and engine. */
  address?: string;
  startedAt?: string;
  finishedAt?: string;
  exitCode?: number;
  /**
   * The host folder behind the sandbox's transfer mount (the process that made the container chose
   * it), where files/transfer-pipes.ts puts its pipes; absent where service and sandbox share no folder.
   */
  transferFolder?: string;
  /** Where the sandbox sees transferFolder (the path its commands open a pipe at); set whenever transferFolder is. */
  transferMount?: string;
}

/** The engine of this sandbox cannot be asked (refused, no socket, no answer in time): nothing is known. */
export interface Unreachable {
  status: 'unreachable';
  /** What failed, for the message: `connect ECONNREFUSED …`. */
  reason: string;
}

export type Inspection = RuntimeState | Unreachable;

/**
 * A sandbox as reads show it (lists, records, the edge): the engine's state, or `unavailable` when
 * its engine cannot be asked. A read never fails for that, so one sandbox whose host is away hides
 * no other; transitions use `reachable()` instead, which refuses with 503.
 */
export type SandboxState = RuntimeState | { status: 'unavailable' };

export function observed(inspection: Inspection): SandboxState {
  return inspection.status === 'unreachable' ? { status: 'unavailable' } : inspection;
}

export interface ContainerSpec {
  name: string;
  env: Record<string, string>;
  /** This sandbox's own memory and CPU limits (its owner's quota allows them); the defaults where absent. */
  limits?: { memoryMb?: number; cpus?: number };
}

export interface ExecResult {
  exitCode: number;
  /** The command's stderr, cut at 64 KB. */
  stderr: string;
}

/** A command running inside a sandbox. */
export interface ExecProcess {
  /** The command's stdout, with backpressure down to the engine connection. */
  stdout: Readable;
  /**
   * The command's stdin (only when asked for). Ending it, or destroying it, closes the command's
   * stdin; it never cuts the connection, so `done` still reports how the command ended.
   */
  stdin: Writable | undefined;
  /** Resolves once the command has exited and its output has been read. */
  done: Promise<ExecResult>;
}

/** Commands as root inside a running sandbox. Output is streamed, never collected whole (but by `run`). */
export interface SandboxExecutor {
  /** `onStderr` receives every stderr chunk as it comes; `workingDir` defaults to /. */
  start(sandbox: string, cmd: string[], opts?: { stdin?: boolean; workingDir?: string; onStderr?: (chunk: Buffer) => void }): Promise<ExecProcess>;
  /** An interactive command on a terminal: one raw stream both ways, `resize` for the terminal's size. */
  startTerminal(sandbox: string, cmd: string[], size: { cols: number; rows: number }): Promise<{ stream: Duplex; resize(size: { cols: number; rows: number }): Promise<void> }>;
  /** A tar stream of `path`, resolved inside the sandbox (what `docker cp` reads). Callers check the path first. */
  getArchive(sandbox: string, path: string): Promise<Readable>;
  /** Runs a command to its end and collects its (small) stdout; rejects when it prints too much. */
  run(sandbox: string, cmd: string[], input?: Buffer | string): Promise<ExecResult & { stdout: Buffer }>;
}

/**
 * The engine that runs a sandbox cannot be asked (reads show it `unavailable`). A 503 (SVC_BUSY)
 * with Retry-After: nothing was changed, and the sandbox is not taken for gone (its engine or
 * its machine may be back shortly).
 * The message is the same text whatever failed: `reason` (a socket path, a host's address) is for
 * the server's log only (api/plugins/errors.ts logs the error with it), never for clients.
 */
export class RuntimeUnreachable extends errors.Busy {
  constructor(readonly reason: string) {
    super(RETRY_UNREACHABLE_S, 'the sandbox is unavailable: the engine that holds it does not answer; nothing was changed, try again shortly');
  }
}

const RETRY_UNREACHABLE_S = 5;

/** The state of an engine that answered, or RuntimeUnreachable: for every caller that acts on the answer. */
export function reachable(inspection: Inspection): RuntimeState {
  if (inspection.status === 'unreachable') throw new RuntimeUnreachable(inspection.reason);
  return inspection;
}
