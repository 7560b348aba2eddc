import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { authenticate, verifyUserPassword } from '../../accounts/index.ts';
import { loadConfig } from '../../core/config.ts';
import { openStore, type Store } from '../../store/index.ts';
import { svcCli, type CliResult } from '../helpers/svc-cli.ts';
import { tempDir, TEST_SECRET_KEY_FILE } from '../store/helpers.ts';

const TOKEN = /^svc_[A-Za-z0-9_-]{43}$/;

interface Result extends CliResult { last: string }

/** `npx svc …` on the store in `dataDir` (its default table), with the last line of stdout apart. */
async function svc(dataDir: string, ...args: string[]): Promise<Result> {
  const r = await svcCli({ dataDir, secretKeyFile: TEST_SECRET_KEY_FILE, storeTable: loadConfig({}).storeTable }, ...args);
  const lines = r.stdout.split('\n').filter((l) => l !== '');
  return { ...r, last: lines[lines.length - 1] ?? '' };
}

/** The secret appears once, as the last line of stdout, and nowhere else. */
function onlyOnLastLine(r: Result, secret: string): void {
  assert.ok(r.last === secret, 'the secret is the last line of stdout'); // equal would print it
  assert.equal(r.stdout.split(secret).length, 2, 'once on stdout');
  assert.ok(!r.stderr.includes(secret), 'never on stderr');
}

