import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { authenticate, createToken, createUser, listTokens, publicToken, revokeToken } from '../../accounts/index.ts';
import type { Store } from '../../store/index.ts';
import type { UserRecord } from '../../store/records.ts';
import { openTestStore, type TestStore } from '../store/helpers.ts';

const code = (c: string, message?: string) => (e: unknown) => {
  const err = e as { code?: string; message?: string; statusCode?: number };
  return err.code === c && (message === undefined || err.message === message);
};

describe('accounts: personal access tokens', () => {
  let t: TestStore;
  let store: Store;
  let alice: UserRecord;
  let bob: UserRecord;
  before(async () => {
    t = await openTestStore('sqlite');
    store = t.store;
    alice = (await createUser(store, { name: 'alice' })).user;
    bob = (await createUser(store, { name: 'bob' })).user;
    const sb = { template: 'default' as const, idle_timeout: '30m', deep_sleep_after: '14d', created_at: new Date().toISOString() };
    await store.sandboxes.insert({ name: 'svc-alice1', owner_id: alice.id, ...sb });
    await store.sandboxes.insert({ name: 'svc-bob1', owner_id: bob.id, ...sb });
    await store.sandboxes.insert({ name: 'svc-gone', owner_id: alice.id, archived_at: new Date().toISOString(), ...sb });
  });
  after(async () => { await t?.cleanup(); });

  test('a token is svc_ + 43 chars, shown once, stored only as its sha256', async () => {
    const { token, value } = await createToken(store, { userId: alice.id, name: 'laptop' });
    assert.match(value, /^svc_[A-Za-z0-9_-]{43}$/);
    assert.equal(token.hash, createHash('sha256').update(value).digest('hex'));
    assert.equal(token.name, 'laptop');
    assert.equal(token.sandbox, undefined);
    const stored = await store.tokens.get(token.id);
    assert.deepEqual(stored, token);
    assert.ok(!JSON.stringify(await listTokens(store, alice.id)).includes(value));
    assert.ok(!('hash' in publicToken(token)));
    // nowhere in the database files either (the SQLite file and its write-ahead log)
    const file = new URL(t.url).pathname;
    const bytes = Buffer.concat([file, `${file}-wal`].filter(existsSync).map((f) => readFileSync(f)));
    assert.ok(bytes.includes(token.hash), 'the hash is in the database');
    assert.ok(!bytes.includes(value), 'the value is not');
    assert.ok(!bytes.includes(value.slice(4)), 'not even without its prefix');
  });

  test('authenticate: the token acts as its user', async () => {
    const { token, value } = await createToken(store, { userId: alice.id });
    const p = await authenticate(store, `Bearer ${value}`);
    assert.equal(p.user.id, alice.id);
    assert.equal(p.token.id, token.id);
    assert.equal(p.sandbox, undefined);
    assert.equal((await authenticate(store, `bearer   ${value} `)).user.id, alice.id, 'scheme is case-insensitive');
  });

  test('authenticate refuses missing, malformed, unknown and revoked tokens with 401', async () => {
    const missing = 'missing bearer token';
    const unknown = 'unknown or revoked token';
    for (const header of [undefined, '', 'Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'svc_abc']) {
      await assert.rejects(authenticate(store, header), code('SVC_UNAUTHENTICATED', missing), String(header));
    }
    const { value, token } = await createToken(store, { userId: bob.id });
    for (const header of ['Bearer nope', `Bearer ${value}x`, `Bearer ${value.slice(0, -1)}${value.endsWith('A') ? 'B' : 'A'}`, `Bearer svc_${'A'.repeat(43)}`, `Bearer ${value} extra`]) {
      await assert.rejects(authenticate(store, header), (e: { statusCode?: number }) => e.statusCode === 401, header);
    }
    await assert.rejects(authenticate(store, `Bearer svc_${'A'.repeat(43)}`), code('SVC_UNAUTHENTICATED', unknown));
    await authenticate(store, `Bearer ${value}`);
    const revoked = await revokeToken(store, token.id);
    assert.ok(revoked.revoked_at);
    await assert.rejects(authenticate(store, `Bearer ${value}`), code('SVC_UNAUTHENTICATED', unknown));
    const again = await revokeToken(store, token.id);
    assert.equal(again.revoked_at, revoked.revoked_at, 'revoking twice keeps the first time');
    assert.ok((await listTokens(store, bob.id)).some((x) => x.id === token.id && x.revoked_at));
  });

  test('a limited token carries its sandbox; the sandbox must be the user\'s own and live', async () => {
    const { token, value } = await createToken(store, { userId: alice.id, sandbox: 'svc-alice1' });
    assert.equal(token.sandbox, 'svc-alice1');
    const p = await authenticate(store, `Bearer ${value}`);
    assert.equal(p.sandbox, 'svc-alice1');
    assert.equal(p.user.id, alice.id);
    for (const sandbox of ['svc-bob1', 'svc-none', 'svc-gone']) {
      await assert.rejects(createToken(store, { userId: alice.id, sandbox }), code('SVC_SANDBOX_NOT_FOUND'), sandbox);
    }
  });

  test('revoke with a user scope cannot reach another user\'s token', async () => {
    const { token } = await createToken(store, { userId: alice.id });
    await assert.rejects(revokeToken(store, token.id, { userId: bob.id }), code('SVC_NOT_FOUND'));
    await assert.rejects(revokeToken(store, 'no-such-id'), code('SVC_NOT_FOUND'));
    await revokeToken(store, token.id, { userId: alice.id });
  });

  test('tokens of an unknown user cannot be created', async () => {
    await assert.rejects(createToken(store, { userId: 'ghost' }), code('SVC_NOT_FOUND'));
  });
});
