// The SDK (issue 35 §4): its committed types are what the API makes now, it installs with npm from the
// service's own tarball, its README's examples type-check against the installed package, and a program
// using it drives a real service (sandboxes, exec, files, logs, registry report, secrets).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { answerOf, startTestService, type TestService } from '../../harness/service.ts';
import { openApiDocument, SCHEMA_FILE, schemaTypes } from '../../scripts/openapi.ts';

const run = promisify(execFile);
const TSC = path.resolve('node_modules/typescript/bin/tsc');

describe('SDK', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-sdk-'));

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
  });
  after(async () => {
    await t?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('has committed types that are what the API makes now (else: npm run sdk:generate)', async () => {
    assert.equal(fs.readFileSync(SCHEMA_FILE, 'utf8'), await schemaTypes(await openApiDocument()), 'sdk/schema.d.ts is stale: run npm run sdk:generate and commit it');
  });

  it("installs with npm from the service's tarball; the README's examples type-check against it", async () => {
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    // as a user installs it; openapi-fetch comes from npm's cache (setup's npm ci put it there)
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', `${t.url}/sdk/svc-sdk.tgz`], { cwd: dir, timeout: 120_000 });
    const installed = path.join(dir, 'node_modules', 'svc-sdk');
    assert.deepEqual(fs.readdirSync(installed).sort(), ['README.md', 'index.d.ts', 'index.js', 'package.json', 'schema.d.ts']);
    const readme = fs.readFileSync(path.join(installed, 'README.md'), 'utf8');
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
    assert.ok(blocks.length >= 8, `${blocks.length} examples`);
    const [imports, ...calls] = blocks;
    const program = `${imports}\nimport fs from 'node:fs';\nimport tls from 'node:tls';\nvoid fs; void tls;\nexport async function examples(): Promise<void> {\n${calls.join('\n')}\n}\n`;
    fs.writeFileSync(path.join(dir, 'examples.ts'), program);
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', types: ['node'], typeRoots: [path.resolve('node_modules/@types')], noUnusedLocals: false },
      files: ['examples.ts'],
    }));
    const checked = await run(process.execPath, [TSC, '-p', dir], { cwd: dir }).catch((err: { stdout: string }) => err);
    assert.equal(checked.stdout, '', `the README's examples do not type-check:\n${checked.stdout}`);
  });

  it('drives a real service: a sandbox, exec, files, logs, the registry report and secrets', async () => {
    const script = `
import { createSvcClient, must, SvcError } from 'svc-sdk';
const svc = createSvcClient({ url: process.env.SVC_URL, token: process.env.SVC_TOKEN });
const out = {};
const sb = must(await svc.POST('/api/sandboxes', { body: { name: process.env.NAME, idle_timeout: '1h' } }));
out.created = sb.status;
must(await svc.PUT('/api/me/secrets/{name}', { params: { path: { name: 'GREETING' } }, body: { value: 'amber kettle harbour' } }));
out.secrets = must(await svc.GET('/api/me/secrets')).map((s) => s.name);
const ran = must(await svc.POST('/api/sandboxes/{name}/exec', { params: { path: { name: sb.name } }, body: { command: ['sh', '-c', 'printenv GREETING; exit 3'] } }));
out.exec = [ran.exit_code, ran.stdout];
must(await svc.PUT('/api/sandboxes/{name}/files/content', {
  params: { path: { name: sb.name }, query: { path: '/root/hello.txt' } }, headers: { 'content-type': 'application/octet-stream' },
  body: 'hello from the sdk', bodySerializer: (b) => b,
}));
out.text = must(await svc.GET('/api/sandboxes/{name}/files/text', { params: { path: { name: sb.name }, query: { path: '/root/hello.txt' } } })).text;
out.logs = Array.isArray(must(await svc.GET('/api/sandboxes/{name}/logs', { params: { path: { name: sb.name }, query: { tail: '10' } } })));
out.registry = must(await svc.GET('/api/sandboxes/{name}/registry', { params: { path: { name: sb.name } } })).images;
must(await svc.DELETE('/api/me/secrets/{name}', { params: { path: { name: 'GREETING' } } }));
try { must(await svc.GET('/api/sandboxes/{name}', { params: { path: { name: 'svc-none-here' } } })); } catch (err) { out.error = err instanceof SvcError ? [err.status, err.code] : String(err); }
console.log(JSON.stringify(out));
`;
    fs.writeFileSync(path.join(dir, 'drive.mjs'), script);
    const name = `sdk-${t.config.redisPrefix}`;
    const { stdout } = await run(process.execPath, ['drive.mjs'], { cwd: dir, env: { PATH: process.env.PATH, SVC_URL: t.url, SVC_TOKEN: alice.token, NAME: name }, timeout: 300_000 });
    const out = JSON.parse(stdout);
    assert.deepEqual(out, {
      created: 'running', secrets: ['GREETING'], exec: [3, 'amber kettle harbour\n'], text: 'hello from the sdk', logs: true, registry: [],
      error: [404, 'SVC_SANDBOX_NOT_FOUND'],
    });
    const res = await t.api('GET', `/api/sandboxes/svc-${name}`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
  });
});
