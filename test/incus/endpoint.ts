import fs from 'node:fs';
import { loadConfig } from '../../core/config.ts';
import { IncusClient, type IncusEndpoint } from '../../lifecycle/runtime/incus/incus-client.ts';
import type { IncusRuntimeOptions } from '../../lifecycle/runtime/incus/incus-runtime.ts';

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

/** The runtime's options for a test instance of its own. */
export function runtimeOptions(instance: string): IncusRuntimeOptions {
  const config = loadConfig();
  return {
    instance,
    addressPool: process.env.SVC_INCUS_ADDRESS_POOL ?? '100.73.0.0/16',
    ...(process.env.SVC_INCUS_NIC_PARENT ? { nicParent: process.env.SVC_INCUS_NIC_PARENT } : {}),
    limits: { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids },
  };
}
