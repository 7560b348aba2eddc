import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../core/compose-labels.ts';
import type { Lifecycle } from '../lifecycle/index.ts';

/** A row of GET volumes (spec 2.4). */
export interface VolumeInfo {
  name: string;
  /** Where its files are inside the sandbox container; usable with the file routes. */
  path: string;
  project: string | null;
  containers: Array<{ name: string; service: string | null; running: boolean; mount: string }>;
}

/** Local-driver volumes of the sandbox's engine, each with the containers that mount it. */
export async function listVolumes(lifecycle: Lifecycle, sandbox: string): Promise<VolumeInfo[]> {
  const engine = await lifecycle.runningEngine(sandbox);
  const [{ Volumes }, containers] = await Promise.all([engine.listVolumes(), engine.listContainers({ all: true })]);
  return (Volumes ?? [])
    .filter((v) => v.Driver === 'local')
    .map((v) => {
      const users = containers.flatMap((c) =>
        (c.Mounts ?? [])
          .filter((m) => m.Type === 'volume' && m.Name === v.Name)
          .map((m) => ({
            name: (c.Names?.[0] ?? c.Id).replace(/^\//, ''),
            service: c.Labels?.[COMPOSE_SERVICE] ?? null,
            running: c.State === 'running',
            mount: m.Destination,
            project: c.Labels?.[COMPOSE_PROJECT],
          })),
      );
      const project = v.Labels?.[COMPOSE_PROJECT] ?? users.find((u) => u.project)?.project ?? null;
      return {
        name: v.Name,
        path: v.Mountpoint || `/var/lib/docker/volumes/${v.Name}/_data`,
        project,
        containers: users.map(({ project: _p, ...u }) => u).sort((a, b) => a.name.localeCompare(b.name)),
      };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}
