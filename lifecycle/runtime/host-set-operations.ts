import { errors } from '../../core/errors.ts';
import { LOCAL_HOST, type HostStore } from '../../store/index.ts';
import { evacuateHost, moveSandbox, recoverMoves } from '../move.ts';
import type { EvacuateOptions, Evacuation, HostOperations, HostReading, MoveOptions, MoveProgress, Mover } from './host-operations.ts';
import type { HostSetRuntime } from './host-set-runtime.ts';

/**
 * The hosts of a HostSetRuntime as the operator's `svc hosts …` and a reconcile pass use them: their
 * records in the store, each engine's figures, and moves of a sandbox's volumes between engines
 * (lifecycle/move.ts).
 */
export class HostSetOperations implements HostOperations {
  /** `poolsChanged`: the set of hosts changed; this machine's routes to their pools follow (applyRunnerPools). */
  constructor(private readonly set: HostSetRuntime, private readonly hosts: HostStore, private readonly poolsChanged: () => Promise<void>) {}

  async readings(): Promise<HostReading[]> {
    return (await this.set.placement.loads()).map(({ name, record, load, error }) => ({
      name,
      ...(record?.address ? { address: record.address, ...(record.port !== undefined ? { port: record.port } : {}) } : {}),
      drained: !!record?.drained_at,
      ...(load ? { figures: load } : {}),
      ...(error !== undefined ? { error } : {}),
    }));
  }

  /** The service's own machine gets a record for it the first time. */
  async setDrained(name: string, drained: boolean): Promise<void> {
    const host = (await this.hosts.get(name)) ?? (name === LOCAL_HOST ? { name, created_at: new Date().toISOString() } : undefined);
    if (!host) throw new errors.NotFound(`no host named "${name}" (svc hosts list)`);
    const { drained_at: _was, ...open } = host;
    await this.hosts.put(drained ? { ...host, drained_at: host.drained_at ?? new Date().toISOString() } : open);
  }

  async remove(name: string): Promise<void> {
    if (name === LOCAL_HOST) throw new errors.BadRequest(`"${LOCAL_HOST}" is the machine the service runs on; drain it instead`);
    if (!(await this.hosts.get(name))) throw new errors.NotFound(`no host named "${name}" (svc hosts list)`);
    await this.hosts.remove(name);
    await this.poolsChanged();
  }

  move(mover: Mover, name: string, opts?: MoveOptions): Promise<MoveProgress> {
    return moveSandbox({ ...mover, runtime: this.set }, name, opts);
  }

  evacuate(mover: Mover, host: string, opts?: EvacuateOptions): Promise<Evacuation> {
    return evacuateHost({ ...mover, runtime: this.set }, host, opts);
  }

  recoverMoves(mover: Mover): Promise<void> {
    return recoverMoves({ ...mover, runtime: this.set });
  }
}
