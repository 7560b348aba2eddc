import { errors } from '../core/errors.ts';
import type { Caller } from './tokens.ts';
import type { SandboxRecord, Store } from '../store/index.ts';

/** What a caller wants to do with a sandbox; decides the rules of spec section 5. */
export type SandboxAction = 'use' | 'configure' | 'delete';

/**
 * The sandbox a caller may act on, or the error they get. Another user's sandbox and a sandbox
 * outside a limited token are both "not found": existence is not leaked.
 */
export async function authorizeSandbox(store: Store, principal: Caller, name: string, action: SandboxAction): Promise<SandboxRecord> {
  if (principal.sandbox && action === 'delete') throw new errors.Forbidden('a token limited to one sandbox cannot delete sandboxes');
  const record = await store.sandboxes.get(name);
  const visible =
    record &&
    (principal.sandbox ? principal.sandbox === name : record.owner_id === principal.user.id || principal.user.admin);
  if (!record || !visible) throw new errors.SandboxNotFound(name);
  if (record.archived_at) throw new errors.SandboxArchived(name);
  if (action === 'configure' && principal.sandbox) {
    throw new errors.Forbidden('a token limited to one sandbox cannot change its settings; use a full token of the owner');
  }
  return record;
}

export function forbidLimited(principal: Caller, what: string): void {
  if (principal.sandbox) throw new errors.Forbidden(`a token limited to one sandbox cannot ${what}`);
}
