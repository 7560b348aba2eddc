import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { IncusClient, type IncusEndpoint } from '../../lifecycle/runtime/incus/incus-client.ts';
import { poolAddresses } from '../../lifecycle/runtime/incus/incus-network.ts';
import type { IncusRuntimeOptions } from '../../lifecycle/runtime/incus/incus-runtime.ts';
import { openStore, type Store } from '../../store/index.ts';

/**
 * The Incus the tests of test/incus/ use: the test cluster when its lines are in the environment
 * (`eval "$(scripts/test-cluster.sh env)"`: HTTPS to its first member), else this machine's daemon.
 */
export function incusEndpoint(url?: string): IncusEndpoint {
  const first = url ?? process.env.SVC_INCUS_URLS?.split(',')[0];
  if (!first) return { socketPath: process.env.SVC_INCUS_UNIX_SOCKET ?? '/var/lib/incus/unix.socket' };
  const read = (v: string) => fs.readFileSync(process.env[v] ?? '', 'utf8');
  return { url: first, clientCert: read('SVC_INCUS_CLIENT_CERT'), clientKey: read('SVC_INCUS_CLIENT_KEY'), serverCert: read('SVC_INCUS_SERVER_CERT') };
}

export function incusClient(url?: string): IncusClient {
  return new IncusClient(incusEndpoint(url));
}

/**
 * The runtime's options for a test instance of its own, its addresses from `pool` in a store of its own
 * (SQLite in a temporary folder; `close` removes it): the pool's addresses it holds are given back
 * by the runtime's removeVolumes.
 */
export async function runtimeOptions(instance: string, pool = process.env.SVC_INCUS_ADDRESS_POOL ?? '100.73.0.0/16'): Promise<{ options: IncusRuntimeOptions; close(): Promise<void> }> {
  const config = loadConfig();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${instance}-`));
  const store: Store = await openStore(`sqlite://${path.join(dir, 'store.sqlite')}`, { secretKeyFile: path.join(dir, 'secret.key') });
  return {
    options: {
      instance,
      addresses: poolAddresses(store.addresses, pool),
      poolSize: 2 ** (32 - Number(pool.split('/')[1])) - 3,
      ...(process.env.SVC_INCUS_NIC_PARENT ? { nicParent: process.env.SVC_INCUS_NIC_PARENT } : {}),
      limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
      logger: pino({ level: 'silent' }),
    },
    async close() {
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
