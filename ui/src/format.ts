import type { Status } from './types.ts';

export const STATUS_LABEL: Record<Status, string> = { running: 'running', exited: 'asleep', deep_sleep: 'deep sleep', unavailable: 'unavailable' };

/** Spec 8: `0`, `off` and idle's stored `87600h` all mean never. */
export function isNever(duration: string): boolean {
  return duration === '0' || duration === 'off' || duration === '87600h';
}

export function showDuration(duration: string): string {
  return isNever(duration) ? 'never' : duration;
}

/** What the user types into a duration editor, as the API wants it ('never' → 'off'). */
export function toApiDuration(input: string): string {
  const v = input.trim().toLowerCase();
  return v === 'never' ? 'off' : v;
}

export function when(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '';
  const ms = Date.parse(iso) - now;
  const abs = Math.abs(ms);
  const span = abs < 90_000 ? `${Math.round(abs / 1000)} s` : abs < 5_400_000 ? `${Math.round(abs / 60_000)} min` : abs < 172_800_000 ? `${Math.round(abs / 3_600_000)} h` : `${Math.round(abs / 86_400_000)} days`;
  return ms >= 0 ? `in ${span}` : `${span} ago`;
}

export function date(iso: string | undefined): string {
  return iso ? new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' }) : '';
}

export function size(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let v = bytes / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}
