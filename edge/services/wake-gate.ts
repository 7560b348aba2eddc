import type { EdgeBackend, WakeUnderWay } from '../backend.ts';

/**
 * Coalesces wake requests: a page that reloads every 3 s, or twenty tabs hitting an asleep
 * sandbox at once, ask the backend to wake it once. After a successful request the sandbox is not
 * asked again for `holdMs` (a wake from deep sleep takes about 30 s); if it is still asleep after
 * that, the next request asks again (the previous wake may have failed).
 *
 * A refused wake (wake limit) or one that failed is not remembered: the next request asks again
 * and gets its answer.
 */
export class WakeGate {
  private readonly requested = new Map<string, { at: number; pending: Promise<WakeUnderWay> }>();

  constructor(
    private readonly backend: Pick<EdgeBackend, 'requestWake'>,
    private readonly holdMs = 30_000,
  ) {}

  wake(sandbox: string): Promise<WakeUnderWay> {
    const now = Date.now();
    const prev = this.requested.get(sandbox);
    if (prev && now - prev.at < this.holdMs) return prev.pending;
    const pending = this.backend.requestWake(sandbox);
    const entry = { at: now, pending };
    this.requested.set(sandbox, entry);
    const forget = () => {
      if (this.requested.get(sandbox) === entry) this.requested.delete(sandbox);
    };
    pending.then((wake) => wake.running.catch(forget), forget);
    if (this.requested.size > 10_000) {
      for (const [k, v] of this.requested) if (now - v.at >= this.holdMs) this.requested.delete(k);
    }
    return pending;
  }

  /** The sandbox answered as running: the next time it sleeps, wake it again at once. */
  awake(sandbox: string): void {
    this.requested.delete(sandbox);
  }
}
