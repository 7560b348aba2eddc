import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pack } from 'tar-stream';
import { enginePath } from '../../manager/docker-proxy.ts';
import { COMPOSE_BIN, docker, projectContainers, sleepers, startTool, type Tool } from './tool.ts';

/**
 * The management tool (spec 4.5) served against the host engine with the real compose v2 CLI:
 * Portainer's shapes and status codes, and the call sequences of its real clients.
 */
let tool: Tool;
let jwt: string;

before(async () => {
  assert.ok(fs.existsSync(COMPOSE_BIN), `compose v2 is missing at ${COMPOSE_BIN} (setup installs it)`);
  tool = await startTool();
  jwt = await tool.signIn();
});
after(async () => tool?.close());

function tarOf(files: Record<string, string>): Promise<Buffer> {
  const p = pack();
  for (const [name, text] of Object.entries(files)) p.entry({ name }, text);
  p.finalize();
  const chunks: Buffer[] = [];
  return new Promise((resolve, reject) => {
    p.on('data', (c) => chunks.push(c as Buffer));
    p.on('end', () => resolve(Buffer.concat(chunks)));
    p.on('error', reject);
  });
}

describe('status, sign-in and keys', () => {
  it('answers /api/status without a token and /api/system/version with one', async () => {
    const status = await tool.call('GET', '/api/status');
    assert.equal(status.status, 200);
    assert.equal(status.body.Version, '2.23.0');
    assert.match(status.body.InstanceID, /^[0-9a-f-]{36}$/);
    assert.equal((await tool.call('GET', '/api/system/version')).status, 401);
    const version = await tool.call('GET', '/api/system/version', { jwt });
    assert.equal(version.status, 200);
    assert.equal(version.body.ServerVersion, '2.23.0');
    assert.equal(version.body.ServerEdition, 'CE');
  });

  it('takes Username/Password in any case, and says 422 to a wrong password', async () => {
    const upper = await tool.call('POST', '/api/auth', { body: { Username: 'admin', Password: tool.password, Extra: 1 } });
    assert.equal(upper.status, 200);
    assert.match(upper.body.jwt, /^[\w-]+\.[\w-]+\.[\w-]+$/);
    const wrong = await tool.call('POST', '/api/auth', { body: { username: 'admin', password: 'not-it' } });
    assert.equal(wrong.status, 422);
    assert.deepEqual(wrong.body, { message: 'Invalid credentials', details: 'Unauthorized' });
    const missing = await tool.call('POST', '/api/auth', { body: { username: 'admin' } });
    assert.equal(missing.status, 400);
    assert.equal(typeof missing.body.message, 'string');
  });

  it('refuses a missing token, a forged one and one that signed out', async () => {
    assert.deepEqual((await tool.call('GET', '/api/stacks')).body, { message: 'A valid authorization token is missing', details: 'Unauthorized' });
    const [h, b] = jwt.split('.');
    assert.equal((await tool.call('GET', '/api/stacks', { jwt: `${h}.${b}.AAAA` })).status, 401);
    const own = await tool.signIn();
    assert.equal((await tool.call('GET', '/api/stacks', { jwt: own })).status, 200);
    assert.equal((await tool.call('POST', '/api/auth/logout', { jwt: own })).status, 204);
    assert.equal((await tool.call('GET', '/api/stacks', { jwt: own })).status, 401);
  });

  it('makes API keys with a JWT and the password, takes them in X-API-Key, and forgets revoked ones', async () => {
    const made = await tool.call('POST', '/api/users/1/tokens', { jwt, body: { password: tool.password, description: 'ci' } });
    assert.equal(made.status, 201);
    const key = made.body.rawAPIKey as string;
    assert.match(key, /^ptr_[A-Za-z0-9+/]{43}=$/);
    assert.equal(made.body.apiKey.description, 'ci');
    assert.equal(made.body.apiKey.digest, undefined);
    assert.equal((await tool.call('GET', '/api/endpoints', { key })).status, 200);
    assert.equal((await tool.call('GET', '/api/endpoints?X-API-Key=' + encodeURIComponent(key))).status, 200);
    // a key cannot make keys, and a wrong password makes none
    assert.equal((await tool.call('POST', '/api/users/1/tokens', { key, body: { password: tool.password, description: 'x' } })).status, 403);
    assert.equal((await tool.call('POST', '/api/users/1/tokens', { jwt, body: { password: 'wrong', description: 'x' } })).status, 403);
    assert.equal((await tool.call('POST', '/api/users/2/tokens', { jwt, body: { password: tool.password, description: 'x' } })).status, 403);
    const listed = await tool.call('GET', '/api/users/1/tokens', { jwt });
    assert.deepEqual(listed.body.map((k: { id: number }) => k.id), [made.body.apiKey.id]);
    assert.equal((await tool.call('DELETE', `/api/users/1/tokens/${made.body.apiKey.id}`, { jwt })).status, 204);
    const revoked = await tool.call('GET', '/api/endpoints', { key });
    assert.equal(revoked.status, 401);
    assert.deepEqual(revoked.body, { message: 'Invalid API key', details: 'Unauthorized' });
    assert.equal((await tool.call('GET', '/api/endpoints', { key: 'ptr_nothing' })).status, 401);
  });

  it('refuses the JWT of another tool, and slows down repeated wrong passwords', async () => {
    const other = await startTool();
    try {
      const foreign = await other.signIn();
      assert.equal((await tool.call('GET', '/api/stacks', { jwt: foreign })).status, 401);
      for (let i = 0; i < 3; i++) assert.equal((await other.call('POST', '/api/auth', { body: { username: 'admin', password: `wrong${i}` } })).status, 422);
      const slowed = await other.call('POST', '/api/auth', { body: { username: 'admin', password: other.password } });
      assert.equal(slowed.status, 429);
      const wait = Number(slowed.headers.get('retry-after'));
      assert.ok(wait >= 1 && wait <= 10, `Retry-After ${wait}`);
      // after the wait the right password works again
      const deadline = Date.now() + 30_000;
      let r = slowed;
      while (r.status === 429 && Date.now() < deadline) {
        await new Promise((res) => setTimeout(res, Number(r.headers.get('retry-after')) * 1000));
        r = await other.call('POST', '/api/auth', { body: { username: 'admin', password: other.password } });
      }
      assert.equal(r.status, 200);
    } finally {
      await other.close();
    }
  });
});

