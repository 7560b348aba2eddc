/**
 * Tries `attempt` until it returns true: first again after `firstMs`, the wait doubling up to
 * `everyMs`. After `timeoutMs` it throws `<what> within <n> s (<last>)`, where `<last>` is what the
 * last try said (the string it returned, or the message of what it threw).
 */
export async function pollUntil(
  what: string,
  attempt: () => Promise<true | string>,
  opts: { timeoutMs: number; everyMs?: number; firstMs?: number },
): Promise<void> {
  const { timeoutMs, everyMs = 100 } = opts;
  const deadline = Date.now() + timeoutMs;
  let delay = Math.min(opts.firstMs ?? everyMs, everyMs);
  for (;;) {
    let last: string;
    try {
      const outcome = await attempt();
      if (outcome === true) return;
      last = outcome;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs / 1000} s (${last})`);
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, everyMs);
  }
}
