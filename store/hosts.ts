import { errors } from '../core/errors.ts';
import { Batched } from '../core/keyed-lock.ts';
import type { SecretBox } from '../core/secret-box.ts';
import type { Collection, Backend } from './kv.ts';
import type { HostRecord, MoveRecord } from './records.ts';

/** The name of the machine the service runs on, a runner host with nothing to configure (docs/scale-out.md). */
export const LOCAL_HOST = 'local';

/**
 * Runner hosts (issue 20) and where each sandbox lives. A placement is written once, atomically, when a
 * sandbox is first made on a host, and kept while the sandbox has volumes there; a sandbox without one
 * lives on LOCAL_HOST (every sandbox made before hosts existed).
 */
export interface HostStore {
  get(name: string): Promise<HostRecord | undefined>;
  /** Every registered host, by name (LOCAL_HOST only once drained or given a record otherwise). */
  list(): Promise<HostRecord[]>;
  /** Creates or replaces the record. */
  put(host: HostRecord): Promise<void>;
  /** Removes the record; refused (409) unless it is drained, and while any sandbox is placed on it. */
  remove(name: string): Promise<void>;
  /** The host a sandbox is placed on; undefined when it has none (LOCAL_HOST). */
  placementOf(sandbox: string): Promise<string | undefined>;
  /** Places the sandbox on `host` unless it has a placement already; answers the placement kept. */
  place(sandbox: string, host: string): Promise<string>;
  /** Forgets the sandbox's placement (its volumes are gone). */
  unplace(sandbox: string): Promise<void>;
  /** Every placement, sandbox → host. */
  placements(): Promise<Map<string, string>>;
  /** Moves the sandbox's placement to `host` (a move's commit: lifecycle/move.ts). */
  replace(sandbox: string, host: string): Promise<void>;
  /** Every unfinished move, with its row as stored (for `updateMove`). */
  moves(): Promise<Array<{ move: MoveRecord; raw: string }>>;
  /** Records a new move; false when the sandbox has one already. */
  beginMove(move: MoveRecord): Promise<boolean>;
  /** Replaces a move's record only if it is still `raw` (its owner's heartbeat, a take-over); true if written. */
  updateMove(raw: string, move: MoveRecord): Promise<boolean>;
  endMove(sandbox: string): Promise<void>;
  /** True while the sandbox is being copied, or committed but not yet placed on its target: it must not start on any host (HostSetRuntime refuses). */
  copying(sandbox: string): Promise<boolean>;
}

/** The host record's secret: the service's client key for that host's engine. */
const KEY_CONTEXT = (name: string) => `hosts:${name}:client_key`;

/** Keys: `hosts:<name>` → record (client key sealed); `host-of:<sandbox>` → host name. */
export async function hostStore(backend: Backend, box: SecretBox): Promise<HostStore> {
  const records: Collection<HostRecord> = await backend.collection<HostRecord>('hosts');
  const placed: Collection<string> = await backend.collection<string>('host-of');
  const moving: Collection<MoveRecord> = await backend.collection<MoveRecord>('moves');

  const open = (h: HostRecord): HostRecord => (h.client_key ? { ...h, client_key: box.open(h.client_key, KEY_CONTEXT(h.name)) } : h);
  const seal = (h: HostRecord): HostRecord => (h.client_key ? { ...h, client_key: box.seal(h.client_key, KEY_CONTEXT(h.name)) } : h);

  // a list of 500 deep-sleeping sandboxes reads each one's placement afresh (HostSetRuntime): one query
  const placementReads = new Batched<string>(async (sandboxes) => {
    const found = await placed.getMany(sandboxes.map((s) => [s]));
    return new Map(sandboxes.flatMap((s, i) => (found[i] === undefined ? [] : [[s, found[i]!] as const])));
  });

  async function placements(): Promise<Map<string, string>> {
    return new Map((await placed.scan()).map((r) => [r.rest[0]!, r.value]));
  }

  return {
    async get(name) {
      const h = await records.get([name]);
      return h && open(h);
    },
    async list() {
      return (await records.scan()).map((r) => open(r.value)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },
    async put(host) {
      if (!/^[a-z0-9][a-z0-9-]{0,30}$/.test(host.name)) throw new errors.BadRequest(`a host's name is lowercase letters, digits and -, at most 31: "${host.name}"`);
      await records.set([host.name], seal(host));
    },
    async remove(name) {
      const unfinished = (await moving.scan()).filter((r) => r.value.from === name || r.value.to === name || r.value.leftover === name);
      if (unfinished.length > 0) throw new errors.Conflict(`host "${name}" has ${unfinished.length} unfinished move(s) (${unfinished.map((r) => r.value.sandbox).slice(0, 5).join(', ')}): the reconcile pass finishes them once both hosts answer`);
      const record = await records.get([name]);
      if (record && !record.drained_at) throw new errors.Conflict(`host "${name}" is not drained: svc hosts drain ${name} first (no new sandbox goes there then)`);
      const holding = async () => {
        const on = [...(await placements())].filter(([, host]) => host === name).map(([sandbox]) => sandbox);
        return on.length === 0 ? undefined : new errors.Conflict(`host "${name}" holds ${on.length} sandbox(es) (${on.slice(0, 5).join(', ')}${on.length > 5 ? ', …' : ''}): delete or move them first`);
      };
      const before = await holding();
      if (before) throw before;
      await records.delete([name]);
      // a placement chosen before the drain may land meanwhile: either it is seen here (the record comes
      // back) or its creation finds the host gone (HostSetRuntime.create gives the placement up)
      const after = await holding();
      if (after && record) {
        await records.set([name], record);
        throw after;
      }
    },
    placementOf: (sandbox) => placementReads.get(sandbox),
    async place(sandbox, host) {
      if (await placed.insertIfAbsent([sandbox], host)) return host;
      return (await placed.get([sandbox])) ?? host;
    },
    async unplace(sandbox) {
      await placed.delete([sandbox]);
    },
    placements,
    async replace(sandbox, host) {
      await placed.set([sandbox], host);
    },
    async moves() {
      return (await moving.scan()).map((r) => ({ move: r.value, raw: r.raw }));
    },
    async beginMove(move) {
      return moving.insertIfAbsent([move.sandbox], move);
    },
    async updateMove(raw, move) {
      return moving.replaceIf([move.sandbox], raw, move);
    },
    async endMove(sandbox) {
      await moving.delete([sandbox]);
    },
    async copying(sandbox) {
      const move = await moving.get([sandbox]);
      if (move?.phase === 'copying') return true;
      // committed (cleaning, the source the leftover) but the placement not yet switched: it may start on neither
      return move?.phase === 'cleaning' && move.leftover === move.from && ((await placed.get([sandbox])) ?? LOCAL_HOST) === move.from;
    },
  };
}
