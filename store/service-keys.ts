import type { SecretBox } from '../core/secret-box.ts';
import type { Backend, Collection } from './kv.ts';

/** The service's own keys, each kept by the module that owns it (edge/certs/service-ca.ts, registry/auth.ts, accounts/app-passes.ts). */
export type ServiceKeyName = 'service-ca' | 'registry-token-key' | 'app-pass-key';

export interface ServiceKeyStore {
  get(name: ServiceKeyName): Promise<string | undefined>;
  /**
   * Keeps `value` under `name` unless one is there already, and answers the one kept: of several
   * processes starting at once, all end up with the first one's key.
   */
  claim(name: ServiceKeyName, value: string): Promise<string>;
  /** Replaces the value only if it is still `previous` (compare-and-set); answers the one kept. */
  replace(name: ServiceKeyName, previous: string, value: string): Promise<string>;
}

/**
 * Keys: `service-keys:<name>` → the value sealed with the store's secret key (as engine keys are),
 * so every service process on one store presents the same CA and accepts the others' registry
 * tokens, and a copy of the database alone yields no key.
 */
export async function serviceKeyStore(backend: Backend, box: SecretBox): Promise<ServiceKeyStore> {
  const keys: Collection<string> = await backend.collection<string>('service-keys');
  const context = (name: string) => `service-keys:${name}`;

  async function get(name: ServiceKeyName): Promise<string | undefined> {
    const sealed = await keys.get([name]);
    return sealed === undefined ? undefined : box.open(sealed, context(name));
  }

  async function claim(name: ServiceKeyName, value: string): Promise<string> {
    if (await keys.insertIfAbsent([name], box.seal(value, context(name)))) return value;
    const kept = await get(name);
    if (kept === undefined) throw new Error(`the service key "${name}" vanished while it was being made; start again`);
    return kept;
  }

  async function replace(name: ServiceKeyName, previous: string, value: string): Promise<string> {
    const row = (await keys.scan()).find((r) => r.rest[0] === name);
    if (row && box.open(row.value, context(name)) === previous && (await keys.replaceIf([name], row.raw, box.seal(value, context(name))))) return value;
    return (await get(name)) ?? claim(name, value);
  }

  return { get, claim, replace };
}
