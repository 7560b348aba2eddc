import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LABEL_INSTANCE, LABEL_SANDBOX } from '../../lifecycle/runtime/docker-runtime.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { svcCli } from '../helpers/svc-cli.ts';

const docker = sandboxDocker();
const run = promisify(execFile);
const USER_CLI = path.resolve('user-cli/svc.ts');
/** tsx's loader by its path: the CLI runs in a folder of its own, where `--import tsx` would not resolve. */
const TSX = import.meta.resolve('tsx');
const MB = 1024 * 1024;

/** The containers a test service has on the sandbox engine, by sandbox name. */
async function containers(t: TestService): Promise<string[]> {
  const list = await docker.listContainers({ all: true, filters: { label: [`${LABEL_INSTANCE}=${t.config.redisPrefix}`] } });
  return list.map((c) => c.Labels[LABEL_SANDBOX]!).sort();
}

/** A request with its headers (Retry-After). */
async function call(t: TestService, method: string, route: string, token: string, body?: unknown) {
  const res = await fetch(t.url + route, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() as any };
}

/** Quotas on real sandboxes: over the API, MCP and the operator's CLI (issue 24). */
describe('quotas per user', () => {
  let t: TestService;
  let alice: { id: string; token: string; name: string };
  let bob: { id: string; token: string; name: string };
  let mcp: Client;
  /** Alice's first sandbox, named like an archiver: still a sandbox, counted against max_running. */
  const A = 'a-archiver-1';
  const sandbox = (short: string) => `svc-${short}-${t.config.redisPrefix}`;
  const create = (who: { token: string }, short: string, extra: Record<string, unknown> = {}) =>
    call(t, 'POST', '/api/sandboxes', who.token, { name: `${short}-${t.config.redisPrefix}`, idle_timeout: '1h', ...extra });
  const cli = async (...args: string[]) => {
    const r = await svcCli(t.config, ...args);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  const me = async () => (await call(t, 'GET', '/api/me', alice.token)).body;
  const tool = async (name: string, args: Record<string, unknown>) => {
    const res = await mcp.callTool({ name, arguments: args });
    return { isError: res.isError === true, text: (res.content as Array<{ text: string }>)[0]!.text };
  };

  before(async () => {
    t = await startTestService({ sandboxMemoryMb: 512, sandboxCpus: 1 });
    alice = { ...(await t.user('alice')), name: `alice-${t.config.redisPrefix}` };
    bob = { ...(await t.user('bob')), name: `bob-${t.config.redisPrefix}` };
    mcp = new Client({ name: 'quota-test', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${t.url}/api/mcp`), { requestInit: { headers: { authorization: `Bearer ${alice.token}` } } }));
  });
  after(async () => {
    await mcp?.close().catch(() => undefined);
    await t?.close();
  });

  it('the operator sets quotas with svc user set; GET /me shows them with the usage; bad values change nothing', async () => {
    const before = await me();
    assert.deepEqual(before.quotas, { max_sandboxes: 20, max_running: 5, memory_mb: 512, cpus: 1, wakes_per_hour: 60 }, 'the operator defaults');
    assert.deepEqual(before.usage, { sandboxes: 0, running: 0, wakes_this_hour: 0 });
    assert.deepEqual(Object.keys(before).slice(0, 4), ['id', 'name', 'admin', 'created_at'], 'the spec fields stay');

    const out = await cli('user', 'set', alice.name, '--max-sandboxes', '2', '--max-running', '1', '--memory-mb', '384', '--cpus', '0.5');
    assert.match(out, /max_sandboxes 2, max_running 1, memory_mb 384, cpus 0\.5, wakes_per_hour 60 \(default\)/);
    assert.deepEqual((await me()).quotas, { max_sandboxes: 2, max_running: 1, memory_mb: 384, cpus: 0.5, wakes_per_hour: 60 });

    const notNumber = await svcCli(t.config, 'user', 'set', alice.name, '--cpus', 'lots');
    assert.equal(notNumber.code, 2);
    assert.match(notNumber.stderr, /--cpus needs a number/);
    const negative = await svcCli(t.config, 'user', 'set', alice.name, '--max-running', '3', '--memory-mb', '32');
    assert.equal(negative.code, 1);
    assert.match(negative.stderr, /memory_mb must be a whole number from 64/);
    assert.equal((await me()).quotas.max_running, 1, 'nothing changed: the good value of a refused command is not applied');
  });

  it('a sandbox may ask for less memory and CPU than the quota, never more; a refusal makes nothing', async () => {
    const tooBig = await create(alice, 'big', { memory_mb: 512 });
    assert.equal(tooBig.status, 403, answerOf(tooBig));
    assert.equal(tooBig.body.error.code, 'SVC_QUOTA_EXCEEDED');
    assert.match(tooBig.body.error.message, /memory_mb 512 is over your quota memory_mb \(384 MB/);
    const tooFast = await create(alice, 'big', { cpus: 2 });
    assert.equal(tooFast.status, 403, answerOf(tooFast));
    assert.match(tooFast.body.error.message, /quota cpus \(0\.5 CPUs/);
    assert.deepEqual(await containers(t), []);
    assert.deepEqual((await call(t, 'GET', '/api/sandboxes', alice.token)).body, []);

    const small = await create(alice, A, { memory_mb: 256 });
    assert.equal(small.status, 201, answerOf(small));
    const host = (await docker.getContainer(sandbox(A)).inspect()).HostConfig;
    assert.equal(host.Memory, 256 * MB, 'the container has the memory asked for');
    assert.equal(host.NanoCpus, 0.5e9, 'and the CPU quota');
  });

  it('over max_running: 429 with Retry-After naming the quota, over the API and MCP; nothing half-created', async () => {
    const second = await create(alice, 'b');
    assert.equal(second.status, 429, answerOf(second));
    assert.equal(second.body.error.code, 'SVC_QUOTA_RUNNING');
    assert.match(second.body.error.message, /quota max_running \(1 sandboxes running at once\) reached/);
    const retry = Number(second.headers.get('retry-after'));
    assert.ok(retry > 0 && retry <= 3600, 'Retry-After: when the running sandbox falls asleep if idle (1 h)');
    assert.deepEqual(await containers(t), [sandbox(A)]);
    assert.equal((await t.service.store.sandboxes.get(sandbox('b'))), undefined, 'no record: the name stays free');

    await t.service.lifecycle.sleep(sandbox(A), 'test');
    const b = await create(alice, 'b');
    assert.equal(b.status, 201, answerOf(b));
    const viaMcp = await tool('start_sandbox', { sandbox: sandbox(A) });
    assert.ok(viaMcp.isError, 'MCP start over the quota is a tool error');
    assert.match(viaMcp.text, /^SVC_QUOTA_RUNNING: quota max_running \(1 sandboxes/);
    assert.equal((await t.service.lifecycle.status(sandbox(A))).status, 'exited', 'still asleep');
  });

  it('over max_sandboxes: 403 naming the quota; another user is unaffected', async () => {
    const third = await create(alice, 'c');
    assert.equal(third.status, 403, answerOf(third));
    assert.equal(third.body.error.code, 'SVC_QUOTA_EXCEEDED');
    assert.match(third.body.error.message, /quota max_sandboxes \(2 sandboxes\) reached: you have 2/);
    assert.deepEqual((await me()).usage, { sandboxes: 2, running: 1, wakes_this_hour: 0 });

    // the user's CLI (issue 22) through the edge, as a user runs it in a folder with svc.env
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-quota-cli-'));
    try {
      fs.writeFileSync(path.join(folder, 'svc.env'), `SVC_URL=https://localhost:${t.config.httpsPort}/api\nSVC_TOKEN=${alice.token}\n`, { mode: 0o600 });
      fs.writeFileSync(path.join(folder, 'service-ca.pem'), await (await fetch(`${t.url}/ca.pem`)).text());
      const refused = await run(process.execPath, ['--import', TSX, USER_CLI, 'create', `c-${t.config.redisPrefix}`], { cwd: folder }).then(() => null, (err) => err as { code: number; stderr: string });
      assert.ok(refused, 'the CLI create is refused');
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /^svc: quota max_sandboxes \(2 sandboxes\) reached: you have 2; .* \(SVC_QUOTA_EXCEEDED\)\n$/);
    } finally {
      fs.rmSync(folder, { recursive: true, force: true });
    }

    const bobs = await create(bob, 'bob1');
    assert.equal(bobs.status, 201, answerOf(bobs));
    assert.deepEqual(await containers(t), [sandbox(A), sandbox('b'), sandbox('bob1')].sort());
  });

  it('two concurrent creates for the last place: one passes, one is refused', async () => {
    await cli('user', 'set', alice.name, '--max-sandboxes', '3', '--max-running', '5');
    const [x, y] = await Promise.all([create(alice, 'x'), create(alice, 'y')]);
    assert.deepEqual([x.status, y.status].sort(), [201, 403], `${answerOf(x)} / ${answerOf(y)}`);
    const refused = x.status === 403 ? x : y;
    assert.match(refused.body.error.message, /quota max_sandboxes \(3 sandboxes\) reached: you have 3/);
    const records = (await t.service.store.sandboxes.listByOwner(alice.id)).map((r) => r.name);
    assert.equal(records.length, 3);
  });

  it('lowering a quota below use stops new starts and stops nothing running', async () => {
    const running = (await containers(t)).filter((n) => n !== sandbox(A) && n !== sandbox('bob1'));
    assert.equal(running.length, 2, 'alice runs b and the concurrent winner');
    await cli('user', 'set', alice.name, '--max-running', '1');
    for (const name of running) assert.equal((await t.service.lifecycle.status(name)).status, 'running', `${name} keeps running`);
    const start = await call(t, 'POST', `/api/sandboxes/${sandbox(A)}/start`, alice.token);
    assert.equal(start.status, 429, answerOf(start));
    assert.match(start.body.error.message, /quota max_running \(1 sandboxes running at once\) reached: 2 of your sandboxes are running/);
    assert.deepEqual((await me()).usage, { sandboxes: 3, running: 2, wakes_this_hour: 0 });
    const bobStart = await call(t, 'POST', `/api/sandboxes/${sandbox('bob1')}/keep-awake`, bob.token);
    assert.equal(bobStart.status, 200, answerOf(bobStart));

    await cli('user', 'set', alice.name, '--max-running', 'default');
    assert.equal((await me()).quotas.max_running, 5, 'back to the operator default');
    const again = await call(t, 'POST', `/api/sandboxes/${sandbox(A)}/start`, alice.token);
    assert.equal(again.status, 200, answerOf(again));
  });
});

/** The host guard: the running sandboxes' limits never pass the host's memory times SVC_OVERCOMMIT_MEMORY. */
describe('host overcommit guard', () => {
  let t: TestService;
  const hostMb = Math.floor(os.totalmem() / MB);

  before(async () => {
    // room for one 256 MB sandbox and not for two
    t = await startTestService({ sandboxMemoryMb: 256, overcommitMemory: 450 / hostMb });
  });
  after(async () => { await t?.close(); });

  it('refuses a start that would overcommit the host, with a message, and makes nothing', async () => {
    const carol = await t.user('carol');
    const dave = await t.user('dave');
    const first = await call(t, 'POST', '/api/sandboxes', carol.token, { name: `one-${t.config.redisPrefix}` });
    assert.equal(first.status, 201, answerOf(first));
    const second = await call(t, 'POST', '/api/sandboxes', dave.token, { name: `two-${t.config.redisPrefix}` });
    assert.equal(second.status, 503, answerOf(second));
    assert.equal(second.body.error.code, 'SVC_HOST_FULL');
    assert.match(second.body.error.message, /the host is full: starting this sandbox would bring the running sandboxes to 512 MB of memory limits \(this host allows 4\d\d MB/);
    assert.ok(Number(second.headers.get('retry-after')) > 0);
    assert.deepEqual(await containers(t), [`svc-one-${t.config.redisPrefix}`]);
    const smaller = await call(t, 'POST', '/api/sandboxes', dave.token, { name: `two-${t.config.redisPrefix}`, memory_mb: 128 });
    assert.equal(smaller.status, 201, `a smaller sandbox still fits: ${answerOf(smaller)}`);
  });
});
