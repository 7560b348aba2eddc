import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { errors } from '../core/errors.ts';
import type { Store, TokenRecord, UserRecord } from '../store/index.ts';

export const TOKEN_PREFIX = 'svc_';
/** What a disabled account's tokens and sessions are told (401). */
export const DISABLED = 'this account is disabled; ask an administrator to enable it';
/** `svc_` + 43 base64url characters: 32 random bytes (256 bits). */
const TOKEN_FORMAT = /^svc_[A-Za-z0-9_-]{43}$/;

/** Who makes a request: a user, through an access token or a web UI session. */
export interface Caller {
  user: UserRecord;
  /** Set for a token limited to one sandbox. */
  sandbox?: string;
  token?: TokenRecord;
  /** The web session's cookie value (the web UI); never logged. */
  session?: string;
}

/** A caller authenticated by an access token. */
export interface Principal extends Caller {
  token: TokenRecord;
}

/** "Last used" is written at most this often per token and process: not a store write per request. */
const TOUCH_EVERY_MS = 60_000;
const touched = new Map<string, number>();

function touch(store: Store, token: TokenRecord): void {
  const now = Date.now();
  if (now - (touched.get(token.id) ?? 0) < TOUCH_EVERY_MS) return;
  touched.set(token.id, now);
  if (touched.size > 10_000) touched.clear(); // a bound; forgetting only means one more write
  store.tokens.touch(token.id, new Date(now).toISOString()).catch(() => touched.delete(token.id));
}

export interface NewToken {
  token: TokenRecord;
  /** The token value, shown once; only its sha256 is stored. */
  value: string;
}

export function generateTokenValue(): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url');
}

/** sha256 of the token value, hex: the only form in which a token is stored. */
export function hashToken(value: string): string {
  return createHash('sha256').update(value, 'utf8').digest('hex');
}

export function looksLikeToken(value: string): boolean {
  return TOKEN_FORMAT.test(value);
}

const TOKEN_IN_TEXT = /svc_[A-Za-z0-9_-]{43}/g;

/** Text with every token value blanked (URLs on their way into logs). */
export function redactTokens(text: string): string {
  return text.replace(TOKEN_IN_TEXT, 'svc_[redacted]');
}

/** Whether a token value appears in the text, percent-encoded or not. */
export function containsToken(text: string): boolean {
  let decoded = text;
  try { decoded = decodeURIComponent(text); } catch { /* malformed escapes: check the raw text */ }
  return new RegExp(TOKEN_IN_TEXT.source).test(text) || new RegExp(TOKEN_IN_TEXT.source).test(decoded);
}

/**
 * Creates a personal access token for the user. With `sandbox`, the token is limited to that
 * sandbox, which must exist, belong to the user and not be archived (else errors.SandboxNotFound).
 */
export async function createToken(
  store: Store,
  input: { userId: string; name?: string; sandbox?: string },
): Promise<NewToken> {
  const user = await store.users.get(input.userId);
  if (!user) throw new errors.NotFound(`no user with id "${input.userId}"`);
  if (input.sandbox !== undefined) {
    const sandbox = await store.sandboxes.get(input.sandbox);
    if (!sandbox || sandbox.owner_id !== user.id || sandbox.archived_at) throw new errors.SandboxNotFound(input.sandbox);
  }
  const label = input.name?.trim();
  if (label !== undefined && label.length > 100) throw new errors.BadRequest('a token name has at most 100 characters');
  const value = generateTokenValue();
  const token: TokenRecord = {
    id: randomUUID(),
    user_id: user.id,
    hash: hashToken(value),
    ...(input.sandbox !== undefined ? { sandbox: input.sandbox } : {}),
    ...(label ? { name: label } : {}),
    created_at: new Date().toISOString(),
  };
  await store.tokens.put(token);
  return { token, value };
}

/** The user's tokens (records only: hashes, never values), newest last. */
export async function listTokens(store: Store, userId: string): Promise<TokenRecord[]> {
  return store.tokens.listByUser(userId);
}

/**
 * Revokes a token. With `userId`, only that user's token (another user's answers errors.NotFound,
 * as an unknown one does). Revoking twice keeps the first revocation time.
 */
export async function revokeToken(store: Store, tokenId: string, opts: { userId?: string } = {}): Promise<TokenRecord> {
  const token = await store.tokens.get(tokenId);
  if (!token || (opts.userId !== undefined && token.user_id !== opts.userId)) {
    throw new errors.NotFound(`no token with id "${tokenId}"`);
  }
  if (token.revoked_at) return token;
  const revoked: TokenRecord = { ...token, revoked_at: new Date().toISOString() };
  await store.tokens.put(revoked);
  return revoked;
}

/** A token as shown to clients: never the hash. */
export function publicToken(token: TokenRecord, lastUsedAt?: string): Omit<TokenRecord, 'hash'> & { last_used_at?: string } {
  const { hash: _hash, ...rest } = token;
  return lastUsedAt ? { ...rest, last_used_at: lastUsedAt } : rest;
}

/**
 * The caller behind an `Authorization: Bearer svc_…` header. Throws errors.Unauthenticated with
 * "missing bearer token" (no header, another scheme, empty) or "unknown or revoked token".
 */
export async function authenticate(store: Store, authorizationHeader: string | undefined): Promise<Principal> {
  const match = typeof authorizationHeader === 'string' ? /^\s*Bearer\s+(\S+)\s*$/i.exec(authorizationHeader) : null;
  if (!match) throw new errors.Unauthenticated('missing bearer token');
  const value = match[1]!;
  if (!looksLikeToken(value)) throw new errors.Unauthenticated('unknown or revoked token');
  const hash = hashToken(value);
  const token = await store.tokens.getByHash(hash);
  if (!token || !sameHash(token.hash, hash) || token.revoked_at) {
    throw new errors.Unauthenticated('unknown or revoked token');
  }
  const user = await store.users.get(token.user_id);
  if (!user) throw new errors.Unauthenticated('unknown or revoked token');
  if (user.disabled_at) throw new errors.Unauthenticated(DISABLED);
  touch(store, token);
  return token.sandbox !== undefined ? { user, token, sandbox: token.sandbox } : { user, token };
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  return x.length === y.length && timingSafeEqual(x, y);
}
