import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function parseEnv(text: string): Record<string, string> {
  return Object.fromEntries(text.split('\n').filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

const mode = (file: string) => fs.statSync(file).mode & 0o777;

/** Spec 1.7 / issue 12: the export folder (zip and `svc export`), the agent guide and llms.txt. */
describe('export folder and agent guide', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let name: string;
  let other: string;
  let limited: string;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-export-test-'));
  const site = () => `https://localhost:${t.config.httpsPort}`;
  const tokenCount = async () => (await t.api('GET', '/api/me/tokens', alice.token)).body.length;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    bob = await t.user('bob');
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `exp-${t.config.redisPrefix}` });
    assert.equal(res.status, 201, answerOf(res));
    name = res.body.name;
    limited = await t.limitedToken(alice.id, name);
    // A second sandbox of alice's from before engine access existed (no certificates): a record only.
    other = `svc-old-${t.config.redisPrefix}`;
    await t.service.store.sandboxes.put({ name: other, owner_id: alice.id, template: 'default', idle_timeout: '30m', deep_sleep_after: '14d', created_at: new Date().toISOString() });
  });
  after(async () => {
    await t?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('serves the agent guide and llms.txt with this deployment\'s addresses', async () => {
    const guide = await fetch(`${t.url}/agent-guide.md`);
    assert.equal(guide.status, 200);
    assert.match(guide.headers.get('content-type') ?? '', /^text\/markdown/);
    const text = await guide.text();
    for (const needle of [`${site()}/api`, 'X-Svc-Waiting', 'tunnel.subdomain', 'up -d --build', '0.0.0.0', 'keep-awake', `registry.localhost:${t.config.httpsPort}`, `${site()}/api/mcp`, '"error"', 'Never print']) {
      assert.ok(text.includes(needle), `guide mentions ${needle}`);
    }
    const llms = await fetch(`${t.url}/llms.txt`);
    assert.equal(llms.status, 200);
    const body = await llms.text();
    assert.match(body, /^# /);
    assert.ok(body.includes(`(${site()}/agent-guide.md)`), 'llms.txt links the guide');
  });

  it('exports svc-<sandbox>/ as a zip whose token, certificates and modes work', async () => {
    const before = await tokenCount();
    const res = await fetch(`${t.url}/api/sandboxes/${name}/export`, { headers: { authorization: `Bearer ${alice.token}` } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/zip');
    assert.equal(res.headers.get('content-disposition'), `attachment; filename="${name}.zip"`);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const zipFile = path.join(tmp, 'api.zip');
    fs.writeFileSync(zipFile, Buffer.from(await res.arrayBuffer()));
    await run('unzip', ['-q', zipFile, '-d', path.join(tmp, 'api')]);
    const dir = path.join(tmp, 'api', name);
    assert.deepEqual(fs.readdirSync(dir).sort(), ['.gitignore', 'README.md', 'docker', 'service-ca.pem', 'svc.env']);
    assert.deepEqual(fs.readdirSync(path.join(dir, 'docker')).sort(), ['ca.pem', 'cert.pem', 'key.pem']);
    assert.equal(mode(path.join(dir, 'svc.env')), 0o600);
    assert.equal(mode(path.join(dir, 'docker/key.pem')), 0o600);
    assert.equal(mode(path.join(dir, 'docker/ca.pem')), 0o644);

    const envText = fs.readFileSync(path.join(dir, 'svc.env'), 'utf8');
    const env = parseEnv(envText);
    assert.equal(env.SVC_URL, `${site()}/api`);
    assert.equal(env.SVC_SANDBOX, name);
    assert.equal(env.SVC_AGENT_GUIDE, `${site()}/agent-guide.md`);
    assert.equal(env.SVC_DOCKER_HOST, `tcp://${name}-engine.localhost:${t.config.httpsPort}`);
    assert.ok(/^# Manager: not included \(this sandbox has no management tool\)$/m.test(envText), 'svc.env says why the manager is not included'); // match would print svc.env, token and all
    assert.ok(!('SVC_MANAGER_URL' in env));
    assert.match(fs.readFileSync(path.join(dir, '.gitignore'), 'utf8'), /^svc\.env$/m);
    const readme = fs.readFileSync(path.join(dir, 'README.md'), 'utf8');
    assert.match(readme, /DOCKER_CERT_PATH=\$PWD\/docker[\s\S]*docker context create/);
    assert.ok(readme.includes(`curl -so svc.mjs --cacert service-ca.pem ${site()}/cli/svc.mjs`), 'the README says where the CLI is');
    assert.match(readme, /## Names[\s\S]*libnss-myhostname[\s\S]*`node svc\.mjs names`/, 'and how this machine gets the names');

    // The token is new, limited to the sandbox, and listed as the export's.
    assert.ok(env.SVC_TOKEN !== limited, 'a new token, not the one that asked');
    const me = await t.api('GET', '/api/me', env.SVC_TOKEN);
    assert.equal(me.body.sandbox, name);
    const tokens = (await t.api('GET', '/api/me/tokens', alice.token)).body;
    assert.equal(tokens.length, before + 1);
    assert.match(tokens.at(-1).name, new RegExp(`^export of ${name}, `));
    assert.equal(tokens.at(-1).sandbox, name);

    // The docker CLI reaches the sandbox's engine through the edge with the exported PEMs.
    const pem = (f: string) => fs.readFileSync(path.join(dir, 'docker', f), 'utf8');
    const cli = new EngineCli(`${name}-engine.localhost`, '127.0.0.1', t.config.httpsPort, { ca_cert: pem('ca.pem'), client_cert: pem('cert.pem'), client_key: pem('key.pem') });
    try {
      const { stdout } = await cli.docker(['version', '--format', '{{.Server.Version}}']);
      assert.match(stdout.trim(), /^\d+\.\d+/);
    } finally {
      cli.dispose();
    }
  });

  it('lets a limited token export its own sandbox only; refuses others and changes nothing', async () => {
    assert.equal((await fetch(`${t.url}/api/sandboxes/${name}/export`, { headers: { authorization: `Bearer ${limited}` } })).status, 200);
    const before = await tokenCount();
    const cases: Array<[string, string | undefined, number, string]> = [
      [other, limited, 404, 'SVC_SANDBOX_NOT_FOUND'], // a limited token asking for another sandbox
      [name, bob.token, 404, 'SVC_SANDBOX_NOT_FOUND'], // another user's sandbox
      [name, undefined, 401, 'SVC_UNAUTHENTICATED'],
      [other, alice.token, 409, 'SVC_ENGINE_ACCESS_DISABLED'], // needs-certs: enable first
      ['svc-nope', alice.token, 404, 'SVC_SANDBOX_NOT_FOUND'],
    ];
    for (const [sandbox, token, status, code] of cases) {
      const res = await t.api('GET', `/api/sandboxes/${sandbox}/export`, token);
      assert.equal(res.status, status, `${sandbox}: ${answerOf(res)}`);
      assert.equal(res.body.error.code, code);
    }
    assert.equal(await tokenCount(), before, 'no token was minted by a refused export');
  });

  it('writes the same folder with `svc export` for operators', async () => {
    const users = (await t.service.store.users.list()).filter((u) => u.id === alice.id);
    const env: NodeJS.ProcessEnv = { ...process.env, SVC_DATA_DIR: t.config.dataDir, SVC_DOMAIN: 'localhost', SVC_HTTPS_PORT: String(t.config.httpsPort), SVC_SECRET_KEY_FILE: t.config.secretKeyFile };
    delete env.SVC_STORE_URL;
    const out = path.join(tmp, 'cli');
    fs.mkdirSync(out);
    const { stdout } = await run('npx', ['svc', 'export', name.replace(/^svc-/, ''), '--user', users[0]!.name, '--out', out], { cwd: ROOT, env });
    assert.match(stdout, new RegExp(`wrote ${out}/${name} `));
    assert.ok(!/svc_[A-Za-z0-9_-]{43}/.test(stdout), 'the token is never printed');
    const dir = path.join(out, name);
    assert.equal(mode(path.join(dir, 'svc.env')), 0o600);
    assert.equal(mode(path.join(dir, 'docker/key.pem')), 0o600);
    const exported = parseEnv(fs.readFileSync(path.join(dir, 'svc.env'), 'utf8'));
    assert.equal(exported.SVC_URL, `${site()}/api`);
    assert.equal((await t.api('GET', '/api/me', exported.SVC_TOKEN)).body.sandbox, name);
    const again = await run('npx', ['svc', 'export', name, '--user', users[0]!.name, '--out', out], { cwd: ROOT, env }).catch((e) => e);
    assert.equal(again.code, 1, 'an existing folder is not overwritten');
    assert.match(again.stderr, /exists already/);
  });
});
