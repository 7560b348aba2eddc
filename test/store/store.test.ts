import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { openStore, type Store } from '../../store/index.ts';
import { Backend } from '../../store/kv.ts';
import type { SandboxRecord, TokenRecord, UserRecord } from '../../store/records.ts';
import { openTestStore, POSTGRES_URL, TEST_SECRET_KEY_FILE, type BackendName, type TestStore } from './helpers.ts';

const now = () => new Date().toISOString();

function user(name: string, extra: Partial<UserRecord> = {}): UserRecord {
  return { id: randomUUID(), name, password_hash: 'scrypt$x$y', admin: false, created_at: now(), ssh_keys: [], ...extra };
}
function token(userId: string, extra: Partial<TokenRecord> = {}): TokenRecord {
  return { id: randomUUID(), user_id: userId, hash: randomUUID().replace(/-/g, '').repeat(2), created_at: now(), ...extra };
}
function sandbox(name: string, ownerId: string, extra: Partial<SandboxRecord> = {}): SandboxRecord {
  return { name, owner_id: ownerId, template: 'default', idle_timeout: '30m', deep_sleep_after: '14d', created_at: now(), ...extra };
}
const nameTaken = (e: unknown) => (e as { code?: string }).code === 'SVC_NAME_TAKEN' && (e as { statusCode?: number }).statusCode === 409;

