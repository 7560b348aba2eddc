/**
 * Readiness (GET /readyz): every part a request may need answers within a deadline. Liveness
 * (GET /healthz) is only "this process answers HTTP", so a supervisor restarts a hung process,
 * never one whose Redis is away (a restart would not bring Redis back).
 */

/** One dependency: resolves when it answers, throws (with the reason) when it does not. */
export interface ReadinessCheck {
  name: string;
  check: () => Promise<unknown>;
}

export interface Readiness {
  ready: boolean;
  /** Each check by name: `ok`, or the reason it failed. */
  checks: Record<string, string>;
}

/** A check that has not answered in this time counts as down (a Redis that is away never answers). */
export const CHECK_TIMEOUT_MS = 2_000;

export async function readiness(checks: readonly ReadinessCheck[], timeoutMs = CHECK_TIMEOUT_MS): Promise<Readiness> {
  const results = await Promise.all(checks.map(async ({ name, check }) => [name, await outcome(check, timeoutMs)] as const));
  return { ready: results.every(([, r]) => r === 'ok'), checks: Object.fromEntries(results) };
}

async function outcome(check: () => Promise<unknown>, timeoutMs: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((resolve) => { timer = setTimeout(() => resolve(`no answer within ${timeoutMs} ms`), timeoutMs); });
  try {
    return await Promise.race([check().then(() => 'ok'), late]);
  } catch (err) {
    return (err as Error).message || String(err);
  } finally {
    clearTimeout(timer);
  }
}

/** What the service's checks look at: its Redis connection, store, sandbox engine, registry upstream and data plane. */
export interface ServiceParts {
  redis: { status: string; ping(): Promise<unknown> };
  store: { sandboxes: { get(name: string): Promise<unknown> } };
  sandboxEngine: { ping(): Promise<unknown> };
  registryUpstream: { fetch(path: string, init?: { signal?: AbortSignal }): Promise<Response> };
  /**
   * Who owns the public port, once the edge listens (undefined before): `ping` asks HAProxy's
   * Runtime API; null when Node's edge owns it itself (then this process answering is the check).
   */
  dataPlane: () => { ping(): Promise<unknown> } | null | undefined;
}

export function serviceChecks(parts: ServiceParts): ReadinessCheck[] {
  return [
    {
      name: 'redis',
      // ioredis queues commands while it reconnects: ask only a connection that is up
      check: async () => {
        if (parts.redis.status !== 'ready') throw new Error(`not connected (${parts.redis.status})`);
        await parts.redis.ping();
      },
    },
    // a read of a key that never exists: one round trip on the store's own connection
    { name: 'store', check: () => parts.store.sandboxes.get('readyz-probe') },
    { name: 'sandbox_engine', check: () => parts.sandboxEngine.ping() },
    {
      name: 'registry_upstream',
      check: async () => {
        const res = await parts.registryUpstream.fetch('/v2/', { signal: AbortSignal.timeout(CHECK_TIMEOUT_MS) });
        await res.arrayBuffer();
        if (res.status >= 500) throw new Error(`answers ${res.status}`);
      },
    },
    {
      name: 'data_plane',
      check: async () => {
        const dataPlane = parts.dataPlane();
        if (dataPlane === undefined) throw new Error('the public port is not open yet');
        await dataPlane?.ping();
      },
    },
  ];
}