describe('environments', () => {
  it('lists the local engine as Id 1 with the total headers', async () => {
    const r = await tool.call('GET', '/api/endpoints', { jwt });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-total-count'), '1');
    assert.deepEqual(r.body.map((e: { Id: number; Name: string; Type: number; Status: number }) => [e.Id, e.Name, e.Type, e.Status]), [[1, 'local', 1, 1]]);
  });

  it('adds one from a multipart form, refuses a duplicate name and a remote type', async () => {
    const form = () => { const f = new FormData(); f.set('Name', 'second'); f.set('EndpointCreationType', '1'); return f; };
    const made = await tool.call('POST', '/api/endpoints', { jwt, body: form() });
    assert.equal(made.status, 200);
    assert.equal(made.body.Name, 'second');
    assert.equal((await tool.call('GET', `/api/endpoints/${made.body.Id}`, { jwt })).body.Name, 'second');
    const dup = await tool.call('POST', '/api/endpoints', { jwt, body: form() });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.message, 'Name is not unique');
    const agent = new FormData();
    agent.set('Name', 'agent');
    agent.set('EndpointCreationType', '2');
    assert.equal((await tool.call('POST', '/api/endpoints', { jwt, body: agent })).status, 400);
    assert.equal((await tool.call('GET', '/api/endpoints/77', { jwt })).status, 404);
  });
});

