import { randomBytes } from 'node:crypto';
import type { ContainerSpec } from '../sandbox-runtime.ts';
import type { IncusClient } from './incus-client.ts';

/* An Incus instance as the runtime reads it, the keys it marks it with, and its copy (a fork). */

export interface InstanceState {
  status: string;
  pid?: number;
  started_at?: string;
  memory?: { usage: number };
  cpu?: { usage: number };
  network?: Record<string, { addresses: Array<{ family: string; address: string }> }>;
}

export interface Instance {
  name: string;
  status: string;
  location: string;
  /** null for an instance of a member that does not answer */
  config: Record<string, string>;
  devices: Record<string, Record<string, string>>;
  last_used_at?: string;
  state?: InstanceState;
}

export const LIST = '/1.0/instances?recursion=1';
/** This service's sandboxes (its Redis prefix): lists show no other. */
export const KEY_INSTANCE = 'user.svc.instance';
/** Deep sleep: a stopped instance whose root volume is all the sandbox keeps. */
export const KEY_DEEP = 'user.svc.deep';
export const KEY_FINISHED = 'user.svc.finished_at';
/** When a fork froze the instance for its snapshot: a freeze younger than FORK_FREEZE_MS is a fork's at work. */
export const KEY_FROZEN = 'user.svc.frozen_at';
/** Longer than a fork's freeze lasts (a snapshot: an instant on btrfs, seconds on `dir`): older, its process died. */
export const FORK_FREEZE_MS = 120_000;

/** A freeze that a fork's process left behind (it died between freeze and unfreeze), not one at work now. */
export function leftFrozen(i: Instance): boolean {
  return i.status === 'Frozen' && !(Date.now() - Date.parse(i.config[KEY_FROZEN] ?? '') < FORK_FREEZE_MS);
}

/** The configuration of a sandbox's instance: this service's mark, its limits, its environment. */
export function instanceConfig(
  spec: ContainerSpec, environment: Record<string, string>, defaults: { instance: string; limits: { memoryMb: number; cpus: number; pids: number } },
): Record<string, string> {
  return {
    [KEY_INSTANCE]: defaults.instance,
    'limits.memory': `${spec.limits?.memoryMb ?? defaults.limits.memoryMb}MiB`,
    'limits.cpu.allowance': `${Math.round((spec.limits?.cpus ?? defaults.limits.cpus) * 100)}%`,
    'limits.processes': String(defaults.limits.pids),
    ...Object.fromEntries(Object.entries(environment).map(([k, v]) => [`environment.${k}`, v])),
  };
}

/** Running as the runtime counts it: frozen (a fork's copy under way) is running, as paused is on Docker. */
export function runs(i: Instance): boolean {
  return i.status === 'Running' || i.status === 'Frozen';
}

/**
 * `to` made as an Incus copy of `source` on its member, with `config` and `devices` over the source's.
 * A running source is frozen for a snapshot (an instant on btrfs; the `dir` driver copies it), marked
 * with when (KEY_FROZEN), and unfrozen at once, the copy made from the snapshot, the snapshot removed; a stopped one is copied as it is.
 */
export async function copyInstance(
  incus: IncusClient, source: Instance, to: string, config: Record<string, string>, devices: Record<string, Record<string, string>>,
): Promise<void> {
  const from = source.name;
  const state = (action: string) => incus.act('PUT', `/1.0/instances/${encodeURIComponent(from)}/state`, { action });
  let snapshot: string | undefined;
  if (runs(source)) {
    snapshot = `svc-fork-${randomBytes(4).toString('hex')}`;
    // marked first: a settle (any process's reconcile pass) leaves a freeze this young alone (leftFrozen)
    await incus.act('PATCH', `/1.0/instances/${encodeURIComponent(from)}`, { config: { [KEY_FROZEN]: new Date().toISOString() } });
    if (source.status === 'Running') await state('freeze');
    try {
      await incus.act('POST', `/1.0/instances/${encodeURIComponent(from)}/snapshots`, { name: snapshot, stateful: false });
    } finally {
      if (source.status === 'Running') await state('unfreeze');
    }
  }
  try {
    const target = source.location && source.location !== 'none' ? `?target=${encodeURIComponent(source.location)}` : '';
    await incus.act('POST', `/1.0/instances${target}`, {
      name: to, type: 'container', profiles: ['default', 'svc-sandbox'],
      source: { type: 'copy', source: snapshot ? `${from}/${snapshot}` : from, instance_only: true },
      config, devices,
    }, 600);
  } finally {
    if (snapshot) await incus.act('DELETE', `/1.0/instances/${encodeURIComponent(from)}/snapshots/${encodeURIComponent(snapshot)}`);
  }
}
