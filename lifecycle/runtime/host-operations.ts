import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../store/index.ts';

/**
 * What a runtime over several machines offers beside SandboxRuntime's verbs (docs/architecture.md,
 * "The runtime interface"): the machines' size for the admission guard (`SandboxRuntime.capacity`),
 * and the operations of its hosts (`SandboxRuntime.hosts`) that the operator's `svc hosts …` and a
 * reconcile pass go through. HostSetRuntime (Docker hosts) implements them; a runtime of one machine
 * leaves them out.
 */

/** The machines that run sandboxes, added up: what the admission guard's overcommit is measured on. */
export interface Capacity {
  memoryMb: number;
  cpus: number;
  /** How many machines answered to make up the figures. */
  hosts: number;
}

/** What a host holds and what it has room for: what placement scores and `svc hosts list` shows. */
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
 * The process that moves sandboxes (the service's Lifecycle, or the operator's `svc hosts evacuate|move`):
 * how it holds a sandbox, lets it go and tells the other processes (lifecycle/mover.ts builds it).
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
  /**
   * The sandbox's placement changed (its move committed): every service process is told, so each
   * forgets the host it remembered for it at once (lifecycle-news.ts), not at its next miss.
   */
  placed(name: string): Promise<void>;
  logger: Logger;
  /** How long one attempt at a move may take, from its start to its commit, unless the move says (SVC_MOVE_DEADLINE). */
  deadlineMs: number;
  /** Bytes the target keeps free after the copy: a move that would leave less is refused (SVC_MOVE_FREE_RESERVE_MB). */
  freeReserveBytes: number;
}

export interface MoveProgress {
  sandbox: string;
  from: string;
  to: string;
  phase: 'copying' | 'verifying' | 'moved' | 'rolled back';
  bytes: number;
  /** Bytes the source's files take (du), for a share; 0 when the sandbox has no volumes. */
  total: number;
  /** Since this process began the move. */
  ms: number;
  error?: string;
}

export interface MoveOptions {
  /** The host to move to; by default the one placement would choose (never a drained one, never the source). */
  to?: string;
  /** Refuse unless the sandbox is on this host (evacuate). */
  from?: string;
  /** This move's deadline instead of the mover's (svc hosts move --deadline); kept in its record for a take-over. */
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

/** The hosts of a runtime over several machines, as `svc hosts list|drain|undrain|evacuate|move|remove` and reconcile use them. */
export interface HostOperations {
  /** Every host with its figures, the service's own machine first; a host that does not answer with why. */
  readings(): Promise<HostReading[]>;
  /** Drained: no new sandbox is placed there (its sandboxes stay); undrained: it takes new ones again. NotFound for an unknown host. */
  setDrained(name: string, drained: boolean): Promise<void>;
  /** Forgets a host (not the service's own machine); its sandboxes are unreachable until it is added again. */
  remove(name: string): Promise<void>;
  /** Moves one sandbox to another host; refused (nothing changed) when it cannot, rolled back when the copy fails. */
  move(mover: Mover, name: string, opts?: MoveOptions): Promise<MoveProgress>;
  /** Every sandbox of a drained host, one after another; one that fails is named and the next one moves. */
  evacuate(mover: Mover, host: string, opts?: EvacuateOptions): Promise<Evacuation>;
  /** A reconcile pass's part: moves a killed process left are finished or rolled back. */
  recoverMoves(mover: Mover): Promise<void>;
}
