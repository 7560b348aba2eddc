import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { createUser } from '../../accounts/index.ts';
import { setQuotas } from '../../accounts/quotas.ts';
import { errors } from '../../core/errors.ts';
import { WakeLimits } from '../../lifecycle/wake-limits.ts';
import { SANDBOX_CLI } from '../../harness/sandbox-engine.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const MAX_UPLOAD = 64 * 1024;

/** The error table of docs/api.md: status, code and what triggers it, one row per code. */
function documentedErrors(): Array<{ status: number; code: string; when: string }> {
  const doc = fs.readFileSync(path.resolve('docs/api.md'), 'utf8');
  return [...doc.matchAll(/^\| (\d{3}) \| `(SVC_[A-Z_]+)` \| (.+) \|$/gm)].map(([, status, code, when]) => ({ status: Number(status), code, when }));
}

/** Every code of the catalogue with its status (an instance of each, made with placeholder arguments). */
function catalogue(): Map<string, number> {
  return new Map(Object.values(errors).map((E) => {
    const err = Reflect.construct(E, [1, 'x', 'y', 'z']) as { code: string; statusCode: number };
    return [err.code, err.statusCode];
  }));
}

/**
 * The error contract (design.md, "Errors"; docs/api.md, "Errors"): every code of the catalogue is in
 * the documented table with its status, and every trigger a client can cause is sent as a real request
 * to a real service; each answer is exactly `{ error: { code, message } }` with the table's status.
 */
