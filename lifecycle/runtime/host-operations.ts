import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../store/index.ts';

/**
 * What a runtime offers of its machines beside SandboxRuntime's verbs (docs/architecture.md, "The
 * runtime interface"): their size for the admission guard (`SandboxRuntime.capacity`), and the
 * operations of its hosts (`SandboxRuntime.hosts`) that the operator's `svc hosts …` goes through.
 * IncusHosts drives the members of an Incus cluster; OneMachineHosts is the Docker runtime's one machine.
 */

/** The machines that run sandboxes, added up: what the admission guard's overcommit is measured on. */
export interface Capacity {
  memoryMb: number;
  cpus: number;
  /** How many machines answered to make up the figures. */
  hosts: number;
}

/** What a host holds and what it has room for: what `svc hosts list` shows. */
export interface HostFigures {
  memoryBytes: number;
  cpus: number;
  /** Sandboxes with a container there, running or not (each holds one of its networks, on Docker). */
  sandboxes: number;
  running: number;
  /** Sandboxes it can hold at most (not in deep sleep). */
  networks: number;
  /** Memory and CPU limits of the running ones (what they may take). */
  committedMemoryBytes: number;
  committedCpus: number;
}

/** One host as `svc hosts list` shows it. */
export interface HostReading {
  name: string;
  /** Where the service reaches it; absent for the machine the service runs on. */
  address?: string;
  port?: number;
  drained: boolean;
  /** Its figures, when it answered; else `error` says why not (for the operator's command line only). */
  figures?: HostFigures;
  error?: string;
}

/**
 * The process that moves sandboxes (the operator's `svc hosts evacuate|move`, or a service process):
 * how it holds a sandbox and lets it go (lifecycle/mover.ts builds it).
 */
export interface Mover {
  store: Store;
  /** The sandbox's transition lease (the lifecycle's): a wake under way finishes before the sandbox is taken down. */
  exclusive<T>(name: string, work: () => Promise<T>): Promise<T>;
  /**
   * The sandbox is about to go down on its old host (called under its lease): its routes, idle
   * session and app watchers go (a wake on the target opens new ones).
   */
  goingDown(name: string): Promise<void>;
  logger: Logger;
  /** How long one move may take, unless the move says (SVC_MOVE_DEADLINE). */
  deadlineMs: number;
}

/** A move done, as `svc hosts move|evacuate` print it and audit it. */
export interface MoveProgress {
  sandbox: string;
  from: string;
  to: string;
  phase: 'moved';
  /** What the move carried (0 where the storage does not say). */
  bytes: number;
  total: number;
  /** Since this process began the move. */
  ms: number;
}

export interface MoveOptions {
  /** The host to move to; by default the runtime's choice (never a drained one, never the source). */
  to?: string;
  /** Refuse unless the sandbox is on this host (evacuate). */
  from?: string;
  /** This move's deadline instead of the mover's (svc hosts move --deadline). */
  deadlineMs?: number;
  onProgress?: (p: MoveProgress) => void;
}

export interface EvacuateOptions {
  onProgress?: (p: MoveProgress) => void;
  /** After each sandbox moved (the operator's audit row). */
  onMoved?: (p: MoveProgress) => Promise<void>;
  deadlineMs?: number;
}

export interface Evacuation {
  moved: string[];
  failed: Array<{ sandbox: string; error: string }>;
}

/** The hosts of a runtime, as `svc hosts list|drain|undrain|evacuate|move|remove` use them. */
export interface HostOperations {
  /** Every host with its figures, the service's own machine first; a host that does not answer with why. */
  readings(): Promise<HostReading[]>;
  /** Drained: no new sandbox is placed there (its sandboxes stay); undrained: it takes new ones again. NotFound for an unknown host. */
  setDrained(name: string, drained: boolean): Promise<void>;
  /** Takes a drained host that holds no sandbox out (not the service's own machine). */
  remove(name: string): Promise<void>;
  /** Moves one sandbox to another host; refused (nothing changed) when it cannot. */
  move(mover: Mover, name: string, opts?: MoveOptions): Promise<MoveProgress>;
  /** Every sandbox of a drained host, one after another; one that fails is named and the next one moves. */
  evacuate(mover: Mover, host: string, opts?: EvacuateOptions): Promise<Evacuation>;
}