function suite(backend: BackendName): void {
  describe(`store on ${backend}`, () => {
    let t: TestStore;
    let store: Store;
    before(async () => {
      t = await openTestStore(backend);
      store = t.store;
    });
    after(async () => { await t?.cleanup(); });

    test('users: put, get, getByName, list; unknown ones are undefined', async () => {
      const alice = user('alice');
      const bob = user('bob', { admin: true });
      await store.users.put(alice);
      await store.users.put(bob);
      assert.deepEqual(await store.users.get(alice.id), alice);
      assert.deepEqual(await store.users.getByName('bob'), bob);
      assert.equal(await store.users.get(randomUUID()), undefined);
      assert.equal(await store.users.getByName('nobody'), undefined);
      const names = (await store.users.list()).map((u) => u.name);
      assert.ok(names.includes('alice') && names.includes('bob'));
    });

    test('users: a name belongs to one user; renaming frees the old name', async () => {
      const carol = user('carol');
      await store.users.put(carol);
      await assert.rejects(store.users.put(user('carol')), nameTaken);
      await store.users.put({ ...carol, admin: true }); // same user, same name: an update
      assert.equal((await store.users.getByName('carol'))?.admin, true);
      await store.users.put({ ...carol, name: 'carol2' });
      assert.equal(await store.users.getByName('carol'), undefined);
      assert.equal((await store.users.getByName('carol2'))?.id, carol.id);
      const other = user('carol');
      await store.users.put(other);
      assert.equal((await store.users.getByName('carol'))?.id, other.id);
    });

    test('users: 50 concurrent creations of one name, exactly one wins', async () => {
      const results = await Promise.allSettled(Array.from({ length: 50 }, () => store.users.put(user('dave'))));
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
      for (const r of results) if (r.status === 'rejected') assert.ok(nameTaken(r.reason), String(r.reason));
      assert.equal((await store.users.list()).filter((u) => u.name === 'dave').length, 1);
    });

    test('users: one user per single sign-on subject, however many first sign-ins race (insert-or-get)', async () => {
      const subject = 'https://idp.example#erin';
      const tries = Array.from({ length: 30 }, (_, i) => user(`erin-${i}`, { oidc_subject: subject }));
      const results = await Promise.all(tries.map((u) => store.users.insertForSubject(u)));
      assert.equal(results.filter((r) => r.created).length, 1, 'one call made the user');
      const made = results.find((r) => r.created)!.user;
      assert.ok(results.every((r) => r.user.id === made.id), 'every call got the same user');
      assert.deepEqual((await store.users.list()).filter((u) => u.oidc_subject === subject).map((u) => u.id), [made.id]);
      assert.equal((await store.users.getBySubject(subject))?.id, made.id);
      assert.equal(await store.users.getBySubject('https://idp.example#nobody'), undefined);
    });

    test('users: a single sign-on insert whose name is taken makes nothing and leaves the subject free', async () => {
      await store.users.put(user('frank'));
      const subject = 'https://idp.example#frank';
      await assert.rejects(store.users.insertForSubject(user('frank', { oidc_subject: subject })), nameTaken);
      assert.equal(await store.users.getBySubject(subject), undefined);
      const next = await store.users.insertForSubject(user('frank-2', { oidc_subject: subject }));
      assert.deepEqual([next.created, next.user.name], [true, 'frank-2']);
    });

    test('users: a user linked to a subject before the subject index existed is found, not made again', async () => {
      const subject = 'https://idp.example#gina';
      const linked = user('gina', { oidc_subject: subject });
      await store.users.put(linked); // the record alone, as the first single sign-on version wrote it
      assert.equal((await store.users.getBySubject(subject))?.id, linked.id);
      const again = await store.users.insertForSubject(user('gina-2', { oidc_subject: subject }));
      assert.deepEqual([again.created, again.user.id], [false, linked.id]);
      assert.equal(await store.users.getByName('gina-2'), undefined);
    });

    test('users: a user linked before the subject index is claimed on the first look-up, so the next one reads the index', async () => {
      const subject = 'https://idp.example#hana';
      const linked = user('hana', { oidc_subject: subject });
      await store.users.put(linked); // the record alone, as the first single sign-on version wrote it
      assert.equal((await store.users.getBySubject(subject))?.id, linked.id);
      // a record a scan would find first: only a look-up by the claim still answers hana
      await store.users.put(user('hana-older', { oidc_subject: subject, created_at: '2000-01-01T00:00:00.000Z' }));
      assert.equal((await store.users.getBySubject(subject))?.id, linked.id);
    });

    test('tokens: put, get, getByHash, listByUser only lists the user\'s own', async () => {
      const u1 = user('tok-owner-1');
      const u2 = user('tok-owner-2');
      await store.users.put(u1);
      await store.users.put(u2);
      const a = token(u1.id, { name: 'a' });
      const b = token(u1.id, { sandbox: 'svc-x' });
      const c = token(u2.id);
      for (const x of [a, b, c]) await store.tokens.put(x);
      assert.deepEqual(await store.tokens.get(a.id), a);
      assert.deepEqual(await store.tokens.getByHash(b.hash), b);
      assert.equal(await store.tokens.getByHash('0'.repeat(64)), undefined);
      assert.deepEqual((await store.tokens.listByUser(u1.id)).map((x) => x.id).sort(), [a.id, b.id].sort());
      assert.deepEqual((await store.tokens.listByUser(u2.id)).map((x) => x.id), [c.id]);
      assert.deepEqual(await store.tokens.listByUser(randomUUID()), []);
      const revoked = { ...a, revoked_at: now() };
      await store.tokens.put(revoked);
      assert.deepEqual(await store.tokens.getByHash(a.hash), revoked);
      assert.equal((await store.tokens.listByUser(u1.id)).length, 2);
    });

    test('tokens: 100 concurrent creations for one user are all listed', async () => {
      const u = user('many-tokens');
      await store.users.put(u);
      const tokens = Array.from({ length: 100 }, () => token(u.id));
      await Promise.all(tokens.map((x) => store.tokens.put(x)));
      assert.equal((await store.tokens.listByUser(u.id)).length, 100);
      for (const x of tokens.slice(0, 10)) assert.equal((await store.tokens.getByHash(x.hash))?.id, x.id);
    });

    test('tokens: a hash held by another token is refused', async () => {
      const u = user('hash-clash');
      await store.users.put(u);
      const first = token(u.id);
      await store.tokens.put(first);
      await assert.rejects(store.tokens.put(token(u.id, { hash: first.hash })), (e: { statusCode?: number }) => e.statusCode === 409);
    });

    test('sandboxes: insert, get, put, listByOwner, listAll', async () => {
      const owner = randomUUID();
      const s1 = sandbox('svc-one', owner);
      const s2 = sandbox('svc-two', owner);
      await store.sandboxes.insert(s2);
      await store.sandboxes.insert(s1);
      assert.deepEqual(await store.sandboxes.get('svc-one'), s1);
      assert.equal(await store.sandboxes.get('svc-none'), undefined);
      assert.deepEqual((await store.sandboxes.listByOwner(owner)).map((s) => s.name), ['svc-one', 'svc-two']);
      const archived = { ...s1, archived_at: now(), archive_path: 'archive/svc-one.tar' };
      await store.sandboxes.put(archived);
      assert.deepEqual(await store.sandboxes.get('svc-one'), archived);
      await assert.rejects(store.sandboxes.insert(sandbox('svc-one', owner)), nameTaken);
      const all = (await store.sandboxes.listAll()).map((s) => s.name);
      assert.ok(all.includes('svc-one') && all.includes('svc-two'));
      assert.deepEqual(await store.sandboxes.listByOwner(randomUUID()), []);
    });

    test('sandboxes: 100 concurrent inserts of one name, exactly one wins and only its owner lists it', async () => {
      const owners = Array.from({ length: 100 }, () => randomUUID());
      const results = await Promise.allSettled(owners.map((o) => store.sandboxes.insert(sandbox('svc-race', o))));
      const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
      assert.equal(won.length, 1);
      for (const r of results) if (r.status === 'rejected') assert.ok(nameTaken(r.reason), String(r.reason));
      const winner = owners[won[0]!]!;
      assert.equal((await store.sandboxes.get('svc-race'))?.owner_id, winner);
      assert.deepEqual((await store.sandboxes.listByOwner(winner)).map((s) => s.name), ['svc-race']);
      for (const o of owners.filter((x) => x !== winner).slice(0, 20)) assert.deepEqual(await store.sandboxes.listByOwner(o), []);
    });

    test('sandboxes: a changed owner moves the sandbox between owners\' lists', async () => {
      const a = randomUUID();
      const b = randomUUID();
      const s = sandbox('svc-moving', a);
      await store.sandboxes.insert(s);
      await store.sandboxes.put({ ...s, owner_id: b });
      assert.deepEqual(await store.sandboxes.listByOwner(a), []);
      assert.deepEqual((await store.sandboxes.listByOwner(b)).map((x) => x.name), ['svc-moving']);
    });

    test('sandboxes: a list without secrets that one process keeps follows every write of another (insert, put, a lost insert, an owner change)', async () => {
      const a = randomUUID();
      const b = randomUUID();
      const names = async (of: Store, owner: string) => (await of.sandboxes.listByOwner(owner, { secrets: false })).map((s) => `${s.name} ${s.idle_timeout}${s.archived_at ? ' archived' : ''}`);
      const other = await t.reopen(); // another service process on the same store
      try {
        await store.sandboxes.insert(sandbox('svc-kept-1', a));
        assert.deepEqual(await names(store, a), ['svc-kept-1 30m']);
        await other.sandboxes.insert(sandbox('svc-kept-2', a));
        assert.deepEqual(await names(store, a), ['svc-kept-1 30m', 'svc-kept-2 30m'], 'an insert by the other process');
        const two = (await other.sandboxes.get('svc-kept-2'))!;
        await other.sandboxes.put({ ...two, idle_timeout: '2h' });
        assert.deepEqual(await names(store, a), ['svc-kept-1 30m', 'svc-kept-2 2h'], 'a put by the other process');
        await other.sandboxes.put({ ...two, idle_timeout: '2h', archived_at: now() });
        assert.deepEqual(await names(store, a), ['svc-kept-1 30m', 'svc-kept-2 2h archived'], 'an archive by the other process');
        await assert.rejects(other.sandboxes.insert(sandbox('svc-kept-1', a, { idle_timeout: '5m' })), nameTaken);
        assert.deepEqual(await names(store, a), ['svc-kept-1 30m', 'svc-kept-2 2h archived'], 'a lost insert changes nothing');
        assert.deepEqual(await names(store, b), []);
        const one = (await other.sandboxes.get('svc-kept-1'))!;
        await other.sandboxes.put({ ...one, owner_id: b });
        assert.deepEqual(await names(store, a), ['svc-kept-2 2h archived'], 'the old owner\'s list loses it');
        assert.deepEqual(await names(store, b), ['svc-kept-1 30m'], 'the new owner\'s list has it');
        await store.sandboxes.put({ ...one, owner_id: b, idle_timeout: '1h' });
        assert.deepEqual(await names(other, b), ['svc-kept-1 1h'], 'and back: a write of this process seen by the other');
        const [kept] = await store.sandboxes.listByOwner(b, { secrets: false });
        assert.throws(() => { (kept as { idle_timeout: string }).idle_timeout = '9h'; }, TypeError, 'kept records are shared, so frozen');
        assert.deepEqual(await names(store, b), ['svc-kept-1 1h']);
      } finally {
        await other.close();
      }
    });

    test('sandboxes: getMany answers the records that exist, without secrets when asked', async () => {
      const owner = randomUUID();
      await store.sandboxes.insert(sandbox('svc-many-1', owner, { manager_password: 'pw' }));
      await store.sandboxes.insert(sandbox('svc-many-2', owner));
      const found = await store.sandboxes.getMany(['svc-many-2', 'svc-many-none', 'svc-many-1']);
      assert.deepEqual(found.map((s) => s.name).sort(), ['svc-many-1', 'svc-many-2']);
      assert.equal(found.find((s) => s.name === 'svc-many-1')?.manager_password, 'pw');
      assert.equal((await store.sandboxes.getMany(['svc-many-1'], { secrets: false }))[0]?.manager_password, undefined);
      assert.deepEqual(await store.sandboxes.getMany([]), []);
    });

    test('Collection.getMany: values in the order asked, undefined where none, exact keys only (no pattern, no case folding), 5,000 at once', async () => {
      const b = await Backend.open(t.url, { table: t.table });
      try {
        const c = await b.collection<{ n: number }>(`many-${randomUUID().slice(0, 8)}`);
        await c.set(['a_b'], { n: 1 });
        await c.set(['A%B', 'x'], { n: 2 });
        assert.deepEqual(await c.getMany([['A%B', 'x'], ['aXb'], ['a_b'], ['a_B'], ['A%B']]), [{ n: 2 }, undefined, { n: 1 }, undefined, undefined]);
        const many = Array.from({ length: 5000 }, (_, i) => [`k${i}`]);
        await b.write(many.filter((_, i) => i % 2 === 0).map((parts, i) => ({ collection: c, parts, value: { n: i } })));
        const found = await c.getMany(many);
        assert.equal(found.length, 5000);
        assert.deepEqual(found.slice(0, 4), [{ n: 0 }, undefined, { n: 1 }, undefined]);
        assert.equal(found.filter(Boolean).length, 2500);
      } finally {
        await b.close();
      }
    });

    test('Backend.write: writes sharing rows in opposite orders never deadlock (PostgreSQL locks rows in VALUES order)', async () => {
      const b = await Backend.open(t.url, { table: t.table });
      try {
        const c = await b.collection<number>('write-order');
        const rows = (i: number) => ['a', 'b', 'c'].map((k) => ({ collection: c, parts: [k], value: i }));
        const results = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => b.write(i % 2 ? rows(i) : rows(i).reverse())));
        assert.deepEqual(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)), []);
        const last = await c.get(['a']);
        assert.equal(await c.get(['b']), last, 'each write is whole: every row from the same one');
        assert.equal(await c.get(['c']), last);
      } finally {
        await b.close();
      }
    });

    test('keys are exact: no LIKE wildcards, no case folding, no namespace aliasing', async () => {
      await store.sandboxes.insert(sandbox('svc-under', 'own_r'));
      await store.sandboxes.insert(sandbox('svc-xunder', 'ownXr'));
      await store.sandboxes.insert(sandbox('svc-upper', 'OWN_R'));
      await store.sandboxes.insert(sandbox('svc-pct', 'own%'));
      assert.deepEqual((await store.sandboxes.listByOwner('own_r')).map((s) => s.name), ['svc-under']);
      assert.deepEqual((await store.sandboxes.listByOwner('ownXr')).map((s) => s.name), ['svc-xunder']);
      assert.deepEqual((await store.sandboxes.listByOwner('own%')).map((s) => s.name), ['svc-pct']);
      assert.deepEqual(await store.sandboxes.listByOwner('own'), []);
      // `sandboxes:` inside a key must not reach another record
      assert.equal(await store.sandboxes.get('sandboxes:svc-under'), undefined);
      await store.sandboxes.insert(sandbox('a:b', 'x:y'));
      assert.deepEqual((await store.sandboxes.listByOwner('x:y')).map((s) => s.name), ['a:b']);
      assert.deepEqual(await store.sandboxes.listByOwner('x'), []);
      const odd = user('Ünïcode name with spaces');
      await store.users.put(odd);
      assert.equal((await store.users.getByName('Ünïcode name with spaces'))?.id, odd.id);
      assert.equal(await store.users.getByName('ünïcode name with spaces'), undefined);
    });

    test('data survives close and reopen; a second Store on the same table sees the same data', async () => {
      const u = user('persist');
      await store.users.put(u);
      const other = await t.reopen();
      try {
        assert.deepEqual(await other.users.getByName('persist'), u);
        const v = user('from-other');
        await other.users.put(v);
        assert.deepEqual(await store.users.getByName('from-other'), v);
        // both Stores race on the same sandbox name: still exactly one winner
        const results = await Promise.allSettled([store, other, store, other].map((s) => s.sandboxes.insert(sandbox('svc-two-stores', randomUUID()))));
        assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
      } finally {
        await other.close();
      }
      assert.deepEqual(await store.users.getByName('persist'), u, 'closing one Store leaves the other working');
    });

    test('database errors are thrown, never read as "not found"', async () => {
      const extra = await t.reopen();
      const u = user('closed-check');
      await extra.users.put(u);
      await extra.close();
      if (backend === 'sqlite') {
        await assert.rejects(extra.users.get(u.id));
        await assert.rejects(extra.users.list());
      }
      // (postgres: the pool is shared with the other open Store, so closing one keeps it alive.)
      assert.equal((await store.users.get(u.id))?.name, 'closed-check');
    });
  });
}

