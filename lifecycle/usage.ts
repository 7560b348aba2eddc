import { SingleFlight } from '../core/keyed-lock.ts';
import { notRunning } from '../core/sandbox-status.ts';
import type { DiskUse, ResourceUse, SandboxRuntime } from './runtime/sandbox-runtime.ts';

/** What the sampler reads from the runtime. */
export type UsageSource = Pick<SandboxRuntime, 'resourceUse' | 'diskUse'>;

/** One point of the history graph. */
export interface UsagePoint {
  at: number;
  /** Cores used on average since the point before. */
  cpu: number;
  memoryBytes: number;
}

export interface UsageNow {
  at: number;
  cpu: { cores: number; limit: number };
  memory: { bytes: number; limit: number };
  disk: (DiskUse & { at: number }) | null;
  history: UsagePoint[];
}

/** Readings closer than this share one: any number of open panels cost one engine call per period. */
export const SAMPLE_EVERY_MS = 2_000;
/** The history a panel sees: the last 10 minutes, at most HISTORY_POINTS points. */
const HISTORY_MS = 10 * 60_000;
const HISTORY_POINTS = 300;
/** A reading older than this is no base for a CPU rate: a short second reading is taken instead. */
const RATE_BASE_MS = 30_000;
const SECOND_READING_MS = 500;
/** Disk use changes slowly and `du` reads every file: at most once a minute per sandbox. */
const DISK_EVERY_MS = 60_000;
/** How long an answer waits for a disk scan under way; later answers carry its result. */
const DISK_WAIT_MS = 1_500;
/** Longest a reading for a list of every sandbox may take. */
const GLANCE_MS = 2_000;
/** Longest an engine reading may take before the answer is an error. */
const READING_TIMEOUT_MS = 5_000;

interface Ring {
  points: UsagePoint[];
  last?: ResourceUse;
  /** This process's clock when `last` was read: the cadence never trusts the engine's clock (skewed, or Go's zero time). */
  sampledAt: number;
  disk?: DiskUse & { at: number };
  /** When the last disk scan started, whatever its outcome: a failed or cut-off scan is not retried at once. */
  diskTriedAt: number;
  readAt: number;
}

/**
 * The sandbox panel's usage figures: CPU, memory and disk now, and a short history. Sampled only
 * when someone asks (the panel polls while it is open), never in the background; what was
 * sampled stays in a small ring per sandbox in this process, which goes HISTORY_MS after its last
 * read. With several service processes each keeps its own ring.
 */
export class SandboxUsage {
  private readonly rings = new Map<string, Ring>();
  private readonly readings = new SingleFlight<ResourceUse>();
  private readonly scans = new SingleFlight<DiskUse>();

  constructor(private readonly source: UsageSource, private readonly now: () => number = Date.now) {}

  /** The sandbox's usage now and what was sampled before; 409 when it is not running (never wakes it). */
  async read(name: string): Promise<UsageNow> {
    this.forgetUnread();
    const ring = this.rings.get(name) ?? { points: [], sampledAt: 0, diskTriedAt: -Infinity, readAt: 0 };
    this.rings.set(name, ring);
    ring.readAt = this.now();
    if (!ring.last || this.now() - ring.sampledAt >= SAMPLE_EVERY_MS) await this.readings.do(name, () => this.sample(name, ring));
    const last = ring.last!;
    const disk = await this.disk(name, ring);
    return {
      at: ring.sampledAt,
      cpu: { cores: ring.points.at(-1)?.cpu ?? 0, limit: last.cpuLimit },
      memory: { bytes: last.memoryBytes, limit: last.memoryLimitBytes },
      disk,
      history: ring.points,
    };
  }

  /**
   * The memory a sandbox uses now, for a list of every sandbox (the admin view): one reading,
   * outside the panels' rings, given GLANCE_MS; null when it does not run or the engine did not
   * answer by then (the list is not held up).
   */
  async memoryNow(name: string): Promise<number | null> {
    const reading = await this.source.resourceUse(name, AbortSignal.timeout(GLANCE_MS)).catch(() => undefined);
    return reading?.memoryBytes ?? null;
  }

  private async sample(name: string, ring: Ring): Promise<ResourceUse> {
    let base = ring.last && this.now() - ring.sampledAt < RATE_BASE_MS ? { reading: ring.last, at: ring.sampledAt } : undefined;
    let reading = await this.reading(name);
    let at = this.now();
    // a rate needs two readings; a restarted sandbox starts its CPU count from zero again
    if (!base || reading.cpuNs < base.reading.cpuNs) {
      base = { reading, at };
      await new Promise((resolve) => setTimeout(resolve, SECOND_READING_MS));
      reading = await this.reading(name);
      at = this.now();
    }
    // the engine's read times match its CPU counts best; a clock that did not move (Go's zero time) falls back to ours
    const engineMs = reading.at - base.reading.at;
    const elapsedNs = Math.max(1, engineMs > 0 ? engineMs : at - base.at) * 1e6;
    const cpu = Math.max(0, (reading.cpuNs - base.reading.cpuNs) / elapsedNs);
    ring.points.push({ at, cpu: Math.round(cpu * 1000) / 1000, memoryBytes: reading.memoryBytes });
    const oldest = at - HISTORY_MS;
    while (ring.points.length > HISTORY_POINTS || (ring.points[0] && ring.points[0].at < oldest)) ring.points.shift();
    ring.last = reading;
    ring.sampledAt = at;
    return reading;
  }

  /** One engine reading; an engine that does not answer in time is RuntimeUnreachable (the runtime's guard). */
  private async reading(name: string): Promise<ResourceUse> {
    const reading = await this.source.resourceUse(name, AbortSignal.timeout(READING_TIMEOUT_MS));
    if (!reading) {
      this.rings.delete(name);
      throw notRunning(name, 'exited');
    }
    return reading;
  }

  /**
   * The last disk use; a new scan once the last one started DISK_EVERY_MS ago (failed or not: a
   * sandbox whose scan fails or is cut off does not run `du` on every read), waited for at most DISK_WAIT_MS.
   */
  private async disk(name: string, ring: Ring): Promise<UsageNow['disk']> {
    if (this.now() - ring.diskTriedAt < DISK_EVERY_MS) return ring.disk ?? null;
    ring.diskTriedAt = this.now();
    const scan = this.scans.do(name, async () => {
      const use = await this.source.diskUse(name);
      ring.disk = { ...use, at: this.now() };
      return use;
    });
    scan.catch(() => undefined); // a failed scan leaves the last figure; a read after DISK_EVERY_MS tries again
    await Promise.race([scan.catch(() => undefined), new Promise((resolve) => setTimeout(resolve, DISK_WAIT_MS).unref())]);
    return ring.disk ?? null;
  }

  /** Drops the rings nobody read for HISTORY_MS: memory stays bounded by the panels open. */
  private forgetUnread(): void {
    const stale = this.now() - HISTORY_MS;
    for (const [name, ring] of this.rings) if (ring.readAt < stale) this.rings.delete(name);
  }
}
