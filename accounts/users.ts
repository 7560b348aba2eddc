import { randomUUID } from 'node:crypto';
import { errors } from '../core/errors.ts';
import type { Store, UserRecord } from '../store/index.ts';
import { generatePassword, hashPassword, verifyPassword } from '../core/passwords.ts';

/** 1-40 characters: lowercase letters, digits, `.`, `_`, `-`; starts and ends with a letter or digit. */
const USER_NAME = /^[a-z0-9](?:[a-z0-9._-]{0,38}[a-z0-9])?$/;

export function validateUserName(name: string): string {
  if (typeof name !== 'string' || !USER_NAME.test(name)) {
    throw new errors.BadRequest(`invalid user name "${name}": use 1-40 lowercase letters, digits, ".", "_" or "-", starting and ending with a letter or digit`);
  }
  return name;
}

export interface NewUser {
  user: UserRecord;
  /** The generated password, shown once; only its hash is stored. */
  password: string;
}

/** Creates a user with a generated password. Throws errors.BadRequest or errors.NameTaken. */
export async function createUser(store: Store, input: { name: string; admin?: boolean }): Promise<NewUser> {
  const name = validateUserName(input.name);
  if (await store.users.getByName(name)) throw new errors.NameTaken(name);
  const password = generatePassword();
  const user: UserRecord = {
    id: randomUUID(),
    name,
    password_hash: await hashPassword(password),
    admin: input.admin === true,
    created_at: new Date().toISOString(),
    ssh_keys: [],
  };
  await store.users.put(user); // the store re-checks the name atomically
  return { user, password };
}

/** Replaces the user's password with a new generated one, returned once. */
export async function resetPassword(store: Store, name: string): Promise<NewUser> {
  const user = await requireUserByName(store, name);
  const password = generatePassword();
  const password_hash = await hashPassword(password);
  const updated = await updateUser(store, user.id, (u) => ({ ...u, password_hash }));
  return { user: updated, password };
}

/** Passwords a user chooses: long enough to resist guessing at our sign-in's pace, bounded for scrypt. */
const MIN_PASSWORD = 12;
const MAX_PASSWORD = 256;

/**
 * Changes the user's password after checking the current one: undefined if it is wrong (nothing
 * changed), errors.BadRequest for a new one that is too short or too long. Ending the user's
 * other sessions is the caller's part.
 */
export async function changePassword(store: Store, userId: string, current: string, next: string): Promise<UserRecord | undefined> {
  if (typeof next !== 'string' || next.length < MIN_PASSWORD || next.length > MAX_PASSWORD) {
    throw new errors.BadRequest(`the new password needs ${MIN_PASSWORD} to ${MAX_PASSWORD} characters`);
  }
  const user = await store.users.get(userId);
  if (!user || !(await verifyPassword(current, user.password_hash))) return undefined;
  const password_hash = await hashPassword(next);
  return updateUser(store, userId, (u) => ({ ...u, password_hash }));
}

/**
 * Read-modify-write of one user record, serialised per user across every process on the store (every
 * change to a user record in accounts/ goes through here, so concurrent changes of different fields are kept).
 */
export async function updateUser(store: Store, userId: string, change: (u: UserRecord) => UserRecord | Promise<UserRecord>): Promise<UserRecord> {
  return store.exclusive([`accounts|user|${userId}`], async () => {
    const current = await store.users.get(userId);
    if (!current) throw new errors.NotFound(`no user with id "${userId}"`);
    const next = await change(current);
    await store.users.put(next);
    return next;
  });
}

/** A throwaway hash, so an unknown name costs the same scrypt work as a known one. */
let dummyHash: Promise<string> | undefined;

/** The user if name and password match, else undefined (same work either way). */
export async function verifyUserPassword(store: Store, name: string, password: string): Promise<UserRecord | undefined> {
  const user = typeof name === 'string' && USER_NAME.test(name) ? await store.users.getByName(name) : undefined;
  if (!user) {
    dummyHash ??= hashPassword(generatePassword());
    await verifyPassword(password, await dummyHash);
    return undefined;
  }
  return (await verifyPassword(password, user.password_hash)) ? user : undefined;
}

export async function requireUserByName(store: Store, name: string): Promise<UserRecord> {
  const user = await store.users.getByName(name);
  if (!user) throw new errors.NotFound(`no user named "${name}"`);
  return user;
}

/** A user as shown to clients and on the command line: never the password hash. */
export function publicUser(user: UserRecord): { id: string; name: string; admin: boolean; created_at: string } {
  return { id: user.id, name: user.name, admin: user.admin, created_at: user.created_at };
}

/** Notes a successful sign-in (shown to admins as "last sign-in"). */
export async function recordSignIn(store: Store, userId: string): Promise<void> {
  await updateUser(store, userId, (u) => ({ ...u, last_sign_in_at: new Date().toISOString() }));
}

/** Disables or enables an account; disabling twice keeps the first time. Ending sessions and sleeping sandboxes is the caller's part. */
export async function setDisabled(store: Store, name: string, disabled: boolean): Promise<UserRecord> {
  const user = await requireUserByName(store, name);
  return updateUser(store, user.id, (u) => {
    const { disabled_at: was, ...rest } = u;
    return disabled ? { ...rest, disabled_at: was ?? new Date().toISOString() } : rest;
  });
}
