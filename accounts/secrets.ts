import { errors } from '../core/errors.ts';
import { splitRepo, type SecretMeta, type SecretScope, type Store } from '../store/index.ts';

/** A secret's name is the environment variable it becomes (and its file's name under /run/svc/secrets/). */
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Bytes of one value (an environment variable and a file; a PEM key fits many times over). */
export const MAX_SECRET_BYTES = 32 * 1024;
export const MAX_SECRETS_PER_ACCOUNT = 100;
/** Sandboxes one secret can be scoped to by name (beyond that: all of them). */
export const MAX_SCOPE_SANDBOXES = 100;
/**
 * Names a sandbox's own workings read: replacing them would break every session (PATH, HOME, a
 * loader variable) or the service's own settings (SVC_*), so they are refused.
 */
const RESERVED = /^(SVC_.*|PATH|HOME|USER|LOGNAME|SHELL|PWD|OLDPWD|TERM|HOSTNAME|IFS|PS[1-4]|LD_[A-Z_]*|SSH_[A-Z_]*|DOCKER_[A-Z_]*)$/;

export function validateSecretName(name: string): void {
  if (!SECRET_NAME.test(name)) throw new errors.BadRequest(`invalid secret name "${name.slice(0, 140)}": use an environment variable name (letters, digits and _, not starting with a digit, at most 128)`);
  if (RESERVED.test(name)) throw new errors.BadRequest(`the secret name "${name}" is reserved: the sandbox's shells and the service use it; choose another`);
}

function validateValue(value: string): void {
  if (value.length === 0) throw new errors.BadRequest('a secret value cannot be empty');
  if (Buffer.byteLength(value) > MAX_SECRET_BYTES) throw new errors.BadRequest(`a secret value holds at most ${MAX_SECRET_BYTES} bytes`);
  if (value.includes('\0')) throw new errors.BadRequest('a secret value cannot hold a NUL character (an environment variable cannot)');
}

/** The scope as given: `all`, or names of the owner's own sandboxes (others' are not found, as everywhere). */
async function checkedScope(store: Store, ownerId: string, scope: SecretScope): Promise<SecretScope> {
  if (scope === 'all') return scope;
  const names = [...new Set(scope)].sort();
  if (names.length === 0) throw new errors.BadRequest('a scope lists at least one sandbox, or is "all"');
  if (names.length > MAX_SCOPE_SANDBOXES) throw new errors.BadRequest(`a scope lists at most ${MAX_SCOPE_SANDBOXES} sandboxes; use "all"`);
  for (const name of names) {
    const record = await store.sandboxes.get(name);
    if (!record || record.owner_id !== ownerId || record.archived_at) throw new errors.SandboxNotFound(name.slice(0, 80));
  }
  return names;
}

/** Sets a secret of `ownerId` (new or replaced): name, value and scope checked, the value sealed. */
export async function setSecret(store: Store, ownerId: string, input: { name: string; value: string; scope: SecretScope }): Promise<{ meta: SecretMeta; created: boolean }> {
  validateSecretName(input.name);
  validateValue(input.value);
  const scope = await checkedScope(store, ownerId, input.scope);
  return store.exclusive([`user-secrets:${ownerId}`], async () => {
    const existing = await store.secrets.list(ownerId);
    if (existing.length >= MAX_SECRETS_PER_ACCOUNT && !existing.some((s) => s.name === input.name)) {
      throw new errors.Conflict(`an account holds at most ${MAX_SECRETS_PER_ACCOUNT} secrets; remove one first`);
    }
    return store.secrets.put(ownerId, input.name, input.value, scope);
  });
}

export async function removeSecret(store: Store, ownerId: string, name: string): Promise<SecretMeta> {
  validateSecretName(name);
  const removed = await store.exclusive([`user-secrets:${ownerId}`], () => store.secrets.remove(ownerId, name));
  if (!removed) throw new errors.NotFound(`no secret named "${name}"`);
  return removed;
}

/**
 * The registry scan's port for the owner's secrets (scanner/owner-secrets.ts): the keyed hashes of
 * the secrets of the owner of a repository's sandbox (`<sandbox>/<image>`), and a lookup that hashes
 * a candidate the same way. No value is opened.
 */
export function ownerSecretHashes(store: Store) {
  return {
    async forRepo(repo: string) {
      const record = await store.sandboxes.get(splitRepo(repo)[0]);
      if (!record) return undefined;
      const hashes = (await store.secrets.hashes(record.owner_id)).filter((h) => h.head !== undefined);
      if (!hashes.length) return undefined;
      const names = new Map(hashes.map((h) => [h.hash, h.name]));
      const heads = new Map<number, number[]>();
      for (const h of hashes) heads.set(h.head!, [...new Set([...(heads.get(h.head!) ?? []), h.bytes])]);
      return {
        headBytes: 8,
        head: store.secrets.head,
        lengthsByHead: heads,
        find: (candidate: Buffer) => names.get(store.secrets.hash(candidate)),
      };
    },
  };
}
