import type { EdgeBackend } from '../backend.ts';
import type { Logger } from '../../core/logger.ts';

/**
 * Reports bytes moving to the backend (spec 3 rule 2, design.md "Activity").
 *
 * Called for every chunk in either direction; it forwards at most one call per sandbox per
 * `intervalMs`, so a 100 MB download costs a handful of backend calls instead of thousands.
 * The backend throttles session renewals on top of this (once per min(60 s, idle_timeout / 4)):
 * keep `intervalMs` well below that (the default, 500 ms, is).
 */
export class ActivityMeter {
  private readonly last = new Map<string, number>();
  private readonly listeners = new Map<string, () => void>();
  private readonly sweep: NodeJS.Timeout;

  constructor(
    private readonly backend: Pick<EdgeBackend, 'recordActivity'>,
    private readonly intervalMs = 500,
    private readonly logger?: Logger,
  ) {
    // Forget sandboxes that went quiet, so the map stays as small as the set of busy sandboxes.
    this.sweep = setInterval(() => {
      const cutoff = Date.now() - Math.max(intervalMs, 1000) * 10;
      for (const [k, t] of this.last) {
        if (t >= cutoff) continue;
        this.last.delete(k);
        this.listeners.delete(k);
      }
    }, 30_000).unref();
  }

  touch(sandbox: string): void {
    const now = Date.now();
    const prev = this.last.get(sandbox);
    if (prev !== undefined && now - prev < this.intervalMs) return;
    this.last.set(sandbox, now);
    try {
      this.backend.recordActivity(sandbox);
    } catch (err) {
      this.logger?.warn({ err, sandbox }, 'edge: recordActivity threw');
    }
  }

  /** A `data` listener that touches `sandbox`; attach it to each side of a proxied connection. */
  listener(sandbox: string): () => void {
    let fn = this.listeners.get(sandbox);
    if (!fn) {
      fn = () => this.touch(sandbox);
      this.listeners.set(sandbox, fn);
    }
    return fn;
  }

  close(): void {
    clearInterval(this.sweep);
  }
}
