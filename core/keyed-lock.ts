/**
 * Orders waiters across service processes: `hold` runs `work` while no other process holds any of
 * `keys` (a Redis lease, a lease row in the store). Keys come sorted, so two holders that need
 * overlapping keys cannot deadlock.
 */
export interface CrossProcessLock {
  hold<T>(keys: readonly string[], work: () => Promise<T>): Promise<T>;
}

/**
 * Serialises async work per key: in this process first (a chain of promises per key, so waiters
 * here never poll), then across processes when a CrossProcessLock is given. The one keyed lock of
 * the house: sandbox transitions, store writes and registry repositories all take it.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  constructor(private readonly across?: CrossProcessLock) {}

  /** Runs `work` while holding every key of `keys` (one key or several; duplicates allowed). */
  async run<T>(keys: string | readonly string[], work: () => Promise<T>): Promise<T> {
    const sorted = [...new Set(typeof keys === 'string' ? [keys] : keys)].sort();
    const releases: Array<() => void> = [];
    try {
      for (const key of sorted) releases.push(await this.acquire(key));
      return await (this.across ? this.across.hold(sorted, work) : work());
    } finally {
      for (const release of releases.reverse()) release();
    }
  }

  private async acquire(key: string): Promise<() => void> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => { release = resolve; });
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    return () => {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    };
  }
}

/**
 * Joins concurrent callers onto one in-flight promise per key (a hundred wakes, one start; one
 * read of a layer two scans share; one certificate issue for concurrent handshakes).
 */
export class SingleFlight<T> {
  private readonly inflight = new Map<string, Promise<T>>();

  /** The work in flight for `key`, for a caller that decides whether to start any. */
  running(key: string): Promise<T> | undefined {
    return this.inflight.get(key);
  }

  do(key: string, work: () => Promise<T>): Promise<T> {
    const existing = this.inflight.get(key);
    if (existing) return existing;
    const p = work().finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }
}

/**
 * Gathers the reads asked for within one turn of the event loop into one `load` of all their keys:
 * a list of 500 sandboxes that each ask for a row asks the store once. Each read still begins after
 * its call, so it sees every write made before it.
 */
export class Batched<V> {
  private pending?: { keys: Set<string>; loaded: Promise<Map<string, V>> };

  constructor(private readonly load: (keys: string[]) => Promise<Map<string, V>>) {}

  get(key: string): Promise<V | undefined> {
    if (!this.pending) {
      const keys = new Set<string>();
      const loaded = new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
        this.pending = undefined;
        return this.load([...keys]);
      });
      this.pending = { keys, loaded };
    }
    this.pending.keys.add(key);
    return this.pending.loaded.then((values) => values.get(key));
  }
}
