import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { resourceNames } from '../../lifecycle/names.ts';
import { downloadExport } from '../helpers/export-folder.ts';
import { svcCli } from '../helpers/svc-cli.ts';

const run = promisify(execFile);
const COOKIE = '__Host-svc_session';

interface Answer { status: number; body: any; headers: Headers }

/**
 * Admin and the audit log (issue 24) with plain HTTP clients and the operator's CLI: a scripted
 * session of a user and an admin gives one row per action with the right actor and address, and
 * no row holds a secret the session used; a disabled user is locked out at once and let back in.
 */
describe('admin and audit log', () => {
  let t: TestService;
  let origin: string;
  let root: { id: string; token: string };
  const alice = { name: '', password: '', token: '', tokenId: '', cookie: '', csrf: '' };
  const secrets: string[] = [];
  let sandbox = '';
  let keyDir = '';

  async function call(method: string, route: string, auth: { token?: string; cookie?: string; csrf?: string } = {}, body?: unknown): Promise<Answer> {
    const headers: Record<string, string> = {};
    if (auth.token) headers.authorization = `Bearer ${auth.token}`;
    if (auth.cookie) headers.cookie = `${COOKIE}=${auth.cookie}`;
    if (auth.csrf) headers['x-csrf-token'] = auth.csrf;
    if (method !== 'GET') headers.origin = origin;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(t.url + route, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let parsed: unknown = text;
    try { parsed = JSON.parse(text); } catch { /* a zip */ }
    return { status: res.status, body: parsed, headers: res.headers };
  }
  const ok = (res: Answer, status = 200) => assert.equal(res.status, status, answerOf(res));
  const asRoot = (method: string, route: string, body?: unknown) => call(method, route, { token: root.token }, body);
  const asAlice = (method: string, route: string, body?: unknown) => call(method, route, { token: alice.token }, body);
  /** What the docker CLI says of the sandbox engine: its name, and a container's memory in use (MiB). */
  const engineName = async () => (await run('docker', [...SANDBOX_CLI, 'info', '--format', '{{.Name}}'])).stdout.trim();
  const memoryByCli = async (name: string) => {
    const shown = (await run('docker', [...SANDBOX_CLI, 'stats', '--no-stream', '--format', '{{.MemUsage}}', resourceNames(name).container])).stdout;
    const [, value, unit] = /^([\d.]+)([KMG]i?B)/.exec(shown.trim())!;
    return Number(value) * ({ KiB: 1 / 1024, MiB: 1, GiB: 1024 } as Record<string, number>)[unit!]!;
  };
  const audit = async (query: string) => {
    const res = await asRoot('GET', `/api/admin/audit?${query}`);
    ok(res);
    return res.body as { rows: Array<Record<string, string>>; next: string | null };
  };

  before(async () => {
    t = await startTestService();
    origin = `https://localhost:${t.config.httpsPort}`;
    root = await t.user('root', { admin: true });
    secrets.push(root.token);
    keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-audit-key-'));
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'audit-test', '-f', path.join(keyDir, 'id')]);
    const privateKey = fs.readFileSync(path.join(keyDir, 'id'), 'utf8');
    secrets.push(privateKey.split('\n').slice(1, -2).join('')); // the key's body, without its armour lines
  });
  after(async () => {
    fs.rmSync(keyDir, { recursive: true, force: true });
    await t?.close();
  });

  it('a scripted session: every action is refused or done as the API says', async () => {
    // an admin makes the user; the user signs in (once wrong), makes a token, a key, a sandbox …
    const made = await asRoot('POST', '/api/admin/users', { name: `alice-${t.config.redisPrefix}` });
    ok(made, 201);
    alice.name = made.body.user.name;
    alice.password = made.body.password;
    secrets.push(alice.password);
    ok(await call('POST', '/api/session', {}, { name: alice.name, password: 'not-her-password' }), 401);
    const signIn = await call('POST', '/api/session', {}, { name: alice.name, password: alice.password });
    ok(signIn);
    alice.cookie = /^__Host-svc_session=([^;]+);/.exec(signIn.headers.get('set-cookie') ?? '')![1]!;
    alice.csrf = signIn.body.csrf;
    secrets.push(alice.cookie, alice.csrf);
    const token = await call('POST', '/api/me/tokens', { cookie: alice.cookie, csrf: alice.csrf }, { name: 'laptop' });
    ok(token, 201);
    alice.token = token.body.token;
    alice.tokenId = token.body.record.id;
    secrets.push(alice.token);
    const spare = await asAlice('POST', '/api/me/tokens', { name: 'spare' });
    ok(spare, 201);
    secrets.push(spare.body.token);
    const publicKey = fs.readFileSync(path.join(keyDir, 'id.pub'), 'utf8').trim();
    const key = await asAlice('POST', '/api/me/ssh-keys', { key: publicKey });
    ok(key, 201);
    secrets.push(publicKey.split(' ')[1]!); // not a secret, but rows carry fingerprints, never keys
    const created = await asAlice('POST', '/api/sandboxes', { name: `audit-${t.config.redisPrefix}`, idle_timeout: '1h' });
    ok(created, 201);
    sandbox = created.body.name;
    secrets.push(created.body.client_key.split('\n').slice(1, -2).join(''));
    ok(await asAlice('PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '2h' }));
    const { token: exported } = await downloadExport(t, sandbox, alice.token, keyDir);
    assert.match(exported, /^svc_[A-Za-z0-9_-]{43}$/, 'the export folder carries a token');
    secrets.push(exported);
    ok(await asAlice('DELETE', `/api/me/ssh-keys/${key.body.id}`));
    ok(await asAlice('DELETE', `/api/me/tokens/${spare.body.record.id}`));

    // … an admin lowers her quota, and her next create is refused
    ok(await asRoot('PATCH', `/api/admin/users/${alice.name}`, { quotas: { max_sandboxes: 1 } }));
    const over = await asAlice('POST', '/api/sandboxes', { name: `second-${t.config.redisPrefix}` });
    assert.equal(over.status, 403, answerOf(over));
    assert.equal(over.body.error.code, 'SVC_QUOTA_EXCEEDED');
    // non-admins and limited tokens have no admin routes
    assert.equal((await asAlice('GET', '/api/admin/audit')).status, 403);
    assert.equal((await call('GET', '/api/admin/users', { token: await t.limitedToken(root.id, sandbox).catch(() => '') })).status, 401, 'an admin token limited to a sandbox of another user cannot even be made');
    assert.equal((await asRoot('GET', '/api/admin/users')).status, 200);

    // every sandbox with the host that runs it and the memory it uses now, as the engine counts it
    const [listed, cliMemory, engine] = await Promise.all([asRoot('GET', '/api/admin/sandboxes'), memoryByCli(sandbox), engineName()]);
    ok(listed);
    const row = listed.body.find((s: { name: string }) => s.name === sandbox);
    assert.deepEqual([row.status, row.host, row.memory_mb], ['running', engine, 2048]);
    assert.ok(row.memory_now_mb > 1 && row.memory_now_mb < row.memory_mb, `memory now: ${row.memory_now_mb} MB`);
    const ratio = row.memory_now_mb / cliMemory;
    assert.ok(ratio > 0.5 && ratio < 2, `the service says ${row.memory_now_mb} MB, docker stats ${cliMemory} MiB`);
  });

  it('disabling a user refuses their tokens and sessions at once and puts their sandboxes to sleep; enabling lets them back', async () => {
    assert.equal((await t.service.lifecycle.status(sandbox)).status, 'running');
    const cannot = await asRoot('POST', `/api/admin/users/root-${t.config.redisPrefix}/disable`);
    assert.equal(cannot.status, 400, 'an admin cannot lock themselves out');

    // a long request under way with her token: the log stream, open while she is disabled
    const stream = await fetch(`${t.url}/api/sandboxes/${sandbox}/logs/stream`, { headers: { authorization: `Bearer ${alice.token}` } });
    assert.equal(stream.status, 200);
    const streamed = stream.text();

    const disabled = await asRoot('POST', `/api/admin/users/${alice.name}/disable`);
    ok(disabled);
    assert.match(await streamed, /event: end\ndata: .*went to sleep/, 'the open stream ends with the sandbox');
    assert.ok(disabled.body.disabled_at);
    const byToken = await asAlice('GET', '/api/me');
    assert.equal(byToken.status, 401);
    assert.match(byToken.body.error.message, /disabled/);
    assert.equal((await call('GET', '/api/me', { cookie: alice.cookie })).status, 401, 'the web session ends');
    assert.equal((await call('POST', '/api/session', {}, { name: alice.name, password: alice.password })).status, 403, 'no new session');
    assert.equal((await t.service.lifecycle.status(sandbox)).status, 'exited', 'her sandbox sleeps');
    const wake = await asRoot('POST', `/api/sandboxes/${sandbox}/start`);
    assert.equal(wake.status, 403, answerOf(wake));
    assert.equal(wake.body.error.code, 'SVC_ACCOUNT_DISABLED');

    ok(await asRoot('POST', `/api/admin/users/${alice.name}/enable`));
    const back = await asAlice('GET', '/api/me');
    ok(back);
    assert.equal(back.body.name, alice.name);
    assert.equal((await call('GET', '/api/me', { cookie: alice.cookie })).status, 401, 'ended sessions stay ended: she signs in again');
    const reset = await asRoot('POST', `/api/admin/users/${alice.name}/password`);
    ok(reset);
    secrets.push(reset.body.password);
    const cli = await svcCli(t.config, 'user', 'set', alice.name, '--max-running', '2');
    assert.equal(cli.code, 0, cli.stderr);
    const listed = await svcCli(t.config, 'user', 'list', '--json');
    const entry = JSON.parse(listed.stdout).find((u: { name: string }) => u.name === alice.name);
    assert.deepEqual([entry.disabled_at, entry.quotas.max_running, entry.quotas.max_sandboxes], [undefined, 2, 1], 'the CLI lists state and quotas');

    const users = await asRoot('GET', '/api/admin/users');
    const row = users.body.find((u: { name: string }) => u.name === alice.name);
    assert.deepEqual({ disabled: row.disabled_at, max_sandboxes: row.quotas.max_sandboxes, max_running: row.quotas.max_running, own: row.own_quotas.sort(), usage: row.usage },
      { disabled: undefined, max_sandboxes: 1, max_running: 2, own: ['max_running', 'max_sandboxes'], usage: { sandboxes: 1, running: 0 } });
    assert.ok(row.last_sign_in_at, 'last sign-in shown');
    const all = await asRoot('GET', '/api/admin/sandboxes');
    ok(all);
    assert.deepEqual(all.body.map((s: { name: string; owner: string; status: string; host: string; memory_now_mb: number | null }) => [s.name, s.owner, s.status, s.host, s.memory_now_mb]),
      [[sandbox, alice.name, 'exited', await engineName(), null]], 'asleep: on its host, using no memory');
  });

  it('one audit row per action, with the right actor, token and address', async () => {
    const { rows, next } = await audit('limit=500');
    assert.equal(next, null);
    const seen = rows.slice().reverse().map((r) => [r.action, r.outcome, r.actor_name ?? '-', r.token_id ? (r.token_id === alice.tokenId ? 'alice-token' : r.token_id === rows.find((x) => x.action === 'admin.user_create')!.token_id ? 'root-token' : 'other-token') : '-', r.source]);
    const local = '127.0.0.1';
    const rootName = `root-${t.config.redisPrefix}`;
    assert.deepEqual(seen, [
      ['admin.user_create', 'ok', rootName, 'root-token', local],
      ['session.sign_in', 'failed', '-', '-', local],
      ['session.sign_in', 'ok', alice.name, '-', local],
      ['token.create', 'ok', alice.name, '-', local],
      ['token.create', 'ok', alice.name, 'alice-token', local],
      ['ssh_key.add', 'ok', alice.name, 'alice-token', local],
      ['sandbox.create', 'ok', alice.name, 'alice-token', local],
      ['sandbox.patch', 'ok', alice.name, 'alice-token', local],
      ['sandbox.export', 'ok', alice.name, 'alice-token', local],
      ['ssh_key.remove', 'ok', alice.name, 'alice-token', local],
      ['token.revoke', 'ok', alice.name, 'alice-token', local],
      ['admin.user_update', 'ok', rootName, 'root-token', local],
      ['quota.refused', 'refused', alice.name, 'alice-token', local],
      ['admin.user_disable', 'ok', rootName, 'root-token', local],
      ['session.sign_in', 'refused', '-', '-', local],
      ['admin.user_enable', 'ok', rootName, 'root-token', local],
      ['admin.user_password_reset', 'ok', rootName, 'root-token', local],
      ['admin.user_update', 'ok', '-', '-', `cli:${os.userInfo().username}`],
    ]);
    assert.ok(rows.every((r) => r.target === undefined || !r.target.startsWith('svc_')));
    const byTarget = Object.fromEntries(rows.filter((r) => r.sandbox).map((r) => [r.action, r.sandbox]));
    assert.deepEqual(byTarget, { 'sandbox.create': sandbox, 'sandbox.patch': sandbox, 'sandbox.export': sandbox, 'quota.refused': `svc-second-${t.config.redisPrefix}` });
    assert.match(rows.find((r) => r.action === 'quota.refused')!.detail!, /quota max_sandboxes \(1 sandboxes\) reached/);
    assert.equal(rows.find((r) => r.action === 'ssh_key.add')!.target, rows.find((r) => r.action === 'ssh_key.remove')!.target);
    assert.match(rows.find((r) => r.action === 'ssh_key.add')!.target!, /^SHA256:/);
  });

  it('filters by user, sandbox, action and time; pages; the CLI shows the same rows', async () => {
    const { rows } = await audit('limit=500');
    const mine = await audit(`user=${alice.name}`);
    assert.deepEqual(mine.rows.map((r) => r.id), rows.filter((r) => r.actor_name === alice.name).map((r) => r.id));
    assert.deepEqual((await audit(`sandbox=${sandbox}`)).rows.map((r) => r.action), ['sandbox.export', 'sandbox.patch', 'sandbox.create']);
    assert.deepEqual((await audit('action=sandbox.')).rows.map((r) => r.action), ['sandbox.export', 'sandbox.patch', 'sandbox.create']);
    assert.deepEqual((await audit('action=token.revoke')).rows.length, 1);
    const middle = rows[Math.floor(rows.length / 2)]!.at;
    const since = await audit(`since=${encodeURIComponent(middle)}`);
    assert.ok(since.rows.length > 0 && since.rows.every((r) => r.at >= middle));
    const until = await audit(`until=${encodeURIComponent(middle)}`);
    assert.equal(since.rows.length + until.rows.length, rows.length);
    assert.equal((await asRoot('GET', '/api/admin/audit?since=yesterday')).status, 400);

    const paged: string[] = [];
    let before = '';
    for (let pages = 0; pages < 20; pages++) {
      const page = await audit(`limit=4${before ? `&before=${before}` : ''}`);
      paged.push(...page.rows.map((r) => r.id));
      if (!page.next) break;
      before = page.next;
    }
    assert.deepEqual(paged, rows.map((r) => r.id), 'pages of 4 give every row once, in order');

    const cli = await svcCli(t.config, 'audit', '--user', alice.name, '--json');
    assert.equal(cli.code, 0, cli.stderr);
    assert.deepEqual(JSON.parse(cli.stdout), mine.rows);
    const text = await svcCli(t.config, 'audit', '--action', 'admin.');
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /admin\.user_disable\s+ok\s+root-/);
  });

  it("reading a manager sandbox's record, which carries the tool's password, is an audit row: one per caller and sandbox a minute", async () => {
    const made = await asRoot('POST', '/api/sandboxes', { name: `mgr-${t.config.redisPrefix}`, template: 'manager', idle_timeout: '1h' });
    ok(made, 201);
    const manager = made.body.name as string;
    const password = made.body.extras.manager_password as string;
    assert.ok(typeof password === 'string' && password.length >= 20, 'the create answer carries the password'); // never printed
    secrets.push(password);
    const began = new Date().toISOString();
    const read = await asRoot('GET', `/api/sandboxes/${manager}`);
    ok(read);
    assert.ok(read.body.extras.manager_password === password, 'the record carries the password');
    ok(await asRoot('GET', `/api/sandboxes/${sandbox}`)); // a record without one: no row
    assert.equal((await audit('action=sandbox.manager_password_read')).rows.length, 1, 'the read is a row');
    // the UI asks every 2 s while the sandbox wakes: a second read within the minute writes no row
    ok(await asRoot('GET', `/api/sandboxes/${manager}`));
    const awake = await asRoot('POST', `/api/sandboxes/${manager}/keep-awake`);
    ok(awake);
    assert.ok(awake.body.extras.manager_password === password, 'so does the keep-awake answer');

    const rows = (await audit('action=sandbox.manager_password_read')).rows;
    const rootToken = (await audit('action=admin.user_create')).rows[0]!.token_id;
    assert.equal(rows.length, 1, 'one row for the three answers of the minute that carried the password');
    for (const r of rows) {
      const { id, at, ...rest } = r;
      assert.ok(id && at >= began, 'a new row of this test');
      assert.deepEqual(rest, {
        action: 'sandbox.manager_password_read', outcome: 'ok', source: '127.0.0.1',
        actor_id: root.id, actor_name: `root-${t.config.redisPrefix}`, token_id: rootToken, sandbox: manager,
      });
    }
    assert.ok(!JSON.stringify(rows).includes(password), 'no row holds the password');
  });

  it('no row holds a token, password, session, key or engine key the session used', async () => {
    const cli = await svcCli(t.config, 'audit', '--json', '--limit', '500');
    const dumps = [JSON.stringify((await audit('limit=500')).rows), cli.stdout];
    assert.ok(secrets.length >= 10);
    for (const dump of dumps) {
      for (const [i, secret] of secrets.entries()) assert.ok(secret.length > 8 && !dump.includes(secret), `secret #${i} is in the audit rows`); // never print it
      assert.ok(!/svc_[A-Za-z0-9_-]{43}|PRIVATE KEY|scrypt\$/.test(dump), 'no token value, key or password hash');
    }
  });
});