describe('error contract: every code, its status and what triggers it', () => {
  const table = documentedErrors();
  const statusOf = new Map(table.map((r) => [r.code, r.status]));
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let carol: { id: string; token: string };
  let carolName: string;
  let limited: string;
  let name: string;
  let gone: string;
  let signer: { name: string; password: string };
  let tmp: string;

  const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sh', '-c', cmd])).stdout;
  const call = (method: string, route: string, opts: { token?: string; body?: BodyInit; type?: string } = {}) =>
    fetch(t.url + route, {
      method,
      headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...(opts.type ? { 'content-type': opts.type } : {}) },
      body: opts.body,
    });
  const json = (method: string, route: string, token: string | undefined, body: unknown) => call(method, route, { token, body: JSON.stringify(body), type: 'application/json' });
  const files = (route: string, p: string) => `/api/sandboxes/${name}/files${route}?path=${encodeURIComponent(p)}`;

  /** Checks one answer against the table: its status, the exact error shape, a message to act on. */
  async function expectError(res: Response, code: string, trigger: string): Promise<void> {
    const text = await res.text();
    let body: any;
    try { body = JSON.parse(text); } catch { assert.fail(`${trigger}: ${res.status}, not JSON`); }
    assert.equal(res.status, statusOf.get(code), `${trigger}: ${answerOf({ status: res.status, body })}`);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/, trigger);
    assert.deepEqual(Object.keys(body), ['error'], trigger);
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message'], trigger);
    assert.equal(body.error.code, code, `${trigger}: ${body.error.message}`);
    assert.ok(typeof body.error.message === 'string' && body.error.message.length > 10, trigger);
    if (res.status === 429 || res.status === 503) assert.match(res.headers.get('retry-after') ?? '', /^[1-9]\d*$/, `${trigger}: Retry-After`);
  }

  /**
   * Real requests for each code, in the order they run (the last ones change shared state: the
   * address's sign-in count, the sandbox's sleep). Keys must be codes of the table.
   */
  const triggers: Record<string, Array<[string, () => Promise<Response>]>> = {
    SVC_BAD_REQUEST: [
      ['an unknown field', () => json('POST', '/api/sandboxes', alice.token, { name: 'ok-name', colour: 'blue' })],
      ['a wrong type', () => json('POST', '/api/sandboxes', alice.token, { name: 42 })],
      ['a body that is not JSON', () => call('POST', '/api/sandboxes', { token: alice.token, body: '{"name": ', type: 'application/json' })],
      ['an empty body with a JSON content type', () => call('POST', '/api/sandboxes', { token: alice.token, body: '', type: 'application/json' })],
      ['a malformed %-escape in the URL', () => call('GET', '/api/sandboxes/%E0%A4%A', { token: alice.token })],
      ['a token in the URL', () => call('GET', `/api/sandboxes?access_token=svc_${'x'.repeat(43)}`)],
    ],
    SVC_BAD_DURATION: [['idle_timeout "5x"', () => json('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '5x' })]],
    SVC_BAD_SANDBOX_NAME: [['the name "Bad_Name!"', () => json('POST', '/api/sandboxes', alice.token, { name: 'Bad_Name!' })]],
    SVC_UNAUTHENTICATED: [
      ['no token', () => call('GET', '/api/sandboxes')],
      ['an unknown token', () => call('GET', '/api/sandboxes', { token: `svc_${'x'.repeat(43)}` })],
      ['a wrong password at sign-in', () => json('POST', '/api/session', undefined, { name: signer.name, password: 'not-the-password' })],
    ],
    SVC_FORBIDDEN: [
      ['a limited token creating a sandbox', () => json('POST', '/api/sandboxes', limited, { name: 'other-one' })],
      ['a cross-site sign-in', () => fetch(`${t.url}/api/session`, { method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://elsewhere.example' }, body: '{"name":"x","password":"y"}' })],
    ],
    SVC_ACCOUNT_DISABLED: [['a sign-in with the right password to a disabled account', async () => {
      const user = (await t.service.store.users.getByName(signer.name))!;
      await t.service.store.users.put({ ...user, disabled_at: new Date().toISOString() });
      try {
        return await json('POST', '/api/session', undefined, signer);
      } finally {
        await t.service.store.users.put(user);
      }
    }]],
    SVC_QUOTA_EXCEEDED: [['a create with more memory than the quota', () => json('POST', '/api/sandboxes', alice.token, { name: 'too-big', memory_mb: 999_999 })]],
    SVC_QUOTA_RUNNING: [['a create with max_running 0', async () => {
      await setQuotas(t.service.store, carolName, { max_running: 0 });
      try {
        return await json('POST', '/api/sandboxes', carol.token, { name: `carol-${t.config.redisPrefix}` });
      } finally {
        await setQuotas(t.service.store, carolName, { max_running: null });
      }
    }]],
    SVC_HOST_FULL: [['a create whose memory limit is past the host', async () => {
      await setQuotas(t.service.store, carolName, { memory_mb: 1_000_000 });
      try {
        return await json('POST', '/api/sandboxes', carol.token, { name: `carol-${t.config.redisPrefix}`, memory_mb: 1_000_000 });
      } finally {
        await setQuotas(t.service.store, carolName, { memory_mb: null });
      }
    }]],
    SVC_SANDBOX_NOT_FOUND: [
      ['a sandbox that does not exist', () => call('GET', '/api/sandboxes/svc-none-such', { token: alice.token })],
      ["another user's sandbox", () => call('GET', `/api/sandboxes/${name}`, { token: bob.token })],
    ],
    SVC_NOT_FOUND: [
      ['no such route', () => call('GET', '/api/no-such-route', { token: alice.token })],
      ['no such token', () => call('DELETE', '/api/me/tokens/none-such', { token: alice.token })],
    ],
    SVC_NAME_TAKEN: [['a name in use', () => json('POST', '/api/sandboxes', alice.token, { name })]],
    SVC_CONFLICT: [['an SSH key added twice', async () => {
      const key = fs.readFileSync(path.join(tmp, 'id.pub'), 'utf8').trim();
      const first = await json('POST', '/api/me/ssh-keys', alice.token, { key });
      assert.equal(first.status, 201, answerOf({ status: first.status, body: await first.json() }));
      return json('POST', '/api/me/ssh-keys', alice.token, { key });
    }]],
    SVC_ENGINE_ACCESS_DISABLED: [['the volumes of a needs-certs sandbox', async () => {
      const { certs: _certs, ...legacy } = (await t.service.store.sandboxes.get(gone))!;
      await t.service.store.sandboxes.put(legacy);
      return call('GET', `/api/sandboxes/${gone}/volumes`, { token: alice.token });
    }]],
    SVC_SANDBOX_ARCHIVED: [['a deleted sandbox', async () => {
      const deleted = await call('DELETE', `/api/sandboxes/${gone}`, { token: alice.token });
      assert.equal(deleted.status, 200, `DELETE ${deleted.status}`);
      await deleted.body?.cancel();
      return call('GET', `/api/sandboxes/${gone}`, { token: alice.token });
    }]],
    SVC_TOO_LARGE: [['a JSON body over 1 MiB', () => json('POST', '/api/sandboxes', alice.token, { name: 'big', pad: 'x'.repeat(1024 * 1024) })]],
    SVC_UNSUPPORTED_MEDIA_TYPE: [['an XML body', () => call('POST', '/api/sandboxes', { token: alice.token, body: '<name>x</name>', type: 'application/xml' })]],
    SVC_BAD_PATH: [['a path with ".."', () => call('GET', files('', '/root/../etc'), { token: limited })]],
    SVC_PATH_NOT_ALLOWED: [['/etc', () => call('GET', files('', '/etc'), { token: limited })]],
    SVC_PATH_ESCAPES: [['a link out of /root', () => call('GET', files('', '/root/out'), { token: limited })]],
    SVC_TOP_FOLDER: [['deleting /root', () => call('DELETE', files('', '/root'), { token: limited })]],
    SVC_FILE_NOT_FOUND: [['a missing file', () => call('GET', files('/text', '/root/none-such'), { token: limited })]],
    SVC_NOT_A_FOLDER: [['listing a file', () => call('GET', files('', '/root/small.txt'), { token: limited })]],
    SVC_IS_A_FOLDER: [['a folder read as text', () => call('GET', files('/text', '/root/adir'), { token: limited })]],
    SVC_NOT_A_FILE: [['a pipe read as text', () => call('GET', files('/text', '/root/fifo'), { token: limited })]],
    SVC_FILE_EXISTS: [['a folder where a file is', () => json('POST', `/api/sandboxes/${name}/files/mkdir`, limited, { path: '/root/small.txt' })]],
    SVC_NOT_TEXT: [['a binary file read as text', () => call('GET', files('/text', '/root/binary'), { token: limited })]],
    SVC_TEXT_TOO_LARGE: [['a 1.5 MB file read as text', () => call('GET', files('/text', '/root/large.txt'), { token: limited })]],
    SVC_UPLOAD_TOO_LARGE: [['an upload past FILES_MAX_UPLOAD', () => call('PUT', files('/content', '/root/up.bin'), { token: limited, body: new Uint8Array(MAX_UPLOAD + 1), type: 'application/octet-stream' })]],
    SVC_FILE_OPERATION_FAILED: [['deleting a busy mount point', () => call('DELETE', files('', '/root/mnt'), { token: limited })]],
    SVC_SANDBOX_FAILED: [['a manager sandbox whose tool image is missing', () => json('POST', '/api/sandboxes', alice.token, { name: `fail-${t.config.redisPrefix}`, template: 'manager' })]],
    SVC_BUSY: [['100 sign-ins at once', async () => {
      const answers = await Promise.all(Array.from({ length: 100 }, () => json('POST', '/api/session', undefined, signer)));
      const busy = answers.filter((r) => r.status === 503);
      for (const r of answers) if (r.status !== 503) assert.equal(r.status, 200, 'the others sign in');
      await Promise.all(answers.filter((r) => r !== busy[0]).map((r) => r.body?.cancel()));
      assert.ok(busy.length > 0, 'some sign-ins are refused while 2 are checked and 32 wait');
      return busy[0];
    }]],
    SVC_TOO_MANY_REQUESTS: [['sign-ins after 5 failures', async () => {
      // the 5th failure makes the next try wait 1 s, each further failure twice as long: a slow
      // machine that lets a wait pass meets the next, longer one
      for (let failures = 0; failures < 10; failures++) {
        const res = await json('POST', '/api/session', undefined, { name: signer.name, password: `wrong-${failures}` });
        if (res.status === 429) {
          assert.ok(failures >= 5, `refused after ${failures} failures`);
          return res;
        }
        assert.equal(res.status, 401);
        await res.body?.cancel();
      }
      return assert.fail('no sign-in was refused after 10 failures');
    }]],
    SVC_SANDBOX_NOT_RUNNING: [
      ['keep-awake on an asleep sandbox', async () => {
        await t.service.lifecycle.sleep(name, 'test');
        return call('POST', `/api/sandboxes/${name}/keep-awake`, { token: limited });
      }],
      ['files of an asleep sandbox', () => call('GET', files('', '/root'), { token: limited })],
    ],
  };

  /** Codes no client request can cause on purpose, and how each is pinned instead. */
  const notByRequest: Record<string, string> = {
    SVC_INTERNAL: 'a fault of the service: pinned by the catalogue check only',
    SVC_UPLOAD_INCOMPLETE: 'the client has gone when it happens (HTTP/1.1 cannot answer a body cut short): pinned by the catalogue check only',
    SVC_TOO_MANY_WAKES: 'app traffic at the edge, answered as a page: the real wake limit on Redis is checked below',
  };

  before(async () => {
    t = await startTestService({ filesMaxUpload: MAX_UPLOAD, managerImage: 'svc-no-such-image:none' });
    alice = await t.user('alice');
    bob = await t.user('bob');
    carol = await t.user('carol');
    carolName = (await t.service.store.users.get(carol.id))!.name;
    const created = await createUser(t.service.store, { name: `signer-${t.config.redisPrefix}` });
    signer = { name: created.user.name, password: created.password };
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-errors-test-'));
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path.join(tmp, 'id')]);
    for (const [label, set] of [['errs', (n: string) => { name = n; }], ['gone', (n: string) => { gone = n; }]] as const) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `${label}-${t.config.redisPrefix}`, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      set(res.body.name);
    }
    limited = await t.limitedToken(alice.id, name);
    await inSandbox([
      'mkdir -p /root/adir /root/mnt && printf hello > /root/small.txt && mkfifo /root/fifo && ln -s /etc /root/out',
      "printf '\\377\\376\\000' > /root/binary && head -c 1500000 /dev/zero | tr '\\0' a > /root/large.txt",
      'mount -t tmpfs none /root/mnt',
    ].join(' && '));
  });
  after(async () => {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
    await t?.close();
  });

  it('documents exactly the catalogue: every code once, with its status', () => {
    const documented = new Map<string, number>();
    for (const row of table) {
      assert.ok(!documented.has(row.code), `${row.code} twice in docs/api.md`);
      assert.ok(row.when.length > 10, `${row.code}: say what triggers it`);
      documented.set(row.code, row.status);
    }
    // a new catalogue code needs its row in docs/api.md (status, code, what triggers it) and a trigger below
    assert.deepEqual(Object.fromEntries([...documented].sort()), Object.fromEntries([...catalogue()].sort()), 'docs/api.md\'s error table and core/errors.ts differ');
  });

  it('declares the refusals before a route runs in the OpenAPI answers of every route that reads a body', async () => {
    const paths = (await t.api('GET', '/api/swagger/json', undefined)).body.paths as Record<string, Record<string, { requestBody?: unknown; responses: Record<string, unknown> }>>;
    let checked = 0;
    for (const [route, methods] of Object.entries(paths)) {
      for (const [method, op] of Object.entries(methods)) {
        if (!op.requestBody || route.endsWith('/files/content')) continue; // uploads take any content type, unbounded
        for (const status of ['413', '415']) assert.ok(op.responses[status], `${method.toUpperCase()} ${route} declares ${status}`);
        checked++;
      }
    }
    assert.ok(checked >= 8, `${checked} routes with a body`);
  });

  it('declares 503 (an engine that cannot be asked) on every route of a sandbox that asks its engine', async () => {
    const paths = (await t.api('GET', '/api/swagger/json', undefined)).body.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>;
    let checked = 0;
    for (const [route, methods] of Object.entries(paths)) {
      if (!route.startsWith('/api/sandboxes') || route.endsWith('/registry')) continue; // the registry's view asks no engine
      for (const [method, op] of Object.entries(methods)) {
        assert.ok(op.responses['503'], `${method.toUpperCase()} ${route} declares 503`);
        checked++;
      }
    }
    assert.ok(checked >= 20, `${checked} sandbox routes`);
  });

  it('has a real request for every code, or says why not', () => {
    for (const { code } of table) assert.ok((code in triggers) !== (code in notByRequest), `${code}: a trigger, or a reason there is none (not both)`);
    for (const code of Object.keys(triggers)) assert.ok(statusOf.has(code), `${code} is not in docs/api.md`);
  });

  for (const [code, cases] of Object.entries(triggers)) {
    for (const [trigger, send] of cases) {
      it(`${code}: ${trigger}`, async () => expectError(await send(), code, trigger));
    }
  }

  it('SVC_TOO_MANY_WAKES: the owner past the wake limit, with the seconds to the next hour', async () => {
    const redis = new Redis(t.config.redisUrl);
    try {
      const limits = new WakeLimits(redis, t.config.redisPrefix, () => 1);
      const owner = (await t.service.store.users.get(alice.id))!;
      await limits.take(owner);
      const err = await limits.take(owner).then(() => assert.fail('the second wake in the hour passes'), (e: unknown) => e);
      assert.ok(err instanceof errors.TooManyWakes);
      assert.equal(err.code, 'SVC_TOO_MANY_WAKES');
      assert.equal(err.statusCode, statusOf.get('SVC_TOO_MANY_WAKES'));
      assert.ok(err.retryAfter >= 1 && err.retryAfter <= 3600, `Retry-After ${err.retryAfter}`);
    } finally {
      redis.disconnect();
    }
  });
});
