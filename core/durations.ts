import { errors } from './errors.ts';

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const PATTERN = /^(\d{1,6})([smhd])$/;

/**
 * Parses a duration string (`30s`, `45m`, `2h`, `14d`; `0` or `off` for never).
 * Returns milliseconds, or `null` for never. Throws SVC_BAD_DURATION otherwise.
 */
export function parseDuration(value: string): number | null {
  if (value === '0' || value === 'off') return null;
  const match = PATTERN.exec(value);
  if (!match) throw new errors.BadDuration(value);
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (ms === 0) return null;
  return ms;
}

/** A duration that must end (a deadline: 90s, 30m, 2h); undefined for anything else, never ("0", "off") included. */
export function finiteDuration(value: string): number | undefined {
  return PATTERN.test(value) ? parseDuration(value) ?? undefined : undefined;
}
