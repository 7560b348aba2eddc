import type { SandboxRecord } from '../store/index.ts';
import { parseDuration } from './durations.ts';
import type { SandboxSummary, SandboxView } from '../core/sandbox-summary.ts';
import type { SandboxState } from './runtime/sandbox-runtime.ts';
import type { IdleSession } from './sessions.ts';

export type { EngineAccess, SandboxSummary, SandboxView } from '../core/sandbox-summary.ts';

export const NOT_RUNNING_HINT =
  'The sandbox is not running: a connection to its engine does not wake it. Start it first (POST /api/sandboxes/:name/start), or open one of its app addresses.';

export const UNAVAILABLE_HINT =
  'The engine that holds this sandbox does not answer (its host is away): its state is unknown right now and nothing of it is lost. It comes back as it was once that engine answers; until then its addresses answer a page saying so, and starting or changing it, its files and its commands answer 503 (try again after Retry-After).';

export interface ViewContext {
  domain: string;
  httpsPort: number;
}

export function engineHost(name: string, domain: string): string {
  return `${name}-engine.${domain}`;
}

/** When an asleep sandbox will be taken down: its stop time plus deep_sleep_after, unless never. */
export function deepSleepAt(record: SandboxRecord, state: SandboxState): number | null {
  if (state.status !== 'exited' || !state.finishedAt) return null;
  const after = parseDuration(record.deep_sleep_after);
  return after === null ? null : Date.parse(state.finishedAt) + after;
}

export function summarise(record: SandboxRecord, state: SandboxState, session: IdleSession | null, tunnelUrls: string[], ctx: ViewContext): SandboxSummary {
  const host = engineHost(record.name, ctx.domain);
  const deepAt = deepSleepAt(record, state);
  return {
    name: record.name,
    status: state.status,
    template: record.template,
    created_at: record.created_at,
    idle_timeout: record.idle_timeout,
    deep_sleep_after: record.deep_sleep_after,
    stops_at: state.status === 'running' && session ? new Date(session.expiresAt).toISOString() : null,
    deep_sleep_at: deepAt === null ? null : new Date(deepAt).toISOString(),
    engine_access: {
      host,
      port: ctx.httpsPort,
      docker_host: `tcp://${host}:${ctx.httpsPort}`,
      state: record.certs ? 'ready' : 'needs-certs',
    },
    ...(state.status === 'running' ? {} : { hint: state.status === 'unavailable' ? UNAVAILABLE_HINT : NOT_RUNNING_HINT }),
    tunnel_urls: tunnelUrls,
  };
}

export function fullView(
  record: SandboxRecord,
  ownerName: string,
  state: SandboxState,
  session: IdleSession | null,
  apps: SandboxView['apps'],
  ctx: ViewContext,
  extras: Record<string, string> = {},
): SandboxView {
  return {
    ...summarise(record, state, session, apps.map((a) => a.url), ctx),
    owner: ownerName,
    ...(record.certs
      ? { ca_cert: record.certs.ca_cert, client_cert: record.certs.client_cert, client_key: record.certs.client_key }
      : {}),
    apps,
    extras,
  };
}
