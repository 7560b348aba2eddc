import { REGISTRY_UPSTREAM_BACKEND } from '../edge/dataplane/haproxy-config.ts';
import { RuntimeApi } from '../edge/dataplane/runtime-api.ts';
import { backendStats } from '../edge/dataplane/traffic-stats.ts';
import type { TestService } from './service.ts';

/**
 * Where HAProxy sent the registry's requests so far, from its own statistics (`show stat`):
 * `upstream`, straight to the distribution registry (a blob's bytes the front allowed); `front`, to
 * Node's registry front. Null when the service runs without HAProxy.
 */
export async function registryTraffic(t: TestService): Promise<{ upstream: number; front: number } | null> {
  const dataPlane = t.service.edge.dataPlane;
  if (!dataPlane) return null;
  const stats = await backendStats(new RuntimeApi(dataPlane.files.adminSocket));
  const total = (backend: string) => stats.get(backend)?.stot ?? NaN;
  return { upstream: total(REGISTRY_UPSTREAM_BACKEND), front: total('be_node_registry') };
}
