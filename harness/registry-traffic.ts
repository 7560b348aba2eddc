import { RuntimeApi } from '../edge/dataplane/runtime-api.ts';
import type { TestService } from './service.ts';

/**
 * Where HAProxy sent the registry's requests so far, from its own statistics (`show stat`):
 * `upstream`, straight to the distribution registry (a blob's bytes the front allowed); `front`, to
 * Node's registry front. Null when the service runs without HAProxy.
 */
export async function registryTraffic(t: TestService): Promise<{ upstream: number; front: number } | null> {
  const dataPlane = t.service.edge.dataPlane;
  if (!dataPlane) return null;
  const [head, ...rows] = (await new RuntimeApi(dataPlane.files.adminSocket).run('show stat')).split('\n');
  const columns = head!.replace(/^# /, '').split(',');
  const total = (backend: string) => Number(rows.map((r) => r.split(',')).find((r) => r[0] === backend && r[1] === 'BACKEND')?.[columns.indexOf('stot')] ?? NaN);
  return { upstream: total('be_registry_upstream'), front: total('be_node_registry') };
}
