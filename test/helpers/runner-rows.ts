import { Backend } from '../../store/kv.ts';

/**
 * Rows as a release with runner hosts (issue 20, removed by issue 34) wrote them into a store's table:
 * a runner host's record, where each sandbox's volumes are, an unfinished move. Written through the
 * store's own backend, as that release's store did, so that the upgrade path reads what it would find.
 */
export interface RunnerRows {
  hosts?: string[];
  /** Sandbox → host (`local`: this machine). */
  placements?: Record<string, string>;
  /** Sandbox → [from, to] of a move left `copying`. */
  moves?: Record<string, [string, string]>;
}

export async function writeRunnerRows(url: string, table: string, rows: RunnerRows): Promise<void> {
  const backend = await Backend.open(url, { table });
  try {
    const created_at = new Date().toISOString();
    const hosts = await backend.collection<object>('hosts');
    for (const name of rows.hosts ?? []) {
      await hosts.set([name], { name, address: '10.0.0.9', port: 2376, server_name: `${name}.hosts.localhost`, pool: '10.220.0.0/16', created_at });
    }
    const placed = await backend.collection<string>('host-of');
    for (const [sandbox, host] of Object.entries(rows.placements ?? {})) await placed.set([sandbox], host);
    const moves = await backend.collection<object>('moves');
    for (const [sandbox, [from, to]] of Object.entries(rows.moves ?? {})) {
      await moves.set([sandbox], { sandbox, from, to, phase: 'copying', owner: 'p1', heartbeat_at: created_at, started_at: created_at });
    }
  } finally {
    await backend.close();
  }
}
