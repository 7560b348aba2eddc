import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';

/** Who may do what (spec 5), and bad input that must change nothing (design.md, Errors). */
describe('sandbox access and bad input', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let admin: { id: string; token: string };
  let limited: string;
  let name: string;

  const names = async (token: string) => (await t.api('GET', '/api/sandboxes', token)).body.map((r: { name: string }) => r.name);

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    bob = await t.user('bob');
    admin = await t.user('root', { admin: true });
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `acc-${t.config.redisPrefix}` });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    limited = await t.limitedToken(alice.id, name);
  });
  after(async () => t?.close());

  it('needs a valid, unrevoked bearer token', async () => {
    for (const token of [undefined, 'nope', 'svc_' + 'x'.repeat(43)]) {
      const res = await t.api('GET', '/api/sandboxes', token);
      assert.equal(res.status, 401);
      assert.equal(res.body.error.code, 'SVC_UNAUTHENTICATED');
    }
    const created = await t.api('POST', '/api/me/tokens', alice.token, { name: 'temp' });
    assert.equal(created.status, 201);
    assert.match(created.body.token, /^svc_/);
    assert.equal((await t.api('GET', '/api/me', created.body.token)).status, 200);
    assert.equal((await t.api('DELETE', `/api/me/tokens/${created.body.record.id}`, alice.token)).status, 200);
    assert.equal((await t.api('GET', '/api/me', created.body.token)).status, 401, 'a revoked token is refused');
    const listed = (await t.api('GET', '/api/me/tokens', alice.token)).body;
    assert.ok(listed.every((tok: Record<string, unknown>) => !('hash' in tok) && !('token' in tok)), 'token values and hashes are never listed');
  });

  it('refuses bad input with the right error and changes nothing', async () => {
    const before = await names(alice.token);
    const cases: Array<[unknown, number, string]> = [
      [{ name: 'Bad_Name!' }, 400, 'SVC_BAD_SANDBOX_NAME'],
      [{ name: 'ok-name', colour: 'blue' }, 400, 'SVC_BAD_REQUEST'],
      [{ name: 'ok-name', idle_timeout: '5x' }, 400, 'SVC_BAD_DURATION'],
      [{ name: 'ok-name', deep_sleep_after: '-1d' }, 400, 'SVC_BAD_DURATION'],
      [{ name: 'ok-name', template: 'portainer' }, 400, 'SVC_BAD_REQUEST'],
      [{ name }, 409, 'SVC_NAME_TAKEN'],
      ['{"name": ', 400, 'SVC_BAD_REQUEST'],
      [{ name: 42 }, 400, 'SVC_BAD_REQUEST'],
    ];
    for (const [body, status, code] of cases) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, body);
      // the error only: a record that came back by mistake carries an engine client key, never to be printed
      assert.equal(res.status, status, `${JSON.stringify(body)} → ${res.status} ${JSON.stringify(res.body?.error ?? '(a record)')}`);
      assert.equal(res.body.error.code, code, JSON.stringify(body));
      assert.ok(res.body.error.message.length > 10);
    }
    for (const [body, code] of [[{ idle_timeout: '1.5h' }, 'SVC_BAD_DURATION'], [{ idle_timeout: '1h', deep_sleep_after: 'soon' }, 'SVC_BAD_DURATION'], [{}, 'SVC_BAD_REQUEST'], [{ idle: '1h' }, 'SVC_BAD_REQUEST']] as const) {
      const res = await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(res.body.error.code, code);
    }
    const after = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
    assert.equal(after.idle_timeout, '30m', 'a refused PATCH changed nothing, not even its valid half');
    assert.deepEqual(await names(alice.token), before);
  });

  it("hides another user's sandbox behind 404", async () => {
    for (const [method, path, body] of [
      ['GET', `/api/sandboxes/${name}`], ['POST', `/api/sandboxes/${name}/start`], ['POST', `/api/sandboxes/${name}/keep-awake`],
      ['PATCH', `/api/sandboxes/${name}`, { idle_timeout: '1m' }], ['DELETE', `/api/sandboxes/${name}`], ['POST', `/api/sandboxes/${name}/engine-access`],
    ] as const) {
      const res = await t.api(method, path, bob.token, body);
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.equal(res.body.error.code, 'SVC_SANDBOX_NOT_FOUND');
    }
    assert.deepEqual(await names(bob.token), []);
  });

  it('keeps a limited token inside its sandbox', async () => {
    assert.deepEqual(await names(limited), [name]);
    assert.equal((await t.api('GET', '/api/me', limited)).body.sandbox, name);
    assert.equal((await t.api('GET', `/api/sandboxes/${name}`, limited)).status, 200);
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/keep-awake`, limited)).status, 200);
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/start`, limited)).status, 200);
    assert.equal((await t.api('POST', '/api/sandboxes', limited, { name: 'other' })).status, 403);
    assert.equal((await t.api('DELETE', `/api/sandboxes/${name}`, limited)).status, 403);
    assert.equal((await t.api('PATCH', `/api/sandboxes/${name}`, limited, { idle_timeout: '1m' })).status, 403);
    assert.equal((await t.api('POST', '/api/me/tokens', limited, {})).status, 403, 'a limited token cannot mint a full one');
    const stranger = await t.api('GET', '/api/sandboxes/svc-someone-else', limited);
    assert.equal(stranger.status, 404);
  });

  it('lets the owner or an admin change settings; never is stored as the spec says', async () => {
    const off = await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: 'off', deep_sleep_after: '0' });
    assert.equal(off.status, 200);
    assert.equal(off.body.idle_timeout, '87600h');
    assert.equal(off.body.deep_sleep_after, 'off');
    const byAdmin = await t.api('PATCH', `/api/sandboxes/${name}`, admin.token, { idle_timeout: '45m' });
    assert.equal(byAdmin.status, 200);
    assert.equal(byAdmin.body.idle_timeout, '45m');
    assert.ok(Date.parse(byAdmin.body.stops_at) - Date.now() <= 45 * 60_000, 'the new timeout applies to the running session');
  });

  it('reports needs-certs for a record without engine certificates, and the owner enables access', async () => {
    const record = (await t.service.store.sandboxes.get(name))!;
    const { certs: _old, ...legacy } = record;
    await t.service.store.sandboxes.put(legacy);
    const before = (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
    assert.equal(before.engine_access.state, 'needs-certs');
    assert.ok(!('client_key' in before), 'no client key without certificates');
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/engine-access`, limited)).status, 403);

    const enabled = await t.api('POST', `/api/sandboxes/${name}/engine-access`, alice.token);
    assert.equal(enabled.status, 200, answerOf(enabled));
    assert.equal(enabled.body.engine_access.state, 'ready');
    assert.equal(enabled.body.status, 'running');
    const state = await t.service.lifecycle.status(name);
    const cli = new EngineCli(enabled.body.engine_access.host, state.address!, 2376, enabled.body);
    try {
      assert.match((await cli.docker(['version', '--format', '{{.Server.Version}}'])).stdout, /\d+\.\d+/);
    } finally {
      cli.dispose();
    }
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/engine-access`, alice.token)).status, 409);
  });

  it('answers 410 Gone for an archived sandbox on every route of a sandbox', async () => {
    const gone = (await t.api('POST', '/api/sandboxes', alice.token, { name: `gone-${t.config.redisPrefix}` })).body.name;
    assert.equal((await t.api('DELETE', `/api/sandboxes/${gone}`, alice.token)).status, 200);
    const paths = (await t.api('GET', '/api/swagger/json', undefined)).body.paths as Record<string, Record<string, unknown>>;
    // Valid bodies and queries, so that nothing but the sandbox's state can refuse the request.
    const bodies: Record<string, unknown> = { patch: { idle_timeout: '1h' }, 'post /files/mkdir': { path: '/root/x' }, 'post /exec': { command: 'true' }, 'post /exec/stream': { command: 'true' }, 'post /fork': { name: 'gone-fork' } };
    let checked = 0;
    for (const [route, methods] of Object.entries(paths)) {
      if (!route.startsWith('/api/sandboxes/{name}')) continue; // a sandbox's routes (a secret's are {name} too)
      for (const method of Object.keys(methods)) {
        const params: Record<string, string> = { name: gone, id: '0123456789ab', action: 'restart' };
        const filled = route.replace(/\{(\w+)\}/g, (_, p: string) => params[p] ?? assert.fail(`no sample value for {${p}} in ${route}`));
        const url = `${t.url}${filled}${route.includes('/files') ? '?path=/root/x' : ''}`;
        const body = method === 'put' ? 'bytes' : JSON.stringify(bodies[method] ?? bodies[`${method} ${route.slice(route.indexOf('}') + 1)}`] ?? {});
        const bodyless = method === 'get' || method === 'delete';
        const res = await fetch(url, {
          method: method.toUpperCase(),
          headers: { authorization: `Bearer ${alice.token}`, ...(bodyless ? {} : { 'content-type': method === 'put' ? 'application/octet-stream' : 'application/json' }) },
          body: bodyless ? undefined : body,
        });
        const answer = await res.json() as { error?: { code: string } };
        assert.equal(res.status, 410, `${method.toUpperCase()} ${route}: ${JSON.stringify(answer)}`);
        assert.equal(answer.error?.code, 'SVC_SANDBOX_ARCHIVED');
        checked++;
      }
    }
    assert.ok(checked >= 14, `${checked} routes checked`);
  });

  it('documents every route in the OpenAPI document, served without a token', async () => {
    const res = await t.api('GET', '/api/swagger/json', undefined);
    assert.equal(res.status, 200);
    for (const path of ['/api/sandboxes', '/api/sandboxes/{name}', '/api/sandboxes/{name}/start', '/api/sandboxes/{name}/keep-awake', '/api/me']) {
      assert.ok(res.body.paths[path], path);
    }
    for (const [path, methods] of Object.entries(res.body.paths as Record<string, Record<string, { responses: object }>>)) {
      for (const [method, op] of Object.entries(methods)) assert.ok(op.responses && Object.keys(op.responses).length > 0, `${method} ${path} has response schemas`);
    }
  });
});
