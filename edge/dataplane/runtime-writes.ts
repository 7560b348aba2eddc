import type { Logger } from '../../core/logger.ts';
import type { RuntimeApi } from './runtime-api.ts';

/**
 * The Runtime API writes of the data plane's control side, one after another in the order they
 * were asked for: a map entry's removal never overtakes the add before it. Before HAProxy runs
 * (and while it restarts) there is no API: nothing is queued then, as each part writes everything
 * it holds when HAProxy is ready (RouteMirror.attach).
 */
export class RuntimeWrites {
  /** HAProxy's Runtime API while it runs (set by RouteMirror.attach at each start). */
  api: RuntimeApi | null = null;
  private tail: Promise<void> = Promise.resolve();

  constructor(private readonly log: Logger) {}

  /** Resolves once `write` ran; a failure is logged, not thrown. */
  enqueue(write: (api: RuntimeApi) => Promise<void>): Promise<void> {
    if (!this.api) return Promise.resolve();
    // the API at the time of the write: a restarted HAProxy's, if it restarted meanwhile
    this.tail = this.tail.then(() => write(this.api!)).catch((err) => this.log.warn({ err }, 'data plane: a route write failed'));
    return this.tail;
  }
}