suite('sqlite');
suite('postgres');

describe('openStore errors', () => {
  const keyed = { secretKeyFile: TEST_SECRET_KEY_FILE };
  test('an unreachable postgres fails clearly', async () => {
    await assert.rejects(openStore('postgres://postgres@127.0.0.1:1/nope', keyed), /cannot reach PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:1\/nope/);
  });
  test('a second postgres URL in one process is refused while the first is open', async () => {
    const first = await openStore(POSTGRES_URL, { table: 'svc_test_second_url', ...keyed }).catch((e: Error) => {
      throw new Error(`PostgreSQL is not reachable at ${POSTGRES_URL}: ${e.message}`);
    });
    try {
      await assert.rejects(openStore(`${POSTGRES_URL}?application_name=other`, keyed), /only one Postgres URL/);
    } finally {
      const { destroyStore } = await import('../../store/index.ts');
      await destroyStore(first);
    }
  });
  test('unknown schemes and memory databases are refused', async () => {
    await assert.rejects(openStore('mysql://x', keyed), /unsupported store URL/);
    await assert.rejects(openStore('sqlite://:memory:', keyed), /in-memory/);
    await assert.rejects(openStore('sqlite:///tmp/x.sqlite', { table: 'Bad-Name', ...keyed }), /invalid store table name/);
  });
});
