import type { DataPlaneTraffic, RouteTraffic } from '../../core/metrics.ts';
import { APP_TABLE, PUBLIC_BACKENDS, REGISTRY_UPSTREAM_BACKEND } from './haproxy-config.ts';
import type { RuntimeApi } from './runtime-api.ts';

/** Each backend's counters from HAProxy's `show stat` (its BACKEND row), by column name (`stot`, `bin`, …). */
export async function backendStats(api: RuntimeApi): Promise<Map<string, Record<string, number>>> {
  const [head = '', ...rows] = (await api.run('show stat')).split('\n');
  const columns = head.replace(/^# /, '').split(',');
  const stats = new Map<string, Record<string, number>>();
  for (const row of rows) {
    const cells = row.split(',');
    if (cells[1] !== 'BACKEND') continue;
    const values: Record<string, number> = {};
    columns.forEach((column, i) => {
      if (i >= 2 && column) values[column] = Number(cells[i]) || 0;
    });
    stats.set(cells[0]!, values);
  }
  return stats;
}

/** What HAProxy's counters say it carried itself since it started, as the edge's metrics count. */
function carried(stats: Map<string, Record<string, number>>): DataPlaneTraffic {
  const routes: DataPlaneTraffic['routes'] = {};
  for (const [route, backend] of Object.entries(PUBLIC_BACKENDS) as [keyof typeof PUBLIC_BACKENDS, string][]) {
    const s = stats.get(backend) ?? {};
    routes[route] = { connections: s.stot ?? 0, open: s.scur ?? 0, bytesIn: s.bin ?? 0, bytesOut: s.bout ?? 0, requests: 0 };
  }
  // requests HAProxy answered itself; those it handed to Node are counted by Node's servers
  routes['app-http']!.requests = stats.get(APP_TABLE)?.req_tot ?? 0;
  routes.registry!.requests = stats.get(REGISTRY_UPSTREAM_BACKEND)?.req_tot ?? 0;
  // an app's address that refused or did not answer: HAProxy's errorfile 503, the waiting page
  return { routes, waitingPages: stats.get(APP_TABLE)?.econ ?? 0 };
}

const COUNTED = ['connections', 'bytesIn', 'bytesOut', 'requests'] as const;

function plus(a: DataPlaneTraffic, b: DataPlaneTraffic): DataPlaneTraffic {
  const routes: DataPlaneTraffic['routes'] = {};
  for (const route of new Set([...Object.keys(a.routes), ...Object.keys(b.routes)]) as Set<keyof DataPlaneTraffic['routes']>) {
    const x = a.routes[route];
    const y = b.routes[route];
    const sum = { ...(y ?? x)! } as RouteTraffic;
    for (const k of COUNTED) sum[k] = (x?.[k] ?? 0) + (y?.[k] ?? 0);
    // open connections are HAProxy's now, not a sum over its lives
    sum.open = y?.open ?? 0;
    routes[route] = sum;
  }
  return { routes, waitingPages: a.waitingPages + b.waitingPages };
}

const NOTHING: DataPlaneTraffic = { routes: {}, waitingPages: 0 };

/**
 * HAProxy's traffic since the service started, kept monotonic across its restarts (each new
 * process counts from zero: what the previous one had counted at the last reading is kept; what it
 * counted after that reading is lost with it).
 */
export class DataPlaneTrafficReader {
  private before = NOTHING;
  private last = NOTHING;
  private lastPid: number | undefined;

  constructor(private readonly api: () => RuntimeApi | null, private readonly pid: () => number | undefined) {}

  async read(): Promise<DataPlaneTraffic> {
    const api = this.api();
    const pid = this.pid();
    if (!api || pid === undefined) return plus(this.before, this.last);
    const now = carried(await backendStats(api));
    // a restart during the reading: these counts may be either process's
    if (this.pid() !== pid) return plus(this.before, this.last);
    if (pid !== this.lastPid) {
      this.before = plus(this.before, this.last);
      this.lastPid = pid;
    }
    this.last = now;
    return plus(this.before, now);
  }
}
