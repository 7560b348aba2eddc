import os from 'node:os';
import { errors } from '../../core/errors.ts';
import type { EvacuateOptions, Evacuation, HostFigures, HostOperations, HostReading, MoveOptions, MoveProgress, Mover } from './host-operations.ts';

/** How long `svc hosts list` waits for the engine's figures. */
const READING_MS = 5000;

/** Where a service that has outgrown one machine goes: said by every refusal below. */
const GROW = 'to run sandboxes on several machines, put them on an Incus cluster (SVC_RUNTIME=incus): docs/scale-out.md, "From one machine to a cluster"';

/** What the one engine reads of itself (DockerRuntime): its machine's name and figures. */
export interface OneEngine {
  hostOf(name: string): Promise<string | null>;
  figures(signal?: AbortSignal): Promise<HostFigures>;
}

/**
 * The hosts of the Docker runtime: the one machine its engine runs on. `svc hosts list` shows it with
 * its figures; draining, moving, evacuating and removing have nowhere to go, and say so with the way
 * to grow (issue 34 §5: several machines are an Incus cluster, whose members IncusHosts drives).
 */
export class OneMachineHosts implements HostOperations {
  constructor(private readonly engine: OneEngine) {}

  async readings(): Promise<HostReading[]> {
    const name = (await this.engine.hostOf('').catch(() => null)) ?? os.hostname();
    try {
      return [{ name, drained: false, figures: await this.engine.figures(AbortSignal.timeout(READING_MS)) }];
    } catch (err) {
      return [{ name, drained: false, error: (err as Error).message }];
    }
  }

  setDrained(_name: string, drained: boolean): Promise<void> {
    return refuse(drained ? 'drain' : 'undrain', 'this machine is the only one: draining it would leave no host for new sandboxes');
  }

  remove(_name: string): Promise<void> {
    return refuse('remove', 'this machine is the only one and runs the service');
  }

  move(_mover: Mover, _name: string, _opts?: MoveOptions): Promise<MoveProgress> {
    return refuse('move', 'there is no other host to move a sandbox to');
  }

  evacuate(_mover: Mover, _host: string, _opts?: EvacuateOptions): Promise<Evacuation> {
    return refuse('evacuate', 'there is no other host to move its sandboxes to');
  }
}

function refuse(verb: string, why: string): Promise<never> {
  return Promise.reject(new errors.Conflict(`svc hosts ${verb}: this service runs its sandboxes on one machine's Docker engine; ${why}. Nothing was changed; ${GROW}`));
}
