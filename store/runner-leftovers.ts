import type { Backend } from './kv.ts';

/**
 * What a deployment on runner hosts (releases before issue 34 §5 removed them, docs/scale-out.md
 * "Upgrading from runner hosts") left in the store, read so that an upgrade never loses a sandbox
 * without a word. The rows are as those releases wrote them: `hosts:<name>` (a runner host's record,
 * its client key sealed; `local` for this machine's drain state), `host-of:<sandbox>` (the host a
 * sandbox's volumes are on; none or `local`: this machine), `moves:<sandbox>` (a move not finished).
 */
export interface RunnerLeftovers {
  /** Runner hosts registered (this machine's own record left out). */
  hosts: string[];
  /** Sandbox → the runner host its volumes are on: nothing of it is on this machine's engine. */
  stranded: Map<string, string>;
  /** Rows of any kind: host records, placements (this machine's too), unfinished moves. */
  rows: number;
}

/** The name those releases gave the machine the service runs on. */
const THIS_MACHINE = 'local';

export interface RunnerLeftoverStore {
  read(): Promise<RunnerLeftovers>;
  /**
   * Removes every row runner hosts left, once they name nothing of a sandbox elsewhere (no stranded
   * sandbox): what stays on this machine needs none of them. Refused otherwise: the rows are what the
   * previous release needs to evacuate the stranded sandboxes (docs/scale-out.md).
   */
  clear(): Promise<void>;
}

export async function runnerLeftoverStore(backend: Backend): Promise<RunnerLeftoverStore> {
  // the values are read as they were written; only names are used here
  const records = await backend.collection<{ name: string }>('hosts');
  const placed = await backend.collection<string>('host-of');
  const moving = await backend.collection<unknown>('moves');

  const scan = () => Promise.all([records.scan(), placed.scan(), moving.scan()]);
  const strandedOf = (placements: Awaited<ReturnType<typeof placed.scan>>) =>
    new Map(placements.filter((r) => r.value !== THIS_MACHINE).map((r) => [r.rest[0]!, r.value]));

  return {
    async read() {
      const [hosts, placements, moves] = await scan();
      return {
        hosts: hosts.map((r) => r.rest[0]!).filter((name) => name !== THIS_MACHINE).sort(),
        stranded: strandedOf(placements),
        rows: hosts.length + placements.length + moves.length,
      };
    },
    async clear() {
      const [hosts, placements, moves] = await scan();
      const stranded = strandedOf(placements);
      if (stranded.size > 0) throw new Error(`${stranded.size} sandbox(es) are on runner hosts: their rows stay`);
      for (const r of hosts) await records.delete(r.rest);
      for (const r of placements) await placed.delete(r.rest);
      for (const r of moves) await moving.delete(r.rest);
    },
  };
}
