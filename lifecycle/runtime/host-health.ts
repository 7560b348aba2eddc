import type { Logger } from '../../core/logger.ts';
import { SingleFlight } from '../../core/keyed-lock.ts';
import { RuntimeUnreachable } from './sandbox-runtime.ts';

/**
 * A host that failed an ask is away this long at most without being asked again: its sandboxes'
 * calls answer unreachable at once (an inspect of a silent engine waits 10 s). Probes end it sooner.
 */
const AWAY_MS = 15_000;
/** How often an away host is probed (a ping), and how long a probe waits for its answer. */
const AWAY_PROBE_MS = 1000;
const PROBE_TIMEOUT_MS = 2000;
/**
 * A host is taken for away only when a ping fails too, given this long: a heavy call's own deadline
 * (a capacity count or a listing over hundreds of containers on a loaded engine), or one ping slowed
 * by load, says the engine is slow, not gone, and must not show every sandbox of it unavailable.
 */
const CONFIRM_TIMEOUT_MS = 5000;

/** What health asks of a host's engine. */
export interface Pingable {
  /** Rejects with RuntimeUnreachable when the engine does not answer in time. */
  ping(signal?: AbortSignal): Promise<void>;
}

/**
 * Which hosts of a HostSetRuntime are away (failed an ask, and a ping after it): their sandboxes'
 * calls answer unreachable at once until a probe hears the host again.
 */
export class HostHealth<E extends Pingable> {
  /** Hosts that failed an ask: why, until when they are not asked, and whether a probe runs. */
  private readonly away = new Map<string, { reason: string; until: number; probing: boolean }>();
  /** Hosts whose ask failed, being pinged before they are taken for away (confirmAway). */
  private readonly confirming = new SingleFlight<void>();

  /** `engine`: the host's engine now; rejects when the host is no longer registered. */
  constructor(private readonly opts: { logger: Logger; engine(host: string): Promise<E> }) {}

  isAway(host: string): boolean {
    return this.away.has(host);
  }

  throwIfAway(host: string): void {
    const away = this.away.get(host);
    if (away && away.until > Date.now()) throw new RuntimeUnreachable(away.reason);
  }

  /**
   * Runs an ask of a host: at once RuntimeUnreachable while it is away; a RuntimeUnreachable from the
   * ask makes it away (AWAY_MS, probed every AWAY_PROBE_MS until it answers) once a ping fails too.
   */
  async ask<T>(host: string, call: (engine: E) => Promise<T>): Promise<T> {
    this.throwIfAway(host);
    const engine = await this.opts.engine(host);
    try {
      return await call(engine);
    } catch (err) {
      if (err instanceof RuntimeUnreachable) await this.confirmAway(host, engine);
      throw err;
    }
  }

  /** Pings each host not away once: one that does not answer is away. */
  async probe(hosts: Array<{ name: string; engine: E }>): Promise<void> {
    await Promise.all(hosts.filter((h) => !this.away.has(h.name)).map(async (h) => {
      try {
        await h.engine.ping(AbortSignal.timeout(CONFIRM_TIMEOUT_MS));
      } catch (err) {
        if (err instanceof RuntimeUnreachable) this.markAway(h.name, err.reason);
      }
    }));
  }

  /** Marks a host away if it does not answer a ping within CONFIRM_TIMEOUT_MS either; concurrent callers share one ping. */
  private async confirmAway(host: string, engine: E): Promise<void> {
    if (this.away.has(host)) return;
    await this.confirming.do(host, async () => {
      try {
        await engine.ping(AbortSignal.timeout(CONFIRM_TIMEOUT_MS));
      } catch (err) {
        if (err instanceof RuntimeUnreachable) this.markAway(host, err.reason);
      }
    });
  }

  private markAway(host: string, reason: string): void {
    const known = this.away.get(host);
    if (!known) this.opts.logger.warn({ host, reason }, 'host does not answer: its sandboxes answer unavailable until it does (probed every second)');
    this.away.set(host, { reason, until: Date.now() + AWAY_MS, probing: known?.probing ?? false });
    void this.probeWhileAway(host);
  }

  /** Pings an away host every AWAY_PROBE_MS until it answers (then it is asked again) or is no longer registered. */
  private async probeWhileAway(host: string): Promise<void> {
    const entry = this.away.get(host);
    if (!entry || entry.probing) return;
    entry.probing = true;
    try {
      for (;;) {
        await new Promise((resolve) => setTimeout(resolve, AWAY_PROBE_MS).unref());
        const engine = await this.opts.engine(host).catch(() => undefined);
        if (!engine) return void this.away.delete(host); // no longer registered
        try {
          await engine.ping(AbortSignal.timeout(PROBE_TIMEOUT_MS));
          this.away.delete(host);
          this.opts.logger.info({ host }, 'host answers again');
          return;
        } catch (err) {
          const current = this.away.get(host);
          if (!current) return;
          current.until = Date.now() + AWAY_MS;
          if (err instanceof RuntimeUnreachable) current.reason = err.reason;
        }
      }
    } finally {
      const current = this.away.get(host);
      if (current) current.probing = false;
    }
  }
}
