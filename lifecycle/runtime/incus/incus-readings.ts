import type { DiskUse, ResourceUse, SandboxExecutor } from '../sandbox-runtime.ts';
import type { IncusClient } from './incus-client.ts';
import type { Instance } from './incus-instance.ts';

/* What the Incus runtime reads of its sandboxes and machines: resource and disk use, the members' size. */

/** CPU and memory of a running instance, from its listed state. */
export function resourceUse(i: Instance | undefined): ResourceUse | undefined {
  if (!i || i.status !== 'Running' || !i.state) return undefined;
  return {
    at: Date.now(),
    cpuNs: i.state.cpu?.usage ?? 0,
    cpuLimit: Number.parseInt(i.config['limits.cpu.allowance'] ?? '100', 10) / 100,
    memoryBytes: i.state.memory?.usage ?? 0,
    memoryLimitBytes: Number.parseInt(i.config['limits.memory'] ?? '0', 10) * 1024 * 1024,
  };
}

/** Disk the sandbox's root takes (all it keeps) and the space left on its pool, read inside it. */
export async function diskUse(exec: SandboxExecutor, name: string): Promise<DiskUse> {
  const r = await exec.run(name, ['sh', '-c', 'du -sxk / 2>/dev/null | cut -f1; df -Pk / | awk "NR==2 {print \\$4}"']);
  const [used, free] = r.stdout.toString().trim().split('\n').map((x) => Number(x));
  if (r.exitCode !== 0 || !Number.isFinite(used) || !Number.isFinite(free)) throw new Error(`could not read the disk use of ${name}`);
  return { usedBytes: used! * 1024, freeBytes: free! * 1024, complete: true };
}

interface Resources {
  cpu: { total: number };
  memory: { total: number };
}

/**
 * Memory and threads of the daemon's machine, or of every online member of a cluster added up (a
 * member that does not answer is left out); undefined when none answers.
 */
export async function machines(incus: IncusClient): Promise<{ memoryMb: number; cpus: number; hosts: number } | undefined> {
  const server = await incus.get<{ environment?: { server_clustered?: boolean } }>('/1.0');
  const targets = server.environment?.server_clustered
    ? (await incus.get<Array<{ server_name: string; status: string }>>('/1.0/cluster/members?recursion=1')).filter((m) => m.status === 'Online').map((m) => `?target=${encodeURIComponent(m.server_name)}`)
    : [''];
  const read = await Promise.all(targets.map((t) => incus.get<Resources>(`/1.0/resources${t}`, { timeoutMs: 5_000 }).catch(() => undefined)));
  const answered = read.filter((r): r is Resources => r !== undefined);
  if (answered.length === 0) return undefined;
  return {
    memoryMb: Math.floor(answered.reduce((n, r) => n + r.memory.total, 0) / 1024 / 1024),
    cpus: answered.reduce((n, r) => n + r.cpu.total, 0),
    hosts: answered.length,
  };
}