describe('svc command line (npx svc)', () => {
  const tmp = tempDir('svc-cli-');
  const dataDir = path.join(tmp.dir, 'data');
  const storeUrl = `sqlite://${path.join(dataDir, 'svc.sqlite')}`;
  let store: Store; // the "service", holding the same store open the whole time

  before(async () => {
    const r = await svc(dataDir, 'user', 'create', 'alice');
    assert.equal(r.code, 0, r.stderr);
    store = await openStore(storeUrl, { secretKeyFile: TEST_SECRET_KEY_FILE });
  });
  after(async () => { await store?.close(); tmp.remove(); });

  test('user create prints a working password as the last line; --admin makes an admin', async () => {
    const r = await svc(dataDir, 'user', 'create', 'bob', '--admin');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.last, /^[A-Za-z0-9_-]{24}$/);
    onlyOnLastLine(r, r.last);
    const bob = await verifyUserPassword(store, 'bob', r.last);
    assert.ok(bob, 'the printed password signs in');
    assert.equal(bob.admin, true);
    assert.equal((await store.users.getByName('alice'))?.admin, false);
  });

  test('user create refuses a taken or invalid name with exit 1', async () => {
    const [taken, invalid] = await Promise.all([svc(dataDir, 'user', 'create', 'alice'), svc(dataDir, 'user', 'create', 'Not OK')]);
    assert.equal(taken.code, 1);
    assert.match(taken.stderr, /"alice" is already taken/);
    assert.equal(taken.stdout, '');
    assert.equal(invalid.code, 1);
    assert.match(invalid.stderr, /invalid user name/);
  });

  test('user list shows users, never secrets', async () => {
    const [r, json] = await Promise.all([svc(dataDir, 'user', 'list'), svc(dataDir, 'user', 'list', '--json')]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^NAME\s+ID\s+ADMIN/m);
    assert.match(r.stdout, /^alice\s/m);
    assert.ok(!r.stdout.includes('scrypt$'));
    const users = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    assert.ok(users.some((u) => u.name === 'alice'));
    assert.ok(users.every((u) => !('password_hash' in u)));
  });

  test('token create prints a working token as the last line; list shows it without its value; revoke ends it', async () => {
    const created = await svc(dataDir, 'token', 'create', 'alice', '--name', 'ci runner');
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.last, TOKEN);
    onlyOnLastLine(created, created.last);
    const p = await authenticate(store, `Bearer ${created.last}`);
    assert.equal(p.user.name, 'alice');
    assert.equal(p.token.name, 'ci runner');
    assert.equal(p.sandbox, undefined);

    const [list, listJson] = await Promise.all([svc(dataDir, 'token', 'list', 'alice'), svc(dataDir, 'token', 'list', 'alice', '--json')]);
    assert.equal(list.code, 0, list.stderr);
    assert.ok(list.stdout.includes(p.token.id));
    assert.match(list.stdout, /ci runner/);
    assert.ok(!list.stdout.includes(created.last) && !list.stdout.includes(p.token.hash));
    const json = JSON.parse(listJson.stdout) as Array<Record<string, unknown>>;
    assert.ok(json.some((t) => t.id === p.token.id) && json.every((t) => !('hash' in t)));

    const revoked = await svc(dataDir, 'token', 'revoke', p.token.id);
    assert.equal(revoked.code, 0, revoked.stderr);
    await assert.rejects(authenticate(store, `Bearer ${created.last}`), /unknown or revoked token/);
    const [afterRevoke, again] = await Promise.all([svc(dataDir, 'token', 'list', 'alice'), svc(dataDir, 'token', 'revoke', 'no-such-token')]);
    assert.match(afterRevoke.stdout, /revoked/);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /no token with id "no-such-token"/);
  });

  test('token create --sandbox: limited to the user\'s own sandbox, else a clear error', async () => {
    const alice = (await store.users.getByName('alice'))!;
    const bob = (await store.users.getByName('bob'))!;
    const base = { template: 'default' as const, idle_timeout: '30m', deep_sleep_after: '14d', created_at: new Date().toISOString() };
    await store.sandboxes.insert({ name: 'svc-foo', owner_id: alice.id, ...base });
    await store.sandboxes.insert({ name: 'svc-bobs', owner_id: bob.id, ...base });

    const [full, short, notHers, missing, noUser] = await Promise.all([
      svc(dataDir, 'token', 'create', 'alice', '--sandbox', 'svc-foo'),
      svc(dataDir, 'token', 'create', 'alice', '--sandbox', 'foo'),
      svc(dataDir, 'token', 'create', 'alice', '--sandbox', 'svc-bobs'),
      svc(dataDir, 'token', 'create', 'alice', '--sandbox', 'svc-nope'),
      svc(dataDir, 'token', 'create', 'nobody'),
    ]);
    for (const r of [full, short]) {
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.last, TOKEN);
      onlyOnLastLine(r, r.last);
      const p = await authenticate(store, `Bearer ${r.last}`);
      assert.equal(p.sandbox, 'svc-foo');
      assert.equal(p.user.id, alice.id);
    }
    assert.equal(notHers.code, 1);
    assert.match(notHers.stderr, /user "alice" has no sandbox named "svc-bobs"/);
    assert.ok(!TOKEN.test(notHers.last));
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no sandbox named "svc-nope"/);
    assert.equal(noUser.code, 1);
    assert.match(noUser.stderr, /no user named "nobody"/);
  });

  test('usage errors exit 2 with the usage text', async () => {
    const cases = [[], ['user', 'create'], ['user', 'create', 'a', 'b'], ['user', 'create', 'x', '--sandbox', 'y'],
      ['token', 'create', 'alice', '--bogus'], ['frobnicate']];
    const results = await Promise.all([...cases.map((args) => svc(dataDir, ...args)), svc(dataDir, '--help')]);
    cases.forEach((args, i) => {
      const r = results[i]!;
      assert.equal(r.code, 2, `svc ${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /usage:/);
      assert.equal(r.stdout, '');
    });
    const help = results[cases.length]!;
    assert.equal(help.code, 0);
    assert.match(help.stdout, /svc token create NAME/);
  });

  test('the CLI and a running service write the same store without losing anything', async () => {
    const names = Array.from({ length: 4 }, (_, i) => `cli-${i}`);
    const aliceId = (await store.users.getByName('alice'))!.id;
    const before = (await store.tokens.listByUser(aliceId)).length;
    const serviceWrites = (async () => {
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) {
        const id = randomUUID();
        await store.users.put({ id, name: `svc-side-${i}`, password_hash: 'scrypt$x$y', admin: false, created_at: new Date().toISOString(), ssh_keys: [] });
        await store.tokens.put({ id: randomUUID(), user_id: aliceId, hash: randomUUID().replace(/-/g, '').repeat(2), created_at: new Date().toISOString() });
        ids.push(id);
        await new Promise((r) => setTimeout(r, 25));
      }
      return ids;
    })();
    const cli = await Promise.all([
      ...names.map((n) => svc(dataDir, 'user', 'create', n)),
      svc(dataDir, 'token', 'create', 'alice'),
      svc(dataDir, 'token', 'create', 'alice'),
    ]);
    await serviceWrites;
    for (const r of cli) assert.equal(r.code, 0, r.stderr);
    const users = (await store.users.list()).map((u) => u.name);
    for (const n of [...names, ...Array.from({ length: 40 }, (_, i) => `svc-side-${i}`)]) assert.ok(users.includes(n), n);
    for (const n of names) assert.ok(await store.users.getByName(n), n);
    assert.equal((await store.tokens.listByUser(aliceId)).length, before + 2 + 40, 'every token of both writers is listed');
    for (const r of cli.slice(-2)) await authenticate(store, `Bearer ${r.last}`);
  });
});
