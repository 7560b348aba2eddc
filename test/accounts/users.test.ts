import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createUser, publicUser, resetPassword, verifyUserPassword } from '../../accounts/index.ts';
import { hashPassword, verifyPassword } from '../../core/passwords.ts';
import type { Store } from '../../store/index.ts';
import { openTestStore, type TestStore } from '../store/helpers.ts';

const code = (c: string) => (e: unknown) => (e as { code?: string }).code === c;

describe('accounts: users and passwords', () => {
  let t: TestStore;
  let store: Store;
  before(async () => { t = await openTestStore('sqlite'); store = t.store; });
  after(async () => { await t?.cleanup(); });

  test('scrypt hashes: format, salted, verified in constant time, malformed refused', async () => {
    const h1 = await hashPassword('correct horse');
    const h2 = await hashPassword('correct horse');
    assert.match(h1, /^scrypt\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
    assert.notEqual(h1, h2, 'a fresh salt each time');
    assert.equal(await verifyPassword('correct horse', h1), true);
    assert.equal(await verifyPassword('correct horsE', h1), false);
    assert.equal(await verifyPassword('x', 'plain'), false);
    assert.equal(await verifyPassword('x', 'scrypt$$'), false);
  });

  test('createUser generates a password, stores only its hash', async () => {
    const { user, password } = await createUser(store, { name: 'alice' });
    assert.match(password, /^[A-Za-z0-9_-]{24}$/);
    const stored = await store.users.getByName('alice');
    assert.ok(stored);
    assert.equal(stored.admin, false);
    assert.deepEqual(stored.ssh_keys, []);
    assert.ok(!JSON.stringify(stored).includes(password));
    assert.equal(await verifyUserPassword(store, 'alice', password).then((u) => u?.id), user.id);
    assert.equal(await verifyUserPassword(store, 'alice', 'wrong'), undefined);
    assert.equal(await verifyUserPassword(store, 'nobody', password), undefined);
    assert.deepEqual(Object.keys(publicUser(user)).sort(), ['admin', 'created_at', 'id', 'name']);
  });

  test('admin flag, duplicate names, bad names', async () => {
    const { user } = await createUser(store, { name: 'root-admin', admin: true });
    assert.equal(user.admin, true);
    await assert.rejects(createUser(store, { name: 'alice' }), code('SVC_NAME_TAKEN'));
    for (const bad of ['', 'Alice', '-x', 'x-', 'a b', 'a:b', 'x'.repeat(41), 'é']) {
      await assert.rejects(createUser(store, { name: bad }), code('SVC_BAD_REQUEST'), `name ${JSON.stringify(bad)}`);
    }
  });

  test('resetPassword replaces the password', async () => {
    const { password: old } = await createUser(store, { name: 'resetme' });
    const { password } = await resetPassword(store, 'resetme');
    assert.notEqual(password, old);
    assert.ok(await verifyUserPassword(store, 'resetme', password));
    assert.equal(await verifyUserPassword(store, 'resetme', old), undefined);
    await assert.rejects(resetPassword(store, 'ghost'), code('SVC_NOT_FOUND'));
  });
});
