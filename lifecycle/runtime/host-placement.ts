import { BlockList, isIPv4 } from 'node:net';
import { errors } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { HostRecord } from '../../store/index.ts';
import type { Capacity, HostFigures } from './host-operations.ts';
import { RuntimeUnreachable } from './sandbox-runtime.ts';

/** How long placement waits for a host's figures before it leaves that host out. */
const CAPACITY_ASK_MS = 3000;
/** How long the hosts' sizes added up (capacity()) are used before they are asked again. */
const CAPACITY_TTL_MS = 30_000;

/** One host's figures for a placement. */
export interface HostLoad extends HostFigures {
  name: string;
}

/**
 * The placement score of a host (docs/scale-out.md): the smallest of its free shares of memory, CPU and
 * networks, counting the limits of its running sandboxes as taken. Memory and CPU are overcommitted
 * (a sleeping sandbox takes nothing, a running one rarely its whole limit), so a share may be below 0;
 * the host with the most room by its scarcest resource still wins. A host without a free network (each
 * sandbox container holds one of its pool's) scores -Infinity: it cannot take one more sandbox at all.
 */
export function placementScore(load: HostFigures): number {
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

/** A host's engine as placement reads it. */
export interface Measurable {
  figures(signal?: AbortSignal): Promise<HostFigures>;
}

export interface PlacementOptions<E extends Measurable> {
  /** Every registered host with its engine (the service's own machine first). */
  hosts(): Promise<Array<{ name: string; runtime: E; record?: HostRecord }>>;
  /** An ask of one host, through its health (HostHealth.ask: at once unreachable while it is away). */
  ask<T>(host: string, call: (engine: E) => Promise<T>): Promise<T>;
  logger: Logger;
}

/** Where a HostSetRuntime places new sandboxes and moves, from each host's figures. */
export class HostPlacement<E extends Measurable> {
  private capacitySeen?: { at: number; figures: Capacity | undefined };

  constructor(private readonly opts: PlacementOptions<E>) {}

  /** The host with the most room (placementScore) among those not drained that answer in time, but `except`. */
  async choose(except?: string): Promise<string> {
    const loads = await Promise.all((await this.opts.hosts()).filter((h) => !h.record?.drained_at && h.name !== except).map(async (h): Promise<HostLoad | undefined> => {
      try {
        return { name: h.name, ...(await this.opts.ask(h.name, (engine) => engine.figures(AbortSignal.timeout(CAPACITY_ASK_MS)))) };
      } catch (err) {
        this.opts.logger.warn({ host: h.name, err: (err as Error).message }, 'placement: host left out (no answer)');
        return undefined;
      }
    }));
    const chosen = choosePlacement(loads.filter((l): l is HostLoad => l !== undefined));
    if (!chosen) throw new errors.HostFull(30, 'no host can take a new sandbox now (all drained, away, or without a free network); try again later');
    return chosen;
  }

  /**
   * Memory (MB) and cores of every host that answers, added up, for the admission guard; asked at most
   * every CAPACITY_TTL_MS (a host's size does not change, the set of hosts rarely). Undefined when none answers.
   */
  async capacity(): Promise<Capacity | undefined> {
    if (!this.capacitySeen || Date.now() - this.capacitySeen.at > CAPACITY_TTL_MS) {
      const loads = (await this.loads()).flatMap((h) => (h.load ? [h.load] : []));
      const figures = loads.length === 0 ? undefined : {
        memoryMb: Math.floor(loads.reduce((sum, l) => sum + l.memoryBytes, 0) / 2 ** 20),
        cpus: loads.reduce((sum, l) => sum + l.cpus, 0),
        hosts: loads.length,
      };
      this.capacitySeen = { at: Date.now(), figures };
    }
    return this.capacitySeen.figures;
  }

  /** Every host with its figures, for `svc hosts list` (HostOperations.readings): undefined figures for a host that does not answer. */
  async loads(): Promise<Array<{ name: string; record?: HostRecord; load?: HostFigures; error?: string }>> {
    return Promise.all((await this.opts.hosts()).map(async (h) => {
      try {
        return { name: h.name, record: h.record, load: await this.opts.ask(h.name, (engine) => engine.figures(AbortSignal.timeout(CAPACITY_ASK_MS))) };
      } catch (err) {
        return { name: h.name, record: h.record, error: err instanceof RuntimeUnreachable ? err.reason : (err as Error).message };
      }
    }));
  }
}
