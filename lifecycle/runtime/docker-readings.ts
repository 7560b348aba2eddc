import type Docker from 'dockerode';
import { resourceNames } from '../names.ts';
import { isHelper, LABEL_CPUS, LABEL_INSTANCE, LABEL_MEMORY_MB } from './docker-labels.ts';
import { guarded, statusCode } from './engine-client.ts';
import type { SandboxExec } from './sandbox-exec.ts';
import type { HostFigures } from './host-operations.ts';
import type { DiskUse, ResourceUse } from './sandbox-runtime.ts';

/* What one engine reads of its sandboxes and of itself (DockerRuntime's part): resource and disk use, capacity. */

/** Where the sandbox's volumes are mounted (host-config.ts): what its disk use counts. */
const VOLUME_FOLDERS = ['/root', '/home', '/srv', '/opt', '/var/lib/docker'] as const;
/** Longest a disk use scan may run inside a sandbox. */
const DISK_SCAN_S = 20;

/** An engine that reports no pool: a /16 cut into /28s, one per sandbox network, as scripts/sandbox-engine.sh starts it. */
export const DEFAULT_NETWORKS = 4096;

/**
 * The networks an engine's default address pools hold (docker info's DefaultAddressPools: a /16 cut in
 * /28s holds 4096). Networks it made before its pools were cut finer keep their larger subnets, so a
 * pool with some of those holds a little less than this.
 */
export function poolNetworks(pools: Array<{ Base: string; Size: number }> | null | undefined): number | undefined {
  const counts = (pools ?? []).map((p) => {
    const prefix = Number(p.Base.split('/')[1]);
    return Number.isInteger(prefix) && p.Size >= prefix && p.Size <= 32 ? 2 ** (p.Size - prefix) : 0;
  });
  const total = counts.reduce((sum, n) => sum + n, 0);
  return total > 0 ? total : undefined;
}

/** What an engine holds and what it has room for: what `svc hosts list` shows. */
export type EngineCapacity = HostFigures;

/**
 * What a running sandbox uses now, as its cgroup counts it (inner containers included): the
 * engine's one-shot stats, which answer at once instead of waiting a second for a second sample.
 * Undefined when it is not running.
 */
export function resourceUse(docker: Docker, name: string, signal?: AbortSignal): Promise<ResourceUse | undefined> {
  return guarded(async () => {
    const container = docker.getContainer(resourceNames(name).container);
    try {
      const [info, stats] = await Promise.all([
        container.inspect({ abortSignal: signal } as object),
        container.stats({ stream: false, 'one-shot': true, abortSignal: signal } as { stream: false; 'one-shot': true }),
      ]);
      if (!info.State.Running) return undefined;
      const memory = stats.memory_stats;
      // as `docker stats` counts it: without the page cache the kernel can drop (cgroup v1 names it total_)
      const cache = memory.stats?.total_inactive_file ?? memory.stats?.inactive_file ?? 0;
      return {
        at: Date.parse(stats.read) || Date.now(),
        cpuNs: stats.cpu_stats.cpu_usage.total_usage,
        cpuLimit: info.HostConfig.NanoCpus ? info.HostConfig.NanoCpus / 1e9 : stats.cpu_stats.online_cpus ?? 1,
        memoryBytes: cache < memory.usage ? memory.usage - cache : memory.usage,
        memoryLimitBytes: memory.limit,
      };
    } catch (err) {
      if (statusCode(err) === 404 || statusCode(err) === 409) return undefined;
      throw err;
    }
  });
}

/**
 * The sandbox's persistent folders on disk (what survives a deep sleep: its volumes, inner
 * images and containers included) and the space left where they live. `du` reads every file:
 * it runs at the lowest priority and is killed after DISK_SCAN_S.
 */
export async function diskUse(exec: SandboxExec, name: string): Promise<DiskUse> {
  const script = `df -kP /var/lib/docker | tail -n 1; timeout -s KILL ${DISK_SCAN_S} nice -n 19 du -skx ${VOLUME_FOLDERS.join(' ')}`;
  const { stdout } = await exec.run(name, ['sh', '-c', script]);
  const [df = '', ...du] = stdout.toString('utf8').trim().split('\n');
  const fields = df.trim().split(/\s+/);
  const folders = du.map((line) => /^(\d+)\s/.exec(line)).filter((m) => m !== null);
  if (fields.length < 4 || !/^\d+$/.test(fields[3]!)) throw new Error(`could not read the disk use of sandbox "${name}"`);
  // a `du` killed before it finished any folder is still an answer: nothing counted yet, complete false
  return {
    usedBytes: folders.reduce((sum, m) => sum + Number(m[1]) * 1024, 0),
    freeBytes: Number(fields[3]) * 1024,
    complete: folders.length === VOLUME_FOLDERS.length,
  };
}

/**
 * The engine's machine (memory, cores) and what this instance's sandboxes hold of it: limits of the
 * running ones (a sandbox made before the limit labels counts the defaults), networks of all.
 * `signal` bounds the two engine calls.
 */
export function capacity(docker: Docker, opts: { instance: string; limits: { memoryMb: number; cpus: number } }, signal?: AbortSignal): Promise<EngineCapacity> {
  return guarded(async () => {
    // dockerode passes abortSignal on to its requests, though its types do not list it here
    const info = docker.info as unknown as (opts: { abortSignal?: AbortSignal }) => Promise<{ MemTotal: number; NCPU: number; DefaultAddressPools?: Array<{ Base: string; Size: number }> | null }>;
    const [machine, containers] = await Promise.all([
      info.call(docker, { abortSignal: signal }),
      docker.listContainers({ all: true, filters: { label: [`${LABEL_INSTANCE}=${opts.instance}`] }, abortSignal: signal } as Docker.ContainerListOptions),
    ]);
    const sandboxes = containers.filter((c) => !isHelper(c));
    const running = sandboxes.filter((c) => c.State === 'running' || c.State === 'paused'); // paused: a fork's copy, its memory held
    const label = (c: Docker.ContainerInfo, key: string, fallback: number) => Number(c.Labels[key]) || fallback;
    return {
      memoryBytes: machine.MemTotal,
      cpus: machine.NCPU,
      sandboxes: sandboxes.length,
      running: running.length,
      networks: poolNetworks(machine.DefaultAddressPools) ?? DEFAULT_NETWORKS,
      committedMemoryBytes: running.reduce((sum, c) => sum + label(c, LABEL_MEMORY_MB, opts.limits.memoryMb) * 1024 * 1024, 0),
      committedCpus: running.reduce((sum, c) => sum + label(c, LABEL_CPUS, opts.limits.cpus), 0),
    };
  });
}