describe('stacks', () => {
  it("replays the Terraform provider's sequence: list, create, finalize, read, file, delete", async () => {
    const name = `${tool.prefix}tf`;
    const headers = { 'content-type': 'application/json' };
    assert.equal((await tool.call('GET', '/api/stacks', { jwt, headers })).status, 200);
    const text = sleepers('web');
    const created = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', {
      jwt, body: { name, stackFileContent: text, env: [{ name: 'TAG', value: 'v1' }], fromAppTemplate: false, registries: [] },
    });
    assert.equal(created.status, 200, created.text);
    const id = created.body.Id as number;
    assert.equal(typeof id, 'number');
    const finalized = await tool.call('PUT', `/api/stacks/${id}?endpointId=1`, {
      jwt, body: { env: [{ name: 'TAG', value: 'v1' }], stackFileContent: text, prune: false, pullImage: false, registries: [] },
    });
    assert.equal(finalized.status, 200, finalized.text);
    const read = await tool.call('GET', `/api/stacks/${id}`, { jwt, headers });
    assert.equal(read.status, 200);
    assert.deepEqual(
      { Name: read.body.Name, Status: read.body.Status, Type: read.body.Type, SwarmId: read.body.SwarmId, EndpointId: read.body.EndpointId, Env: read.body.Env, AutoUpdate: read.body.AutoUpdate, Option: read.body.Option, GitConfig: read.body.GitConfig },
      { Name: name, Status: 1, Type: 2, SwarmId: '', EndpointId: 1, Env: [{ name: 'TAG', value: 'v1' }], AutoUpdate: null, Option: null, GitConfig: null },
    );
    assert.ok(read.body.UpdateDate > 0 && read.body.CreationDate > 0);
    const file = await tool.call('GET', `/api/stacks/${id}/file`, { jwt, headers });
    assert.deepEqual(file.body, { StackFileContent: text });
    const running = await projectContainers(name);
    assert.deepEqual(running.map((c) => [c.name, c.state]), [[`${name}-web-1`, 'running']]);
    assert.equal(await docker(['inspect', '-f', '{{range .Config.Env}}{{println .}}{{end}}', running[0]!.id]).then((e) => e.split('\n').includes('TAG=v1')), true);
    const envFile = path.join(tool.dataDir, 'compose', String(id), 'stack.env');
    assert.equal(fs.statSync(envFile).mode & 0o777, 0o600);
    assert.equal(fs.readFileSync(envFile, 'utf8'), 'TAG=v1\n');
    const gone = await tool.call('DELETE', `/api/stacks/${id}?endpointId=1`, { jwt, headers });
    assert.equal(gone.status, 204);
    assert.deepEqual(await projectContainers(name), []);
    assert.equal((await tool.call('GET', `/api/stacks/${id}`, { jwt })).status, 404);
  });

  it('takes the older POST /api/stacks?type=2&method=string in PascalCase, and DELETE without endpointId', async () => {
    const name = `${tool.prefix}psu`;
    const made = await tool.call('POST', '/api/stacks?type=2&method=string&endpointId=1', { jwt, body: { Name: name, StackFileContent: sleepers('a'), Env: [] } });
    assert.equal(made.status, 200, made.text);
    assert.equal((await tool.call('POST', '/api/stacks?type=1&method=string&endpointId=1', { jwt, body: { Name: `${name}x`, StackFileContent: sleepers('a') } })).status, 400);
    // psu sends an extra string Id: ignored
    const updated = await tool.call('PUT', `/api/stacks/${made.body.Id}?endpointId=1`, { jwt, body: { Id: String(made.body.Id), StackFileContent: sleepers('a'), Env: [{ name: 'TAG', value: 'v2' }], Prune: false } });
    assert.equal(updated.status, 200, updated.text);
    assert.deepEqual(updated.body.Env, [{ name: 'TAG', value: 'v2' }]);
    assert.equal((await tool.call('DELETE', `/api/stacks/${made.body.Id}`, { jwt })).status, 204);
    assert.deepEqual(await projectContainers(name), []);
  });

  it('refuses a name that normalises to an existing one (409), and asks for endpointId', async () => {
    const name = `${tool.prefix}dup`;
    const made = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name, stackFileContent: sleepers('a') } });
    assert.equal(made.status, 200, made.text);
    const dup = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name: `${name.toUpperCase()}!`, stackFileContent: sleepers('b') } });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.message, `A stack with the normalized name '${name}' already exists`);
    assert.equal((await tool.call('POST', '/api/stacks/create/standalone/string', { jwt, body: { name: `${name}2`, stackFileContent: sleepers('a') } })).body.message, 'Invalid query parameter: endpointId');
    assert.equal((await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=9', { jwt, body: { name: `${name}2`, stackFileContent: sleepers('a') } })).status, 404);
    assert.equal((await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name: '!!!', stackFileContent: sleepers('a') } })).status, 400);
    assert.deepEqual((await projectContainers(name)).map((c) => c.name), [`${name}-a-1`]);
    assert.equal((await tool.call('DELETE', `/api/stacks/${made.body.Id}`, { jwt })).status, 204);
  });

  it('prunes services absent from the new text only with prune, and stops and starts a stack', async () => {
    const name = `${tool.prefix}prune`;
    const made = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name, stackFileContent: sleepers('a', 'b') } });
    assert.equal(made.status, 200, made.text);
    const id = made.body.Id;
    assert.equal((await tool.call('PUT', `/api/stacks/${id}?endpointId=1`, { jwt, body: { stackFileContent: sleepers('a'), prune: false } })).status, 200);
    assert.deepEqual((await projectContainers(name)).map((c) => c.name), [`${name}-a-1`, `${name}-b-1`]);
    assert.equal((await tool.call('PUT', `/api/stacks/${id}?endpointId=1`, { jwt, body: { stackFileContent: sleepers('a'), prune: true } })).status, 200);
    assert.deepEqual((await projectContainers(name)).map((c) => c.name), [`${name}-a-1`]);

    const stopped = await tool.call('POST', `/api/stacks/${id}/stop?endpointId=1`, { jwt, headers: { 'content-type': 'application/json' } });
    assert.equal(stopped.status, 200, stopped.text);
    assert.equal(stopped.body.Status, 2);
    assert.deepEqual((await projectContainers(name)).map((c) => c.state), ['exited']);
    assert.equal((await tool.call('POST', `/api/stacks/${id}/stop?endpointId=1`, { jwt })).status, 400);
    const started = await tool.call('POST', `/api/stacks/${id}/start?endpointId=1`, { jwt });
    assert.equal(started.body.Status, 1);
    assert.deepEqual((await projectContainers(name)).map((c) => c.state), ['running']);
    assert.equal((await tool.call('DELETE', `/api/stacks/${id}`, { jwt })).status, 204);
  });

  it("answers with compose's error and leaves the running stack alone: not YAML, a missing image, a failed pull", async () => {
    const name = `${tool.prefix}bad`;
    const good = sleepers('web');
    const made = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name, stackFileContent: good } });
    assert.equal(made.status, 200, made.text);
    const id = made.body.Id;
    const [before] = await projectContainers(name);
    const attempts = [
      { stackFileContent: 'services: [this is: not: yaml' },
      { stackFileContent: 'services:\n  web:\n    image: svc-fixture-missing-image:nope\n' },
      { stackFileContent: good.replace('3600', '3601'), pullImage: true }, // the fixture image is local: pull fails
      { stackFileContent: good, env: [{ name: 'BAD NAME', value: 'x' }] },
    ];
    for (const body of attempts) {
      const r = await tool.call('PUT', `/api/stacks/${id}?endpointId=1`, { jwt, body });
      assert.ok(r.status === 500 || r.status === 400, `${r.status} ${r.text}`);
      assert.equal(typeof r.body.message, 'string');
      assert.ok(r.body.message.length > 0 && r.body.details.length > 0);
      assert.deepEqual(await projectContainers(name), [before], `after ${JSON.stringify(body).slice(0, 60)}`);
      assert.deepEqual((await tool.call('GET', `/api/stacks/${id}/file`, { jwt })).body, { StackFileContent: good });
    }
    // a new stack naming a missing image is not kept, and its name stays free
    const missing = await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name: `${name}img`, stackFileContent: 'services:\n  web:\n    image: svc-fixture-missing-image:nope\n' } });
    assert.equal(missing.status, 500);
    assert.match(missing.body.details, /web +(Pulling|Error)/); // compose's own words
    assert.ok(!(await tool.call('GET', '/api/stacks', { jwt })).body.some((s: { Name: string }) => s.Name === `${name}img`));
    assert.equal((await tool.call('DELETE', `/api/stacks/${id}`, { jwt })).status, 204);
  });

  it('lists a project deployed outside the tool, which cannot be edited or taken', async () => {
    const name = `${tool.prefix}ext`;
    const dir = fs.mkdtempSync(path.join(tool.dataDir, 'ext-'));
    fs.writeFileSync(path.join(dir, 'compose.yml'), sleepers('x'));
    await docker(['compose', '-p', name, '-f', path.join(dir, 'compose.yml'), 'up', '-d']);
    const listed = (await tool.call('GET', '/api/stacks', { jwt })).body.find((s: { Name: string }) => s.Name === name);
    assert.ok(listed, 'external project listed');
    assert.equal(listed.Id, 0);
    assert.equal(listed.Status, 1);
    assert.equal((await tool.call('PUT', '/api/stacks/0?endpointId=1', { jwt, body: { stackFileContent: sleepers('y') } })).status, 403);
    assert.equal((await tool.call('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, body: { name, stackFileContent: sleepers('y') } })).status, 409);
    assert.deepEqual((await projectContainers(name)).map((c) => c.name), [`${name}-x-1`]);
    const filtered = await tool.call('GET', `/api/stacks?filters=${encodeURIComponent('{"EndpointID":5}')}`, { jwt });
    assert.deepEqual(filtered.body, []);
  });
});

describe('docker pass-through', () => {
  it('lists containers as a dashboard asks (X-API-Key), and refuses unknown environments and escaping paths', async () => {
    const key = (await tool.call('POST', '/api/users/1/tokens', { jwt, body: { password: tool.password, description: 'dash' } })).body.rawAPIKey;
    const endpoints = await tool.call('GET', '/api/endpoints', { key });
    const id = endpoints.body[0].Id;
    // a container of this test's own, so the list cannot pass empty (compose's label: the tool's close removes it)
    const mine = `${tool.prefix}-listed`;
    await docker(['run', '-d', '--init', '--name', mine, '--label', `com.docker.compose.project=${mine}`, 'svc-fixture-busybox', 'sleep', '3600']);
    const list = await tool.call('GET', `/api/endpoints/${id}/docker/containers/json?all=1`, { key });
    assert.equal(list.status, 200);
    const listed = (list.body as Array<{ Names: string[]; State: string }>).find((c) => c.Names.includes(`/${mine}`));
    assert.equal(listed?.State, 'running', 'the container made for this test, as the engine runs it');
    assert.ok(list.body.every((c: { State: unknown }) => typeof c.State === 'string'), 'every entry has its state');
    await docker(['rm', '-f', mine]);
    assert.equal((await tool.call('GET', '/api/endpoints/42/docker/containers/json', { key })).status, 404);
    assert.equal((await tool.call('GET', '/api/endpoints/1/docker/containers/nope-none/json', { key })).status, 404);
    const escape = await fetch(`${tool.url}/api/endpoints/1/docker/%2e%2e/%2e%2e/status`, { headers: { 'x-api-key': key } });
    assert.equal(escape.status, 400);
    assert.equal((await tool.call('GET', '/api/endpoints/1/docker/containers/json')).status, 401);
  });

  it('streams a build: a tar goes in, JSON lines come out ending in the tagged line or an error line', async () => {
    const tag = `${tool.prefix}img:1`;
    const tar = await tarOf({ Dockerfile: 'FROM svc-fixture-busybox\nRUN echo built > /built\n' });
    const ok = await tool.call('POST', `/api/endpoints/1/docker/build?t=${encodeURIComponent(tag)}`, { jwt, body: new Uint8Array(tar), headers: { 'content-type': 'application/x-tar' } });
    assert.equal(ok.status, 200);
    const lines = ok.text.trim().split('\n').map((l) => JSON.parse(l));
    assert.match(lines.at(-1).stream, new RegExp(`Successfully tagged ${tag}`));
    assert.equal(await docker(['run', '--rm', '--network', 'none', tag, 'cat', '/built']), 'built');

    const broken = await tarOf({ Dockerfile: 'FROM svc-fixture-busybox\nRUN exit 3\n' });
    const failed = await tool.call('POST', `/api/endpoints/1/docker/build?t=${encodeURIComponent(tag)}`, { jwt, body: new Uint8Array(broken), headers: { 'content-type': 'application/x-tar' } });
    const last = JSON.parse(failed.text.trim().split('\n').at(-1)!);
    assert.equal(typeof last.error, 'string');

    const notTar = await tool.call('POST', `/api/endpoints/1/docker/build?t=${encodeURIComponent(tag)}`, { jwt, body: 'this is not a tar', headers: { 'content-type': 'application/x-tar' } });
    assert.ok(notTar.status >= 400 || /"error"/.test(notTar.text), `${notTar.status} ${notTar.text}`);
  });

  it('keeps the engine path under docker/ and strips the tool credentials from the query', () => {
    assert.equal(enginePath('/api/endpoints/1/docker/containers/json?all=1&token=abc&X-API-Key=k', 1), '/containers/json?all=1');
    assert.equal(enginePath('/api/endpoints/3/docker/images/a%2Fb/json', 3), '/images/a%2Fb/json');
    for (const bad of ['/api/endpoints/1/docker/../status', '/api/endpoints/1/docker/x/%2E%2E/%2e%2e/y', '/api/endpoints/1/docker/a/..%5C..', '/api/endpoints/1/docker/%zz']) {
      assert.throws(() => enginePath(bad, 1), /Invalid path/, bad);
    }
  });
});
