import { createHash } from 'node:crypto';
import type Docker from 'dockerode';

/** Labels on everything the runtime creates, so a reconcile pass or a clean-up finds it. */
export const LABEL_SANDBOX = 'svc.sandbox';
export const LABEL_INSTANCE = 'svc.instance';
/** `archiver` on the containers that read a sandbox's volumes for its archive: never a sandbox. */
export const LABEL_ROLE = 'svc.role';
export const ROLE_ARCHIVER = 'archiver';

/** `mover` on the helper that copies a sandbox's volumes into a fork's (volume-copy.ts). */
export const ROLE_MOVER = 'mover';

/**
 * Whether a container of this instance is a helper (an archiver, a fork's copier), by its label, never by a
 * name a user chose (a sandbox may be called `x-archiver-1`). Archivers made before the label are
 * known by the exact name `<their sandbox>-archiver-<digits>`, which no sandbox's own container has.
 */
export function isHelper(c: Docker.ContainerInfo): boolean {
  if (c.Labels[LABEL_ROLE] === ROLE_ARCHIVER || c.Labels[LABEL_ROLE] === ROLE_MOVER) return true;
  const sandbox = c.Labels[LABEL_SANDBOX];
  return !!sandbox && c.Names.some((n) => n.startsWith(`/${sandbox}-archiver-`) && /^\d+$/.test(n.slice(sandbox.length + '/-archiver-'.length)));
}

/** A sandbox container's own limits, as labels, so a capacity count needs no inspect of each. */
export const LABEL_MEMORY_MB = 'svc.memory-mb';
export const LABEL_CPUS = 'svc.cpus';

/** Host interfaces of sandbox networks start with this, so the egress rules can name them all. */
export const SANDBOX_BRIDGE_PREFIX = 'svcb';

/** The host bridge of a sandbox's network: at most 15 characters, as Linux allows. */
export function sandboxBridge(network: string): string {
  return SANDBOX_BRIDGE_PREFIX + createHash('sha256').update(network).digest('hex').slice(0, 11);
}
