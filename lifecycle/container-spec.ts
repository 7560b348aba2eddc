import type { Config } from '../core/config.ts';
import type { SandboxRecord, UserRecord } from '../store/index.ts';
import type { ContainerSpec } from './runtime/sandbox-runtime.ts';

/**
 * What the runtime is asked to create for a sandbox: its environment (name, nameservers, the owner's
 * SSH keys for a first start, its engine's TLS files) and the limits chosen at create (a record from
 * before quotas has none: the runtime's defaults).
 */
export function containerSpec(record: SandboxRecord, owner: UserRecord | undefined, config: Pick<Config, 'sandboxDns'>): ContainerSpec {
  const env: Record<string, string> = {
    SVC_SANDBOX: record.name,
    SVC_DNS: config.sandboxDns.join(','),
    SVC_SSH_AUTHORIZED_KEYS: (owner?.ssh_keys ?? []).map((k) => k.key).join('\n'),
  };
  if (record.certs) {
    env.SVC_TLS_CA = record.certs.ca_cert;
    env.SVC_TLS_CERT = record.certs.server_cert;
    env.SVC_TLS_KEY = record.certs.server_key;
  }
  return { name: record.name, env, limits: { memoryMb: record.memory_mb, cpus: record.cpus } };
}
