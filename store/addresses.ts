import { errors } from '../core/errors.ts';
import type { Backend, Collection } from './kv.ts';

/**
 * Sandbox addresses handed out from one pool the service owns (issue 34 §3): the Incus runtime gives
 * each sandbox a routed NIC with an address of its own, valid on whichever cluster member the sandbox
 * is, so two members must never hand out the same one. The table, not the members, says which are
 * taken: a lost member's sandboxes keep theirs while nobody can ask it. Shared by every service
 * process on the store (SQLite or PostgreSQL alike): an address is taken by an atomic insert.
 */
export interface AddressStore {
  /** The sandbox's address in `pool` (an IPv4 CIDR): the one it holds, else the lowest free one, taken atomically. */
  hold(pool: string, sandbox: string): Promise<string>;
  /** The address the sandbox holds, if any. */
  of(sandbox: string): Promise<string | undefined>;
  /** Gives the sandbox's address back (its instance is gone). Idempotent. */
  release(sandbox: string): Promise<void>;
  /** Every address held, address → sandbox. */
  held(): Promise<Map<string, string>>;
}

/** Tries before a hold gives up: each failed try lost one address to another process's hold. */
const HOLD_TRIES = 20;

const toNumber = (address: string) => address.split('.').reduce((n, o) => n * 256 + Number(o), 0);
const toAddress = (v: number) => [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');

/** The addresses a pool hands out: its first two (the network's and one left for a gateway) and its broadcast are not. */
function poolRange(pool: string): { first: number; last: number } {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(pool);
  const bits = Number(m?.[2]);
  if (!m || m[1]!.split('.').some((o) => Number(o) > 255) || bits < 8 || bits > 29) {
    throw new errors.BadRequest(`"${pool}" is not an address pool (an IPv4 CIDR, /8 to /29)`);
  }
  const size = 2 ** (32 - bits);
  const base = toNumber(m[1]!) - (toNumber(m[1]!) % size);
  return { first: base + 2, last: base + size - 2 };
}

/** Keys: `address:<ip>` → sandbox; `address-of:<sandbox>` → ip (written after its address row, so it is the hold's commit). */
export async function addressStore(backend: Backend): Promise<AddressStore> {
  const owners: Collection<string> = await backend.collection<string>('address');
  const addressOf: Collection<string> = await backend.collection<string>('address-of');

  async function held(): Promise<Map<string, string>> {
    return new Map((await owners.scan()).map((r) => [r.rest[0]!, r.value]));
  }

  return {
    async hold(pool, sandbox) {
      const { first, last } = poolRange(pool);
      const inPool = (a: string) => toNumber(a) >= first && toNumber(a) <= last;
      for (let i = 0; i < HOLD_TRIES; i++) {
        const kept = await addressOf.get([sandbox]);
        if (kept !== undefined && inPool(kept)) return kept;
        const taken = await held();
        // a hold cut short after its address row (a crash): that row is the sandbox's
        let address = [...taken].find(([a, s]) => s === sandbox && inPool(a))?.[0];
        if (address === undefined) {
          const used = new Set([...taken.keys()].map(toNumber));
          let n = first;
          while (n <= last && used.has(n)) n++;
          if (n > last) throw new errors.Conflict(`no free address left in ${pool}: every one is held by a sandbox`);
          address = toAddress(n);
          if (!(await owners.insertIfAbsent([address], sandbox))) continue; // another process took it first
        }
        if (await addressOf.insertIfAbsent([sandbox], address)) return address;
        // another hold of the same sandbox committed first: its address stands; this one goes back unless
        // it is that same address (both holds found or took the same row: deleting it would leave none)
        const committed = await addressOf.get([sandbox]);
        if (committed !== address && (await owners.get([address])) === sandbox) await owners.delete([address]);
      }
      throw new errors.Conflict(`could not take an address in ${pool} for ${sandbox}: ${HOLD_TRIES} tries lost to other processes`);
    },
    of: (sandbox) => addressOf.get([sandbox]),
    async release(sandbox) {
      for (const [address, owner] of await held()) if (owner === sandbox) await owners.delete([address]);
      await addressOf.delete([sandbox]);
    },
    held,
  };
}
