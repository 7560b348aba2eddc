/**
 * In-process write serialisation for the store: one holder per key at a time. Several keys are
 * taken in sorted order, so two writers that need overlapping keys cannot deadlock.
 *
 * The lock table is per process (module level), keyed by the caller, so two Store objects opened on
 * the same database in one process still serialise against each other (the store prefixes keys with
 * the database identity).
 */
const tails = new Map<string, Promise<void>>();

async function acquire(key: string): Promise<() => void> {
  const previous = tails.get(key) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((resolve) => { release = resolve; });
  const tail = previous.then(() => mine);
  tails.set(key, tail);
  await previous;
  return () => {
    release();
    if (tails.get(key) === tail) tails.delete(key);
  };
}

/** Runs `work` while holding every key in `keys` (duplicates allowed). */
export async function withLocks<T>(keys: readonly string[], work: () => Promise<T>): Promise<T> {
  const sorted = [...new Set(keys)].sort();
  const releases: Array<() => void> = [];
  try {
    for (const key of sorted) releases.push(await acquire(key));
    return await work();
  } finally {
    for (const release of releases.reverse()) release();
  }
}
