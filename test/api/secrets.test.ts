// Users' secrets (issue 35 §3) with real clients: curl for the API, the real sandbox engine, ssh through the
// edge's TLS port, docker compose through the engine address (a compose `secrets:` file), and the docker CLI
// inspecting the sandbox container.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { curl } from '../helpers/curl.ts';
import { downloadExport } from '../helpers/export-folder.ts';
import { sshThroughEdge } from '../helpers/ssh-through-edge.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');
const VALUE = 'velvet lantern orchard 4417 quietly';
const ROTATED = 'copper meadow rivulet 9023 gently';
const PEM = '-----BEGIN TEST KEY-----\nline one\nline two\n-----END TEST KEY-----\n';

describe('secrets', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let name: string;
  let other: string;

  const put = async (token: string, secret: string, body: unknown) => curl(`${t.url}/api/me/secrets/${secret}`, { token, method: 'PUT', json: body });
  const exec = async (command: string, sandbox = name) => {
    const res = await t.api('POST', `/api/sandboxes/${sandbox}/exec`, alice.token, { command });
    assert.equal(res.status, 200, answerOf(res));
    return res.body as { stdout: string; stderr: string; exit_code: number };
  };

  before(async () => {
    t = await startTestService();
    sb = await openEdgeSandbox(t, 'sec');
    ({ name, user: alice } = sb);
    bob = await t.user('bob');
    const second = await t.api('POST', '/api/sandboxes', alice.token, { name: `sec2-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(second.status, 201, answerOf(second));
    other = second.body.name;
  });
  after(async () => {
    sb?.close();
    await t?.close();
  });

  it('takes a value once and never gives it back; names are environment variable names; bad input is refused with the reason', async () => {
    const created = await put(alice.token, 'DB_PASSWORD', { value: VALUE });
    assert.equal(created.status, 201, created.body);
    const meta = JSON.parse(created.body);
    assert.deepEqual(Object.keys(meta).sort(), ['created_at', 'name', 'scope', 'updated_at']);
    assert.equal(meta.scope, 'all');
    const list = await curl(`${t.url}/api/me/secrets`, { token: alice.token });
    assert.equal(list.status, 200);
    assert.ok(!list.body.includes(VALUE));
    assert.deepEqual(JSON.parse(list.body).map((s: { name: string }) => s.name), ['DB_PASSWORD']);
    assert.deepEqual(JSON.parse((await curl(`${t.url}/api/me/secrets`, { token: bob.token })).body), []);

    const refused = async (token: string, secret: string, body: unknown, status: number, message: RegExp) => {
      const res = await put(token, secret, body);
      assert.equal(res.status, status, res.body);
      assert.match(JSON.parse(res.body).error.message, message);
    };
    await refused(alice.token, '9LIVES', { value: 'x' }, 400, /environment variable name/);
    await refused(alice.token, 'A-B', { value: 'x' }, 400, /environment variable name/);
    await refused(alice.token, 'PATH', { value: 'x' }, 400, /reserved/);
    await refused(alice.token, 'SVC_TOKEN', { value: 'x' }, 400, /reserved/);
    await refused(alice.token, 'EMPTY', { value: '' }, 400, /.+/);
    await refused(alice.token, 'NUL', { value: 'a\u0000b' }, 400, /NUL/);
    await refused(alice.token, 'BIG', { value: 'x'.repeat(40_000) }, 400, /.+/);
    await refused(alice.token, 'SCOPED', { value: 'x', scope: [`sec-${t.config.redisPrefix}-nope`] }, 404, /no sandbox/);
    const bobs = await t.api('POST', '/api/sandboxes', bob.token, { name: `secb-${t.config.redisPrefix}`, idle_timeout: '1h' });
    await refused(alice.token, 'SCOPED', { value: 'x', scope: [bobs.body.name] }, 404, /no sandbox/);
    await refused(await t.limitedToken(alice.id, name), 'LIMITED', { value: 'x' }, 403, /secrets/);
    const gone = await curl(`${t.url}/api/me/secrets/NOPE`, { token: alice.token, method: 'DELETE' });
    assert.equal(gone.status, 404);
  });

  it('reaches exec sessions as environment variables and files in a tmpfs, scoped; never the container env or log, the audit log, the export folder or the store in clear', async () => {
    assert.equal((await put(alice.token, 'TLS_KEY', { value: PEM, scope: [name] })).status, 201);
    const env = await exec('printenv DB_PASSWORD; printenv TLS_KEY; cat /run/svc/secrets/DB_PASSWORD; echo; grep " /run/svc/secrets " /proc/mounts');
    assert.equal(env.exit_code, 0, env.stderr);
    const [first, ...rest] = env.stdout.split('\n');
    assert.equal(first, VALUE);
    assert.ok(env.stdout.includes(`${PEM}\n${VALUE}\n`), env.stdout);
    assert.match(rest.join('\n'), / \/run\/svc\/secrets tmpfs /);
    assert.equal((await exec('cat /run/svc/secrets/TLS_KEY')).stdout, PEM);
    // scoped to `name` only: the other sandbox has DB_PASSWORD and not TLS_KEY
    const elsewhere = await exec('printenv DB_PASSWORD; ls /run/svc/secrets', other);
    assert.equal(elsewhere.stdout, `${VALUE}\nDB_PASSWORD\n`);

    const inspect = (await run('docker', [...SANDBOX_CLI, 'inspect', name])).stdout;
    assert.ok(inspect.includes('"Env"'));
    assert.ok(!inspect.includes(VALUE) && !inspect.includes('line one'), 'docker inspect shows no secret');
    const rows = await t.service.store.audit.query({}, { limit: 200 });
    const secretRows = rows.rows.filter((r) => r.action.startsWith('secret.'));
    assert.deepEqual(secretRows.map((r) => `${r.action} ${r.target}`).sort(), ['secret.create DB_PASSWORD', 'secret.create TLS_KEY']);
    assert.ok(!JSON.stringify(rows).includes(VALUE));
    // the sandbox container's own log (its entrypoint, sshd) and the export folder hold none either
    const { stdout: containerLog, stderr: containerErr } = await run('docker', [...SANDBOX_CLI, 'logs', name]);
    assert.ok(!`${containerLog}${containerErr}`.includes(VALUE), 'the sandbox container log shows no secret');
    const { folder } = await downloadExport(t, name, alice.token, sb.dir);
    const exported = (await run('grep', ['-rlF', '-e', VALUE, '-e', 'line one', folder]).catch((err: { code: number; stdout: string }) => (err.code === 1 ? { stdout: '' } : Promise.reject(err)))).stdout;
    assert.equal(exported, '', 'the export folder holds no secret');
    const file = new URL(t.config.storeUrl).pathname;
    for (const part of [file, `${file}-wal`].filter((f) => fs.existsSync(f))) {
      const bytes = fs.readFileSync(part);
      assert.ok(!bytes.includes(VALUE) && !bytes.includes('line one'), `${part} holds the values sealed only`);
    }
  });

  it('a rotated value reaches the running sandbox before the call answers, a compose `secrets:` file included; a removed one is gone', async () => {
    const dir = path.join(sb.dir, 'app');
    fs.mkdirSync(dir);
    fs.cpSync(path.join(FIXTURE, '.build'), path.join(dir, '.build'), { recursive: true, verbatimSymlinks: true });
    fs.writeFileSync(path.join(dir, 'Dockerfile'), 'FROM scratch\nCOPY .build/rootfs/ /\nENV PATH=/bin\nCMD ["sleep", "3600"]\n');
    fs.writeFileSync(path.join(dir, 'compose.yaml'), 'services:\n  app:\n    build: .\n    secrets: [db]\nsecrets:\n  db:\n    file: /run/svc/secrets/DB_PASSWORD\n');
    await sb.cli.compose(dir, ['-p', 'sec', 'up', '-d', '--build'], { timeoutMs: 300_000 });
    const inApp = async () => (await sb.cli.compose(dir, ['-p', 'sec', 'exec', '-T', 'app', 'cat', '/run/secrets/db'])).stdout;
    assert.equal(await inApp(), VALUE);

    const rotated = await put(alice.token, 'DB_PASSWORD', { value: ROTATED });
    assert.equal(rotated.status, 200, rotated.body);
    assert.equal((await exec('printenv DB_PASSWORD')).stdout, `${ROTATED}\n`);
    assert.equal(await inApp(), ROTATED, 'the inner container sees the new value in the same file');

    assert.equal((await curl(`${t.url}/api/me/secrets/TLS_KEY`, { token: alice.token, method: 'DELETE' })).status, 200);
    assert.equal((await exec('ls /run/svc/secrets; printenv TLS_KEY || echo unset')).stdout, 'DB_PASSWORD\nunset\n');
  });

  it('reaches ssh sessions through the edge, and comes back after the sandbox sleeps and wakes', async () => {
    const ssh = await sshThroughEdge(t, alice.token, sb.dir);
    const { stdout } = await eventually(() => ssh(name, 'printenv DB_PASSWORD'), 'ssh into the sandbox', 60_000, 1000);
    assert.equal(stdout, `${ROTATED}\n`);

    // asleep as the idle timer leaves it (the container stopped, its tmpfs gone), then woken
    await run('docker', [...SANDBOX_CLI, 'stop', name]);
    const started = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
    assert.equal(started.status, 200, answerOf(started));
    assert.equal((await exec('printenv DB_PASSWORD; ls /run/svc/secrets')).stdout, `${ROTATED}\nDB_PASSWORD\n`);
    assert.equal((await eventually(() => ssh(name, 'printenv DB_PASSWORD'), 'ssh after the wake', 60_000, 1000)).stdout, `${ROTATED}\n`);
  });
});
