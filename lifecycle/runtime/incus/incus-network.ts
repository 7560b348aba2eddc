import type { AddressStore } from '../../../store/index.ts';

/**
 * A sandbox's network on Incus (issue 34 §3, docs/incus.md): a `routed` NIC with an address of its own
 * from one pool the service owns (the store's address table), the same on whichever member the
 * sandbox is. With `parent` (the members' shared link), the member that runs the sandbox answers ARP
 * for its address there (proxy ARP) and routes it to the sandbox with a /32: a move or an evacuation
 * takes the announcement along with the instance, and nothing outside Incus (the service, a router)
 * has to learn where a sandbox went. The host side of the NIC is named `svcr<address in hex>`: the
 * members' firewall (scripts/incus-host.sh firewall, SVC-INCUS-* chains) knows sandboxes by that prefix.
 */
export const NIC_PREFIX = 'svcr';

/** Addresses for the runtime's NICs: held per sandbox until its instance is deleted. */
export interface SandboxAddresses {
  /** The sandbox's address: the one it holds, else the lowest free one of the pool (atomic across service processes). */
  hold(sandbox: string): Promise<string>;
  /** Gives it back (the instance is gone). Idempotent. */
  release(sandbox: string): Promise<void>;
}

export function poolAddresses(store: AddressStore, pool: string): SandboxAddresses {
  return { hold: (sandbox) => store.hold(pool, sandbox), release: (sandbox) => store.release(sandbox) };
}

/** The host-side name of a sandbox's NIC: unique as its address is, at most 15 characters. */
export function nicHostName(address: string): string {
  return NIC_PREFIX + address.split('.').map((o) => Number(o).toString(16).padStart(2, '0')).join('');
}

/** The `eth0` device of a sandbox: routed, its address inside (LXC sets it; the image has no DHCP client). */
export function routedNic(address: string, parent?: string): Record<string, string> {
  return {
    type: 'nic', nictype: 'routed', 'ipv4.address': address, host_name: nicHostName(address),
    ...(parent ? { parent } : {}),
  };
}
