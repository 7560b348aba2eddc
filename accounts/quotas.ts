import type { Config } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import type { Store, QuotaValues, UserRecord } from '../store/index.ts';
import { requireUserByName, updateUser } from './users.ts';

export type { QuotaValues };

export const QUOTA_NAMES = ['max_sandboxes', 'max_running', 'memory_mb', 'cpus', 'wakes_per_hour'] as const;
export type QuotaName = (typeof QUOTA_NAMES)[number];

/** What each quota means, for messages: "quota max_running (2 sandboxes running at once)". */
const UNITS: Record<QuotaName, string> = {
  max_sandboxes: 'sandboxes',
  max_running: 'sandboxes running at once',
  memory_mb: 'MB of memory per sandbox',
  cpus: 'CPUs per sandbox',
  wakes_per_hour: 'wakes by app traffic per hour',
};

export function describeQuota(name: QuotaName, value: number): string {
  return `quota ${name} (${value} ${UNITS[name]})`;
}

/** The operator's defaults: SVC_QUOTA_*, SVC_SANDBOX_MEMORY_MB, SVC_SANDBOX_CPUS, SVC_WAKES_PER_HOUR. */
export function quotaDefaults(config: Pick<Config, 'quotaMaxSandboxes' | 'quotaMaxRunning' | 'sandboxMemoryMb' | 'sandboxCpus' | 'wakesPerHour'>): QuotaValues {
  return {
    max_sandboxes: config.quotaMaxSandboxes,
    max_running: config.quotaMaxRunning,
    memory_mb: config.sandboxMemoryMb,
    cpus: config.sandboxCpus,
    wakes_per_hour: config.wakesPerHour,
  };
}

/** The user's quotas: their own values over the operator's defaults. */
export function effectiveQuotas(user: Pick<UserRecord, 'quotas'>, defaults: QuotaValues): QuotaValues {
  const own = user.quotas ?? {};
  return Object.fromEntries(QUOTA_NAMES.map((q) => [q, own[q] ?? defaults[q]])) as unknown as QuotaValues;
}

/** Smallest sandbox the engine and the inner dockerd start in; a lower memory quota could never be used. */
const MIN_MEMORY_MB = 64;

/** Checks one quota value; errors.BadRequest says what is allowed. */
export function checkQuota(name: QuotaName, value: number): number {
  const ok = name === 'cpus'
    ? Number.isFinite(value) && value >= 0.1 && value <= 1024 && Math.round(value * 100) === value * 100
    : Number.isInteger(value) && value >= (name === 'memory_mb' ? MIN_MEMORY_MB : 0) && value <= 1_000_000;
  if (!ok) {
    throw new errors.BadRequest(name === 'cpus'
      ? `cpus must be a number from 0.1 to 1024 with at most two decimals, got ${value}`
      : `${name} must be a whole number from ${name === 'memory_mb' ? MIN_MEMORY_MB : 0} to 1000000, got ${value}`);
  }
  return value;
}

/**
 * Sets some of a user's quotas (the others keep their values); `null` puts one back to the
 * operator's default. Everything is checked before anything changes. Lowering a quota below what
 * the user uses stops nothing: it only refuses what would go over it from now on.
 */
export async function setQuotas(store: Store, name: string, change: Partial<Record<QuotaName, number | null>>): Promise<UserRecord> {
  const user = await requireUserByName(store, name);
  for (const [q, v] of Object.entries(change)) {
    if (!(QUOTA_NAMES as readonly string[]).includes(q)) throw new errors.BadRequest(`unknown quota "${q}": use ${QUOTA_NAMES.join(', ')}`);
    if (v !== null && v !== undefined) checkQuota(q as QuotaName, v);
  }
  return updateUser(store, user.id, (u) => {
    const quotas: Partial<QuotaValues> = { ...u.quotas };
    for (const [q, v] of Object.entries(change) as Array<[QuotaName, number | null | undefined]>) {
      if (v === null) delete quotas[q];
      else if (v !== undefined) quotas[q] = v;
    }
    return { ...u, quotas };
  });
}
