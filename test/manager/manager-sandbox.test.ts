import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER } from '../../edge/index.ts';
import { innerEngine } from '../../lifecycle/runtime/inner-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

interface CurlReply {
  status: number;
  head: string;
  text: string;
  body: any;
}

/**
 * A real manager sandbox (template "manager") behind the real edge: every row of spec 4.5 with
 * curl, the call sequences of Portainer's real clients replayed, and the tool's traffic waking
 * the sandbox.
 */
describe('a manager sandbox through the edge', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let name: string;
  let port: number;
  let dir: string;
  let ca: string;
  let managerUrl: string;
  let password: string;
  let jwt: string;

  const host = (url: string) => new URL(url).hostname;
  /** curl as a user runs it: the edge's CA, the tool's address resolved to this machine. */
  const curl = async (url: string, args: string[] = []): Promise<CurlReply> => {
    const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '120', '--cacert', ca, '--resolve', `${host(url)}:${port}:127.0.0.1`, ...args, url], { maxBuffer: 32 * 1024 * 1024 });
    // past any interim head (curl sends Expect: 100-continue with a large body)
    let rest = stdout;
    while (/^HTTP\/[\d.]+ 1\d\d/.test(rest)) rest = rest.slice(rest.indexOf('\r\n\r\n') + 4);
    const at = rest.indexOf('\r\n\r\n');
    const head = rest.slice(0, at).toLowerCase();
    const text = rest.slice(at + 4);
    let body: unknown = text;
    try { body = JSON.parse(text); } catch { /* not JSON */ }
    return { status: Number(head.split(' ')[1]), head, text, body };
  };
  const tool = (method: string, route: string, opts: { jwt?: string; key?: string; json?: unknown; args?: string[] } = {}) =>
    curl(managerUrl + route, [
      '-X', method,
      ...(opts.jwt ? ['-H', `Authorization: Bearer ${opts.jwt}`] : []),
      ...(opts.key ? ['-H', `X-API-Key: ${opts.key}`] : []),
      ...(opts.json !== undefined ? ['-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(opts.json)] : []),
      ...(opts.args ?? []),
    ]);
  const record = async () => (await t.api('GET', `/api/sandboxes/${name}`, alice.token)).body;
  const tarOfFixture = async () => {
    const file = path.join(dir, 'context.tar');
    await run('tar', ['-C', FIXTURE, '-cf', file, 'Dockerfile', '.build/rootfs']);
    return file;
  };

  before(async () => {
    t = await startTestService(process.env.SVC_MANAGER_IMAGE ? { managerImage: process.env.SVC_MANAGER_IMAGE } : {});
    port = t.config.httpsPort;
    alice = await t.user('alice');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-manager-e2e-'));
    ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `mgr-${t.config.redisPrefix}`, template: 'manager', idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    managerUrl = res.body.extras.manager_url;
    password = res.body.extras.manager_password;
  });
  after(async () => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
  });

  it('creates the sandbox with the tool at its own address and a password of its own (spec 2.1)', async () => {
    assert.equal(managerUrl, `https://${name}-manager.${t.config.domain}:${port}`);
    // assert.ok, never equal or match: a failure would print the password
    assert.ok(/^[\w-]{24}$/.test(password), 'a password of 24 characters');
    const r = await record();
    assert.equal(r.template, 'manager');
    assert.ok(r.tunnel_urls.includes(managerUrl));
    assert.ok(r.extras.manager_password === password, 'the record shows the password');
    const stored = await t.service.store.sandboxes.get(name);
    assert.ok(stored?.manager_password === password, 'the store keeps it');
    const status = await tool('GET', '/api/status');
    assert.equal(status.status, 200);
    assert.match(status.head, /content-type: application\/json/);
    assert.equal(status.body.Version, '2.23.0');
  });

  it('signs in as admin with the password (POST /api/auth), and refuses a wrong one with 422', async () => {
    const ok = await tool('POST', '/api/auth', { json: { username: 'admin', password } });
    assert.equal(ok.status, 200);
    jwt = ok.body.jwt;
    assert.equal(typeof jwt, 'string');
    const wrong = await tool('POST', '/api/auth', { json: { username: 'admin', password: 'wrong' } });
    assert.equal(wrong.status, 422);
    assert.equal(wrong.body.message, 'Invalid credentials');
  });

  it('lists environments (GET /api/endpoints) and adds one from a multipart form (POST /api/endpoints)', async () => {
    const list = await tool('GET', '/api/endpoints', { jwt });
    assert.deepEqual(list.body.map((e: { Id: number; Name: string }) => [e.Id, e.Name]), [[1, 'local']]);
    const made = await tool('POST', '/api/endpoints', { jwt, args: ['-F', 'Name=second', '-F', 'EndpointCreationType=1'] });
    assert.equal(made.status, 200, made.text);
    assert.equal(made.body.Name, 'second');
    assert.equal((await tool('GET', '/api/endpoints/99/docker/containers/json', { jwt })).status, 404);
  });

  it('builds an image from a tar (docker/build?t=), streaming JSON lines that end in the tagged line', async () => {
    const tar = await tarOfFixture();
    const built = await tool('POST', '/api/endpoints/1/docker/build?t=busybox-app:1', { jwt, args: ['-H', 'Content-Type: application/x-tar', '--data-binary', `@${tar}`] });
    assert.equal(built.status, 200, built.text.slice(0, 300));
    const lines = built.text.trim().split('\n').map((l) => JSON.parse(l));
    assert.match(lines.at(-1).stream, /Successfully tagged busybox-app:1/);
    const bad = path.join(dir, 'bad.tar');
    await run('sh', ['-c', `mkdir -p "${dir}/bad" && printf 'FROM busybox-app:1\\nRUN exit 7\\n' > "${dir}/bad/Dockerfile" && tar -C "${dir}/bad" -cf "${bad}" Dockerfile`]);
    const failed = await tool('POST', '/api/endpoints/1/docker/build?t=broken:1', { jwt, args: ['-H', 'Content-Type: application/x-tar', '--data-binary', `@${bad}`] });
    assert.equal(typeof JSON.parse(failed.text.trim().split('\n').at(-1)!).error, 'string');
  });

  it('deploys a stack (create/standalone/string) that answers at its spec 4.3 address, lists and updates it', async () => {
    const compose = (text: string) => `services:\n  web:\n    image: busybox-app:1\n    init: true\n    restart: unless-stopped\n    ports: ["8080:8080"]\n    command: ["sh", "-c", "mkdir -p /www && echo ${text}-$$TAG > /www/index.html && exec httpd -f -p 8080 -h /www"]\n    environment:\n      TAG: \${TAG}\n`;
    const made = await tool('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, json: { name: 'shop', stackFileContent: compose('hello'), env: [{ name: 'TAG', value: 'v1' }] } });
    assert.equal(made.status, 200, made.text);
    const id = made.body.Id;
    const short = name.slice('svc-'.length);
    const appUrl = `https://${short}-shop-shop-web-1-port8080.${t.config.domain}:${port}/`;
    await eventually(async () => /hello-v1/.test((await curl(appUrl)).text), 'the stack at its app address', 60_000, 500);
    const list = await tool('GET', '/api/stacks', { jwt });
    assert.deepEqual(list.body.filter((s: { Id: number }) => s.Id > 0).map((s: { Id: number; Name: string }) => [s.Id, s.Name]), [[id, 'shop']]);
    assert.ok(list.body.some((s: { Name: string; Id: number }) => s.Name === 'manager' && s.Id === 0), "the sandbox's own manager project is listed, not editable");
    const updated = await tool('PUT', `/api/stacks/${id}?endpointId=1`, { jwt, json: { stackFileContent: compose('again'), env: [{ name: 'TAG', value: 'v2' }], prune: true, pullImage: false } });
    assert.equal(updated.status, 200, updated.text);
    await eventually(async () => /again-v2/.test((await curl(appUrl)).text), 'the updated stack', 60_000, 500);
    const broken = await tool('PUT', `/api/stacks/${id}?endpointId=1`, { jwt, json: { stackFileContent: 'services: [broken', prune: true } });
    assert.equal(broken.status, 500);
    assert.match((await curl(appUrl)).text, /again-v2/, 'a failed update leaves the app running');
    assert.equal((await tool('PUT', '/api/stacks/0?endpointId=1', { jwt, json: { stackFileContent: compose('x') } })).status, 403);
  });

  it('passes engine calls through: containers, logs, restart, image pull and delete', async () => {
    const list = await tool('GET', '/api/endpoints/1/docker/containers/json', { jwt });
    const names = list.body.flatMap((c: { Names: string[] }) => c.Names);
    assert.ok(names.includes('/shop-web-1') && names.includes('/manager-manager-1'), names.join());
    // docker 26 in the sandbox now and then answers a logs call with an empty body (Content-Length: 0,
    // straight from the engine): ask again rather than read that as the tool's fault
    const logs = await eventually(async () => {
      const r = await tool('GET', '/api/endpoints/1/docker/containers/manager-manager-1/logs?stdout=1&stderr=1&tail=5', { jwt });
      assert.equal(r.status, 200);
      assert.match(r.head, /content-type: application\/vnd.docker.multiplexed-stream/);
      return /"msg":"request"/.test(r.text) ? r : null;
    }, 'the last log lines of the tool', 20_000, 500);
    assert.ok(logs.text.split('\n').filter(Boolean).length <= 5);
    assert.equal((await tool('POST', '/api/endpoints/1/docker/containers/shop-web-1/restart', { jwt })).status, 204);
    // no registry answers here: the engine's own error comes back through the tool, X-Registry-Auth and all
    const pull = await tool('POST', '/api/endpoints/1/docker/images/create?fromImage=registry.invalid/none&tag=1', { jwt, args: ['-H', `X-Registry-Auth: ${Buffer.from('{}').toString('base64')}`] });
    assert.ok(pull.status >= 400 || /error/i.test(pull.text), pull.text.slice(0, 200));
    assert.equal((await tool('POST', '/api/endpoints/1/docker/images/busybox-app:1/tag?repo=busybox-app&tag=spare', { jwt })).status, 201);
    const removed = await tool('DELETE', '/api/endpoints/1/docker/images/busybox-app:spare', { jwt });
    assert.equal(removed.status, 200);
    assert.deepEqual(removed.body, [{ Untagged: 'busybox-app:spare' }]);
    const escape = await tool('GET', '/api/endpoints/1/docker/../../status', { jwt, args: ['--path-as-is'] });
    assert.equal(escape.status, 400);
  });

  it("replays the Terraform provider's calls, the CI action's (X-API-Key) and a dashboard's", async () => {
    // Terraform: list, create, finalize with PUT, read, file, delete
    const tfText = 'services:\n  tf:\n    image: busybox-app:1\n    command: ["sleep", "3600"]\n    init: true\n';
    assert.equal((await tool('GET', '/api/stacks', { jwt })).status, 200);
    const made = await tool('POST', '/api/stacks/create/standalone/string?endpointId=1', { jwt, json: { name: 'tf', stackFileContent: tfText, env: [], fromAppTemplate: false, registries: [] } });
    assert.equal(made.status, 200, made.text);
    assert.equal((await tool('PUT', `/api/stacks/${made.body.Id}?endpointId=1`, { jwt, json: { env: [], stackFileContent: tfText, prune: false, pullImage: false, registries: [] } })).status, 200);
    const read = await tool('GET', `/api/stacks/${made.body.Id}`, { jwt });
    assert.deepEqual([read.body.Name, read.body.Status, read.body.Type, read.body.EndpointId], ['tf', 1, 2, 1]);
    assert.deepEqual((await tool('GET', `/api/stacks/${made.body.Id}/file`, { jwt })).body, { StackFileContent: tfText });
    assert.equal((await tool('DELETE', `/api/stacks/${made.body.Id}?endpointId=1`, { jwt })).status, 204);

    // the "deploy to Portainer" action: an API key only, version first, match by Name + EndpointId
    const key = (await tool('POST', '/api/users/1/tokens', { jwt, json: { password, description: 'ci' } })).body.rawAPIKey;
    const deploy = async (text: string) => {
      const version = await tool('GET', '/api/system/version', { key });
      assert.equal(version.body.ServerVersion, '2.23.0');
      const endpointId = (await tool('GET', '/api/endpoints', { key })).body[0].Id;
      const existing = (await tool('GET', '/api/stacks', { key })).body.find((s: { Name: string; EndpointId: number }) => s.Name === 'ci' && s.EndpointId === endpointId);
      return existing
        ? tool('PUT', `/api/stacks/${existing.Id}?endpointId=${endpointId}`, { key, json: { env: existing.Env, prune: false, pullImage: false, stackFileContent: text } })
        : tool('POST', `/api/stacks/create/standalone/string?endpointId=${endpointId}`, { key, json: { name: 'ci', swarmID: null, stackFileContent: text, env: [] } });
    };
    const first = await deploy(tfText.replaceAll('tf', 'ci'));
    assert.equal(first.status, 200, first.text);
    const second = await deploy(tfText.replaceAll('tf', 'ci').replace('3600', '3601'));
    assert.equal(second.status, 200, second.text);
    assert.equal(second.body.Id, first.body.Id);
    assert.ok(second.body.UpdateDate > 0);

    // a dashboard widget: environments, then every container with its state
    const endpoints = await tool('GET', '/api/endpoints', { key });
    const containers = await tool('GET', `/api/endpoints/${endpoints.body[0].Id}/docker/containers/json?all=1`, { key });
    assert.ok(containers.body.filter((c: { State: string }) => c.State === 'running').length >= 3);
  });

  it('signs in and calls the engine with the npm package portainer-api-client', async () => {
    // In a process of its own: the package sends through the request library and https.globalAgent,
    // which gets the service CA and resolves the tool's name here (as --resolve does for curl).
    const script = `
      const https = require('node:https');
      https.globalAgent.options.ca = require('node:fs').readFileSync(process.env.CA);
      https.globalAgent.options.lookup = (_h, o, cb) => (o && o.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4));
      const PortainerClient = require('portainer-api-client');
      const client = new PortainerClient(process.env.URL, 'admin', process.env.PASSWORD);
      client.callApiWithKey('get', '/api/endpoints/1/docker/containers/manager-manager-1/json', {})
        .then((c) => console.log(JSON.stringify({ name: c.Name, tool: c.Config.Labels['svc.tool'] })), (code) => { console.log(JSON.stringify({ code })); });
    `;
    const { stdout } = await run(process.execPath, ['-e', script], { env: { PATH: process.env.PATH, CA: ca, URL: managerUrl, PASSWORD: password }, timeout: 60_000 });
    assert.deepEqual(JSON.parse(stdout), { name: '/manager-manager-1', tool: 'manager' });
  });

  it("puts the tool's address and a new API key in the export folder (SVC_MANAGER_URL, SVC_MANAGER_TOKEN)", async () => {
    const res = await fetch(`${t.url}/api/sandboxes/${name}/export`, { headers: { authorization: `Bearer ${alice.token}` } });
    assert.equal(res.status, 200);
    const zip = path.join(dir, 'export.zip');
    fs.writeFileSync(zip, Buffer.from(await res.arrayBuffer()));
    const { stdout } = await run('unzip', ['-p', zip, `${name}/svc.env`]);
    const env = Object.fromEntries(stdout.split('\n').filter((l) => /^SVC_MANAGER_/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1).replace(/^"|"$/g, '')]));
    assert.equal(env.SVC_MANAGER_URL, managerUrl);
    assert.match(env.SVC_MANAGER_TOKEN ?? '', /^ptr_/);
    assert.equal((await tool('GET', '/api/stacks', { key: env.SVC_MANAGER_TOKEN })).status, 200);
  });

  it("gives manager_url to a default sandbox whose user runs the tool's image, but not on 127.0.0.1", async () => {
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `own-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    const own = res.body.name as string;
    assert.deepEqual(res.body.extras, {});
    const engine = innerEngine(own, (await t.service.lifecycle.status(own)).address!, (await t.service.store.sandboxes.get(own))!.certs!, { timeoutMs: 120_000 });
    const image = t.config.managerImage;
    const loaded = await engine.loadImage(await t.service.runtime.saveImage(image), { quiet: true });
    await new Promise((resolve, reject) => engine.modem.followProgress(loaded, (err: Error | null) => (err ? reject(err) : resolve(null))));
    const runTool = async (containerName: string, hostIp: string, hostPort: string) => {
      const c = await engine.createContainer({
        name: containerName, Image: image, ExposedPorts: { '9000/tcp': {} },
        HostConfig: { Binds: ['/var/run/docker.sock:/var/run/docker.sock'], PortBindings: { '9000/tcp': [{ HostIp: hostIp, HostPort: hostPort }] } },
      });
      await c.start();
    };
    await runTool('private-tool', '127.0.0.1', '9001');
    await runTool('my-tool', '', '9000');
    const short = own.slice('svc-'.length);
    const url = `https://${short}-my-tool-port9000.${t.config.domain}:${port}`;
    const r = await eventually(async () => {
      const v = (await t.api('GET', `/api/sandboxes/${own}`, alice.token)).body;
      return v.extras.manager_url ? v : null;
    }, 'manager_url of the user-run tool', 60_000, 500);
    assert.deepEqual(r.extras, { manager_url: url }, 'no password: the service did not make it');
    assert.deepEqual(r.tunnel_urls, [url], 'the tool on 127.0.0.1 has no address');
    await eventually(async () => (await curl(`${url}/api/status`)).body.Version === '2.23.0', 'the user-run tool answering', 30_000, 300);
    assert.equal((await t.api('DELETE', `/api/sandboxes/${own}`, alice.token)).status, 200);
  });

  /**
   * Tool traffic to a sandbox that is not running: the edge holds the request while the sandbox wakes
   * (SVC_WAKE_HOLD_MS) and the tool answers it, or, for a slower wake (deep sleep, a loaded machine),
   * answers with the waiting page (spec 7).
   */
  const firstAnswerWakes = async (what: string) => {
    // the edge trusts a state it read for a second: a request in that second may meet the stopped address (502)
    const first = await eventually(async () => {
      const r = await tool('GET', '/api/status');
      return r.status === 502 ? null : r;
    }, `an answer other than 502 from ${what}`, 10_000, 300);
    assert.equal(first.status, 200);
    if (first.body?.Version === '2.23.0') return;
    assert.match(first.head, new RegExp(`${WAITING_HEADER}: 1`));
    assert.match(first.head, /content-type: text\/html/);
  };
  it('wakes an asleep sandbox on tool traffic (held until the tool answers, or the waiting page), and tool traffic keeps it awake', async () => {
    const own = (await tool('POST', '/api/auth', { json: { username: 'admin', password } })).body.jwt;
    const stacksBefore = (await tool('GET', '/api/stacks', { jwt: own })).body;
    await t.service.lifecycle.sleep(name, 'test');
    assert.equal((await record()).status, 'exited');
    await firstAnswerWakes('the sleeping tool');
    await eventually(async () => (await tool('GET', '/api/status')).body?.Version === '2.23.0', 'the tool after wake', 60_000, 500);
    assert.equal((await record()).status, 'running');
    // the tool's state (its volume) and its JWTs outlive the sleep
    assert.deepEqual((await tool('GET', '/api/stacks', { jwt: own })).body, stacksBefore);

    // idle_timeout 20s renews at most every 5 s: traffic to the tool must move stops_at on
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '20s' });
    const before = Date.parse((await record()).stops_at);
    await eventually(async () => {
      await tool('GET', '/api/status');
      return Date.parse((await record()).stops_at) > before;
    }, 'stops_at moved on by tool traffic', 30_000, 1_000);
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h' });
  });
  it('wakes from deep sleep on tool traffic too, with its stacks and keys intact', async () => {
    const own = (await tool('POST', '/api/auth', { json: { username: 'admin', password } })).body.jwt;
    const stacksBefore = (await tool('GET', '/api/stacks', { jwt: own })).body;
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '2s', deep_sleep_after: '2s' });
    await eventually(async () => (await record()).status === 'deep_sleep', 'deep sleep', 60_000, 500);
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h', deep_sleep_after: '7d' });
    await firstAnswerWakes('the tool in deep sleep');
    await eventually(async () => (await tool('GET', '/api/status')).body?.Version === '2.23.0', 'the tool after a deep-sleep wake', 90_000, 500);
    assert.equal((await record()).status, 'running');
    assert.deepEqual((await tool('GET', '/api/stacks', { jwt: own })).body, stacksBefore);
  });
});
