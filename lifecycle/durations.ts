import { parseDuration } from '../core/durations.ts';

export { parseDuration };

/** `off` idle timeout is stored as a ten-year session (spec 8), so it still has a deadline. */
export const IDLE_OFF = '87600h';

/** The idle timeout as stored: validated, with never written as the ten-year session. */
export function normaliseIdleTimeout(value: string): string {
  return parseDuration(value) === null ? IDLE_OFF : value;
}

/** deep_sleep_after as stored: validated, never kept as `off`. */
export function normaliseDeepSleepAfter(value: string): string {
  return parseDuration(value) === null ? 'off' : value;
}

/** What the panel and list show: 'never' for either value set to never (spec 8). */
export function displayDuration(value: string): string {
  return value === IDLE_OFF || parseDuration(value) === null ? 'never' : value;
}
