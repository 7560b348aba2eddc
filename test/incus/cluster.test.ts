import { after, before, describe } from 'node:test';
import { clusterUp, rig } from '../../harness/test-cluster.ts';
import { contractOnCluster } from './cluster-contract.ts';
import { runtimeOnCluster } from './cluster-runtime.ts';
import { serviceOnCluster } from './cluster-service.ts';

/**
 * Sandboxes on a 3-member Incus cluster made by scripts/test-cluster.sh on this machine (issue 34 §6),
 * brought up once for all of it and removed at its end (nothing left: processes, links, rules, cgroups,
 * folders): the runtime and `svc hosts …` on the members (cluster-runtime.ts), the runtime contract
 * over HTTPS (cluster-contract.ts), then the service on them as users and its operator reach it, a
 * member lost and moves among them (cluster-service.ts, cluster-loss.ts). The successors of the runner hosts' tests (test/hosts/*), docs/scale-out.md.
 */
describe('Incus cluster: sandboxes over 3 members', { concurrency: false }, () => {
  before(() => clusterUp());
  after(async () => { await rig('down'); });
  runtimeOnCluster();
  contractOnCluster();
  serviceOnCluster();
});
