import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { loadConfig } from '../../core/config.ts';
import { freePort } from '../../harness/ports.ts';

const SCRIPT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../scripts/redis-acl.sh');

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 30_000, env }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

/**
 * The Redis that setup starts itself (scripts/redis-acl.sh), tried on a Redis of this test's own on
 * a free port: the shared one on 6379 is never touched.
 */
describe('Redis started by setup: ACL user svc, default user off', () => {
  const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'svc-redis-acl-')), 'etc-svc');
  const urlFile = path.join(dir, 'redis.url');
  let port: number;
  let url: string;

  before(async () => {
    port = await freePort();
    const r = await run('bash', [SCRIPT, 'start', String(port), dir]);
    assert.equal(r.code, 0, r.stderr);
    url = fs.readFileSync(urlFile, 'utf8').trim();
  });
  after(async () => {
    const pidFile = path.join(dir, `redis-${port}.pid`);
    if (fs.existsSync(pidFile)) {
      const pid = Number(fs.readFileSync(pidFile, 'utf8'));
      process.kill(pid, 'SIGTERM');
      for (let i = 0; i < 100 && fs.existsSync(`/proc/${pid}`); i++) await new Promise((r) => setTimeout(r, 100));
    }
    fs.rmSync(path.dirname(dir), { recursive: true, force: true });
  });

  it('keeps the password only in 0600 files, in a 0700 folder, off every command line', async () => {
    assert.ok(new RegExp(`^redis://svc:[0-9a-f]{48}@127\\.0\\.0\\.1:${port}$`).test(url), 'redis://svc:<48 hex>@127.0.0.1:<port>');
    assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
    for (const f of ['redis.url', 'redis.acl']) assert.equal(fs.statSync(path.join(dir, f)).mode & 0o777, 0o600, f);
    const password = new URL(url).password;
    const ps = await run('ps', ['-eo', 'args']);
    assert.match(ps.stdout, new RegExp(`redis-server 127\\.0\\.0\\.1:${port}`), 'the Redis of this test runs');
    assert.ok(!ps.stdout.includes(password), 'no process shows the password');
  });

  it('refuses clients without the password, the default user included', async () => {
    const open = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'set', 'k', 'v']);
    assert.match(open.stdout + open.stderr, /NOAUTH/);
    const wrong = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), '--user', 'svc', 'ping'], { ...process.env, REDISCLI_AUTH: 'guess' });
    assert.match(wrong.stdout + wrong.stderr, /WRONGPASS/);
    const asDefault = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), '--user', 'default', 'ping'], { ...process.env, REDISCLI_AUTH: '' });
    assert.doesNotMatch(asDefault.stdout, /PONG/);
    assert.equal((await run('bash', [SCRIPT, 'ping', String(port), dir])).code, 0);
  });

  it('the service reads the URL file when REDIS_URL is unset, and REDIS_URL still wins', async () => {
    assert.ok(loadConfig({ SVC_REDIS_URL_FILE: urlFile }).redisUrl === url, 'the URL of the file'); // equal would print its password
    assert.equal(loadConfig({ SVC_REDIS_URL_FILE: urlFile, REDIS_URL: 'redis://elsewhere:6380' }).redisUrl, 'redis://elsewhere:6380');
    assert.equal(loadConfig({ SVC_REDIS_URL_FILE: path.join(dir, 'missing.url') }).redisUrl, 'redis://127.0.0.1:6379', 'a Redis without password (CI) keeps working');
    const redis = new Redis(loadConfig({ SVC_REDIS_URL_FILE: urlFile }).redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      assert.equal(await redis.set('svc-acl-check', 'yes'), 'OK');
      assert.equal(await redis.get('svc-acl-check'), 'yes');
    } finally {
      redis.disconnect();
    }
  });

  it('a second start reuses the password, so clients holding the URL keep working', async () => {
    const pidFile = path.join(dir, `redis-${port}.pid`);
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    process.kill(pid, 'SIGTERM');
    for (let i = 0; i < 100 && fs.existsSync(`/proc/${pid}`); i++) await new Promise((r) => setTimeout(r, 100));
    const r = await run('bash', [SCRIPT, 'start', String(port), dir]);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(fs.readFileSync(urlFile, 'utf8').trim() === url, 'the same URL, password and all');
    assert.notEqual(Number(fs.readFileSync(pidFile, 'utf8')), pid, 'a new redis-server');
  });

  it('a bad URL file is refused with a clear error', () => {
    const bad = path.join(dir, 'bad.url');
    fs.writeFileSync(bad, 'not a url\n', { mode: 0o600 });
    assert.throws(() => loadConfig({ SVC_REDIS_URL_FILE: bad }), /holds no redis:\/\/ URL/);
  });
});
