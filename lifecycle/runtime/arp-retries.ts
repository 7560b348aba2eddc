// How soon the host asks again for a sandbox's link address (ARP) on the sandbox network's bridge.
import fs from 'node:fs/promises';

/** Retry period of an unanswered ARP request on a sandbox bridge; Linux's default is a second. */
export const ARP_RETRY_MS = 100;

/**
 * Has this machine retry an unanswered ARP request on a sandbox network's bridge every ARP_RETRY_MS.
 * Right after a sleep the host's entry for the sandbox's address can still be pending (seen before
 * some wakes that followed a sleep by seconds): with the default a woken app was reached only a second
 * after the wake began, however early it ran. Only our own bridges change, never the host's default.
 * False when the bridge is not on this machine (or its setting cannot be written): nothing is lost but
 * that second.
 */
export async function shortenArpRetries(bridge: string): Promise<boolean> {
  try {
    await fs.writeFile(`/proc/sys/net/ipv4/neigh/${bridge}/retrans_time_ms`, String(ARP_RETRY_MS));
    return true;
  } catch {
    return false;
  }
}
