/**
 * Waits for an event instead of a fixed time: `start` begins the work and gets `done`, to call
 * with the result when the awaited event happens; it returns its cleanup, which runs either way.
 * Fails after `ms` with what was awaited, so a test never hangs on an event that does not come.
 */
export async function within<T>(ms: number, what: string, start: (done: (value: T) => void, fail: (err: unknown) => void) => () => void): Promise<T> {
  let cleanup: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise<T>((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
      cleanup = start(resolve, reject);
    });
  } finally {
    clearTimeout(timer);
    cleanup?.();
  }
}
