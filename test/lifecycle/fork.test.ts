// Forks (issue 35) with the clients a user has: curl for the fork, the docker CLI through each sandbox's
// own engine address for images and containers, the sandbox engine for files. The source runs, unchanged,
// throughout; the two sandboxes share nothing after the fork.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createUser } from '../../accounts/index.ts';
import { setQuotas } from '../../accounts/quotas.ts';
import { launchChromium } from '../../harness/browser.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { navigate } from '../helpers/navigate.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');
/** What the source holds: files in two volumes, one of them sparse, hard-linked and with an extended attribute. */
const FILES = '/root/data/blob /root/data/link /srv/app/sparse /home/notes.txt';
const serve = 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www';

describe('fork a sandbox', () => {
  let t: TestService;
  let sb: EdgeSandbox;
  let alice: { id: string; token: string };
  let source: string;
  let forkCli: EngineCli | undefined;

  const inSandbox = async (name: string, cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout;
  const sums = (name: string) => inSandbox(name, `sha256sum ${FILES} && stat -c '%n %U:%G %a %h %b' ${FILES} && getfattr -n user.svc --only-values /root/data/blob`);
  const containerStart = async (name: string) => (await run('docker', [...SANDBOX_CLI, 'inspect', '-f', '{{.State.StartedAt}} {{.State.Running}} {{.State.Paused}}', name])).stdout.trim();
  /** POST fork with curl, as a user types it. */
  const curlFork = async (from: string, body: string, token = alice.token) => {
    const { stdout } = await run('curl', ['-sS', '-X', 'POST', '-H', `authorization: Bearer ${token}`, '-H', 'content-type: application/json',
      '--data', body, '-w', '\n%{http_code}', `${t.url}/api/sandboxes/${from}/fork`]);
    const cut = stdout.lastIndexOf('\n');
    return { status: Number(stdout.slice(cut + 1)), body: JSON.parse(stdout.slice(0, cut)) };
  };

  before(async () => {
    t = await startTestService();
    sb = await openEdgeSandbox(t, 'fks');
    ({ name: source, user: alice } = sb);
    // inner images and containers: one restartable and running, one that ran and exited, a named volume
    await sb.cli.docker(['build', '-q', '-t', 'fork-app:1', FIXTURE]);
    await sb.cli.docker(['run', '-d', '--name', 'keeper', '--restart', 'unless-stopped', '-v', 'state:/state', 'fork-app:1', 'sh', '-c', `echo kept > /state/mark; ${serve}`]);
    await sb.cli.docker(['run', '--name', 'once', 'fork-app:1', 'true']);
    await inSandbox(source, 'mkdir -p /root/data /srv/app && head -c 20000000 /dev/urandom > /root/data/blob && ln /root/data/blob /root/data/link && '
      + 'truncate -s 50M /srv/app/sparse && echo middle | dd of=/srv/app/sparse bs=1 seek=1000000 conv=notrunc 2>/dev/null && '
      + 'setfattr -n user.svc -v forked /root/data/blob && echo hello > /home/notes.txt && chown 1000:1000 /home/notes.txt && chmod 640 /home/notes.txt');
  });
  after(async () => {
    forkCli?.dispose();
    sb?.close();
    await t?.close();
  });

  it('answers 201 with a running fork that has the source\'s files, images and containers, its own certificates and address; the source runs on, unchanged', async () => {
    const before = await sums(source);
    const startedBefore = await containerStart(source);
    const since = Math.floor(Date.now() / 1000) - 1;
    const res = await curlFork(source, JSON.stringify({ name: `fkd-${t.config.redisPrefix}` }));
    assert.equal(res.status, 201, answerOf(res));
    // the copy was of one instant: the source was paused for it and resumed, nothing else happened to its container
    const events = await run('docker', [...SANDBOX_CLI, 'events', '--since', String(since), '--until', String(Math.ceil(Date.now() / 1000) + 1),
      '--filter', `container=${source}`, '--filter', 'type=container', '--format', '{{.Action}}']);
    assert.deepEqual(events.stdout.trim().split('\n').filter((a) => !a.startsWith('exec_')), ['pause', 'unpause']);
    const fork = res.body;
    assert.equal(fork.status, 'running');
    assert.equal(fork.owner, (await sb.record()).owner);
    assert.equal(fork.idle_timeout, '1h', 'the source\'s idle settings');

    // the source: the same container run (never restarted), running and not paused, its files as they were
    assert.equal(await containerStart(source), startedBefore);
    assert.match(startedBefore, / true false$/);
    assert.equal(await sums(source), before);
    assert.equal((await sb.record()).status, 'running');

    // the fork's files: equal, owners, modes, links, sparseness and extended attribute included
    assert.equal(await sums(fork.name), before);
    // its own certificates and engine address
    const src = await sb.record();
    assert.notEqual(fork.ca_cert, src.ca_cert);
    assert.notEqual(fork.client_key, src.client_key);
    assert.notEqual(fork.engine_access.host, src.engine_access.host);
    // and its own SSH host key and inner engine ID, where the copy had the source's
    const identity = 'cat /var/lib/docker/.svc-ssh-host-keys/ssh_host_ed25519_key.pub /var/lib/docker/engine-id';
    const [srcId, forkId] = [await inSandbox(source, identity), await inSandbox(fork.name, identity)];
    assert.match(forkId, /^ssh-ed25519 /);
    assert.notEqual(forkId.split('\n')[0], srcId.split('\n')[0]);
    assert.notEqual(forkId.split('\n')[1], srcId.split('\n')[1]);
    // its engine, through its own address, with the docker CLI: the image, the restartable container running again, the exited one kept
    forkCli = new EngineCli(fork.engine_access.host, '127.0.0.1', t.config.httpsPort, fork);
    assert.match((await forkCli.docker(['images', '--format', '{{.Repository}}:{{.Tag}}'])).stdout, /^fork-app:1$/m);
    const ps = await eventually(async () => {
      const out = (await forkCli!.docker(['ps', '-a', '--format', '{{.Names}} {{.State}}'])).stdout;
      return /^keeper running$/m.test(out) ? out : undefined;
    }, 'the restartable container running in the fork');
    assert.match(ps, /^once exited$/m);
    assert.equal((await forkCli.docker(['exec', 'keeper', 'cat', '/state/mark'])).stdout, 'kept\n');
    // the source's engine still has its own, running, through its address
    assert.match((await sb.cli.docker(['ps', '--format', '{{.Names}} {{.State}}'])).stdout, /^keeper running$/m);
  });

  it('keeps the two apart: a file written in one after the fork is not in the other', async () => {
    const fork = `svc-fkd-${t.config.redisPrefix}`;
    await inSandbox(source, 'echo from-source > /root/after-source');
    await inSandbox(fork, 'echo from-fork > /root/after-fork');
    assert.equal(await inSandbox(source, 'cat /root/after-source; test -e /root/after-fork && echo leaked || echo absent'), 'from-source\nabsent\n');
    assert.equal(await inSandbox(fork, 'cat /root/after-fork; test -e /root/after-source && echo leaked || echo absent'), 'from-fork\nabsent\n');
    await forkCli!.docker(['exec', 'keeper', 'sh', '-c', 'echo fork > /state/mark']);
    assert.equal((await sb.cli.docker(['exec', 'keeper', 'cat', '/state/mark'])).stdout, 'kept\n');
  });

  it('has the fork in the audit log, under the caller, naming its source', async () => {
    const rows = await t.service.store.audit.query({ action: 'sandbox.fork' });
    const row = rows.rows.find((r) => r.sandbox === `svc-fkd-${t.config.redisPrefix}`);
    assert.ok(row, 'an audit row sandbox.fork');
    assert.equal(JSON.parse(row.detail ?? '{}').from, source);
  });

  it('refuses bad input with the catalogue\'s errors, and changes nothing', async () => {
    const taken = await curlFork(source, JSON.stringify({ name: `fkd-${t.config.redisPrefix}` }));
    assert.equal(taken.status, 409);
    assert.equal(taken.body.error.code, 'SVC_NAME_TAKEN');
    const bad = await curlFork(source, JSON.stringify({ name: 'Not_A-Name' }));
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'SVC_BAD_SANDBOX_NAME');
    const noName = await curlFork(source, '{}');
    assert.equal(noName.status, 400);
    assert.equal(noName.body.error.code, 'SVC_BAD_REQUEST');
    const unknown = await curlFork(`svc-none-${t.config.redisPrefix}`, JSON.stringify({ name: 'x1' }));
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.code, 'SVC_SANDBOX_NOT_FOUND');
    // a token limited to the source may not make a sandbox (spec 5.2: creating answers 403)
    const limited = await curlFork(source, JSON.stringify({ name: `fkl-${t.config.redisPrefix}` }), await t.limitedToken(alice.id, source));
    assert.equal(limited.status, 403);
    assert.equal(limited.body.error.code, 'SVC_FORBIDDEN');
    // another user does not see the source
    const bob = await t.user('bob');
    const other = await curlFork(source, JSON.stringify({ name: `fkb-${t.config.redisPrefix}` }), bob.token);
    assert.equal(other.status, 404);
    // the quota counts forks: alice has two sandboxes
    await setQuotas(t.service.store, `alice-${t.config.redisPrefix}`, { max_sandboxes: 2 });
    const over = await curlFork(source, JSON.stringify({ name: `fkq-${t.config.redisPrefix}` }));
    assert.equal(over.status, 403);
    assert.equal(over.body.error.code, 'SVC_QUOTA_EXCEEDED');
    await setQuotas(t.service.store, `alice-${t.config.redisPrefix}`, { max_sandboxes: 10 });
    for (const n of ['fkl', 'fkb', 'fkq']) assert.equal((await t.api('GET', `/api/sandboxes/svc-${n}-${t.config.redisPrefix}`, alice.token)).status, 404);
  });

  it('forks through MCP (fork_sandbox) with a full token; a limited token gets the API\'s 403 as a tool error', async () => {
    const connect = async (token: string) => {
      const client = new Client({ name: 'fork-test', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
      return client;
    };
    const text = (res: Awaited<ReturnType<Client['callTool']>>) => (res.content as Array<{ text: string }>)[0]!.text;
    const agent = await connect(alice.token);
    const limitedAgent = await connect(await t.limitedToken(alice.id, source));
    try {
      const made = await agent.callTool({ name: 'fork_sandbox', arguments: { sandbox: source, name: `fkm-${t.config.redisPrefix}` } });
      assert.ok(!made.isError, text(made));
      const fork = JSON.parse(text(made));
      assert.equal(fork.status, 'running');
      assert.equal(fork.client_key, undefined, 'no engine key in a tool\'s answer');
      assert.equal(await inSandbox(fork.name, 'cat /root/after-source'), 'from-source\n');
      const refused = await limitedAgent.callTool({ name: 'fork_sandbox', arguments: { name: `fkn-${t.config.redisPrefix}` } });
      assert.ok(refused.isError);
      assert.match(text(refused), /^SVC_FORBIDDEN: /);
      assert.ok((await t.service.store.audit.query({ action: 'sandbox.fork' })).rows.some((r) => r.sandbox === fork.name));
    } finally {
      await agent.close();
      await limitedAgent.close();
    }
    await t.service.lifecycle.sleep(`svc-fkm-${t.config.redisPrefix}`, 'test: done with it');
  });

  it('forks from the sandbox panel in Chromium (an admin: the fork is the owner\'s) and opens the fork\'s panel', async () => {
    const admin = await createUser(t.service.store, { name: `fka-${t.config.redisPrefix}`, admin: true });
    const site = `https://localhost:${t.config.httpsPort}`;
    const browser = await launchChromium('localhost');
    try {
      const context = await browser.newContext({ ignoreHTTPSErrors: true });
      const signIn = await fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: admin.user.name, password: admin.password }) });
      const cookie = /^__Host-svc_session=([^;]+)/.exec(signIn.headers.get('set-cookie') ?? '')?.[1];
      assert.ok(cookie, `sign-in failed: ${signIn.status}`);
      await context.addCookies([{ name: '__Host-svc_session', value: cookie, url: site, secure: true, httpOnly: true, sameSite: 'Strict' }]);
      const page = await context.newPage();
      await navigate(page, () => page.goto(`${site}/#/sandboxes/${source}`));
      await page.getByRole('heading', { level: 1, name: new RegExp(source) }).waitFor({ timeout: 60_000 });
      await page.getByLabel('Name of the fork').fill(`fku-${t.config.redisPrefix}`);
      await page.getByRole('button', { name: 'Fork', exact: true }).click();
      const fork = `svc-fku-${t.config.redisPrefix}`;
      await page.getByRole('heading', { level: 1, name: new RegExp(fork) }).waitFor({ timeout: 120_000 });
      const record = await t.api('GET', `/api/sandboxes/${fork}`, alice.token);
      assert.equal(record.status, 200, answerOf(record));
      assert.equal(record.body.status, 'running');
      // a taken name: the panel says why
      await navigate(page, () => page.goto(`${site}/#/sandboxes/${source}`));
      await page.getByLabel('Name of the fork').fill(`fku-${t.config.redisPrefix}`);
      await page.getByRole('button', { name: 'Fork', exact: true }).click();
      await page.getByRole('alert').filter({ hasText: 'already taken' }).waitFor({ timeout: 60_000 });
    } finally {
      await browser.close();
    }
    await t.service.lifecycle.sleep(`svc-fku-${t.config.redisPrefix}`, 'test: done with it');
  });

  it('forks with the served user CLI (svc fork NEW) and a full token; the export folder\'s limited token is refused with the reason', async () => {
    const folder = path.join(sb.dir, 'cli');
    fs.mkdirSync(folder);
    fs.copyFileSync(sb.ca, path.join(folder, 'service-ca.pem'));
    const cli = path.join(folder, 'svc.mjs');
    await run('curl', ['-sSf', '--cacert', sb.ca, '-o', cli, `https://localhost:${t.config.httpsPort}/cli/svc.mjs`]);
    const svc = async (token: string, args: string[]) => {
      fs.writeFileSync(path.join(folder, 'svc.env'), `SVC_URL=https://localhost:${t.config.httpsPort}/api\nSVC_TOKEN=${token}\nSVC_SANDBOX=${source}\n`, { mode: 0o600 });
      return run(process.execPath, [cli, ...args], { cwd: folder, env: { PATH: process.env.PATH!, HOME: folder } }).then((r) => ({ code: 0, ...r }), (err) => ({ code: err.code as number, stdout: err.stdout as string, stderr: err.stderr as string }));
    };
    const made = await svc(alice.token, ['fork', `fkc-${t.config.redisPrefix}`]);
    assert.equal(made.code, 0, made.stderr);
    assert.equal(made.stdout, `svc-fkc-${t.config.redisPrefix}  running\n`);
    assert.equal(await inSandbox(`svc-fkc-${t.config.redisPrefix}`, 'cat /home/notes.txt'), 'hello\n');
    const refused = await svc(await t.limitedToken(alice.id, source), ['fork', `fkr-${t.config.redisPrefix}`]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /limited to one sandbox cannot fork/);
    await t.service.lifecycle.sleep(`svc-fkc-${t.config.redisPrefix}`, 'test: done with it');
  });

  it('ends, at the next reconcile pass, a pause that no copy holds (a fork whose process was killed mid-copy)', async () => {
    await run('docker', [...SANDBOX_CLI, 'pause', source]);
    assert.match(await containerStart(source), / true true$/);
    await t.service.lifecycle.reconcile();
    assert.match(await containerStart(source), / true false$/);
    assert.equal(await inSandbox(source, 'cat /root/after-source'), 'from-source\n');
  });

  it('forks a source in deep sleep from its volumes, and leaves it in deep sleep', async () => {
    const settings = (body: object) => t.api('PATCH', `/api/sandboxes/${source}`, alice.token, body);
    await settings({ idle_timeout: '3s', deep_sleep_after: '2s' });
    await eventually(async () => (await sb.record()).status === 'deep_sleep', 'deep sleep', 90_000, 500);
    await settings({ idle_timeout: '1h', deep_sleep_after: '7d' });
    const res = await curlFork(source, JSON.stringify({ name: `fkz-${t.config.redisPrefix}` }));
    assert.equal(res.status, 201, answerOf(res));
    assert.equal(res.body.status, 'running');
    assert.equal(await inSandbox(res.body.name, 'cat /root/after-source'), 'from-source\n');
    assert.equal((await sb.record()).status, 'deep_sleep');
  });
});
