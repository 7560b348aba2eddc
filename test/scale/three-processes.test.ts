import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { onJsonLines } from '../../core/json-lines.ts';
import { destroyStore, openStore } from '../../store/index.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { freePort } from '../../harness/ports.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, removeInstance } from '../../harness/service.ts';
import { watchStarts } from '../helpers/container-starts.ts';
import { POSTGRES_URL, TEST_SECRET_KEY_FILE } from '../store/helpers.ts';
import { LAYER_GZIP, OciClient, gzip, makeTar } from '../../harness/oci.ts';
import { engineEvent, OwnRedis, ServiceProcess, type ServiceEnv } from '../faults/harness.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const FIXTURE = path.resolve(ROOT, 'fixtures/busybox');
const REGISTRY_BINARY = '/usr/bin/docker-registry';

/**
 * Issue 19, "How it is checked": three real service processes (`node --import tsx main.ts`), each
 * with its own data folder and ports, on one Redis (the test's own, so its command counts are this
 * service's alone), one PostgreSQL table and one registry upstream, with a user's whole journey
 * split across them. Prints the figures the docs quote (docs/scale-out.md).
 */
describe('three service processes on one Redis, one PostgreSQL store and one registry', () => {
  const docker = sandboxDocker();
  const prefix = `svcs${randomBytes(3).toString('hex')}`;
  const table = `svc_scale_${randomBytes(4).toString('hex')}`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  const caFile = path.join(dir, 'ca.pem');
  let redis: OwnRedis;
  let counter: Redis;
  let registry: ChildProcess | undefined;
  let envs: ServiceEnv[] = [];
  let svcs: ServiceProcess[] = [];
  let token = '';
  let sandbox = '';
  let cli: EngineCli | undefined;
  const figures: string[] = [];

  const api = (target: ServiceProcess, method: string, route: string, body?: unknown) => target.api(method, route, token, body);
  const status = async (target: ServiceProcess) => ((await api(target, 'GET', `/api/sandboxes/${sandbox}`)).body as { status: string }).status;
  /** The app through one process's edge, as a browser asks for it: its body, or '' when it does not answer. */
  const appGet = async (target: ServiceProcess): Promise<string> => {
    const host = `${sandbox}-web.localhost`;
    const port = target.env.httpsPort;
    try {
      const { stdout } = await run('curl', ['-sS', '--max-time', '30', '--cacert', caFile, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
      return stdout;
    } catch {
      return '';
    }
  };
  /**
   * The Redis commands sent while `work` runs that are not the service's steady background (its
   * timers: reloads, heartbeats, queue polls, lease renewals), which are learnt from a quiet window
   * first: every command is seen with MONITOR on the test's own Redis.
   */
  const commandsOf = async (work: () => Promise<void>): Promise<{ count: number; kinds: string[] }> => {
    const client = new Redis(redis.url);
    const monitor = await client.monitor();
    const seen: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => seen.push(args));
    const kind = (args: string[]) => `${args[0]!.toLowerCase()} ${args[0]!.toLowerCase().startsWith('eval') ? args[1]!.slice(0, 90) : (args[1] ?? '').replace(/:[^:]*$/, ':*')}`;
    try {
      await new Promise((r) => setTimeout(r, 12_000)); // more than the slowest background timer
      const background = new Set(seen.splice(0).map(kind));
      await work();
      const own = seen.splice(0).filter((args) => !background.has(kind(args)));
      return { count: own.length, kinds: [...new Set(own.map(kind))] };
    } finally {
      monitor.disconnect();
      client.disconnect();
    }
  };
  /** The svc CLI as an operator runs it beside the first process (its environment). */
  const svcCli = async (...args: string[]): Promise<string> => {
    const e = envs[0]!;
    const { stdout } = await run('npx', ['svc', ...args], {
      cwd: ROOT,
      env: { ...process.env, SVC_DATA_DIR: e.dataDir, SVC_SECRET_KEY_FILE: e.secretKeyFile, REDIS_URL: e.redisUrl, SVC_REDIS_PREFIX: e.prefix, ...e.extraEnv },
    });
    return stdout.trim().split('\n').pop()!;
  };
  const putToSleep = async (through: ServiceProcess) => {
    assert.equal((await api(through, 'PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '1s' })).status, 200);
    await eventually(async () => (await status(svcs[2]!)) === 'exited', 'asleep', 60_000);
    assert.equal((await api(through, 'PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '1h' })).status, 200);
  };

  before(async () => {
    redis = await OwnRedis.start();
    counter = new Redis(redis.url);
    // one registry upstream for all three (a spawned one per process would keep images in one folder)
    const registryPort = await freePort();
    const registryConfig = path.join(dir, 'registry.yml');
    fs.writeFileSync(registryConfig, JSON.stringify({
      version: 0.1,
      log: { level: 'warn', accesslog: { disabled: true } },
      storage: { filesystem: { rootdirectory: path.join(dir, 'registry') }, delete: { enabled: true } },
      http: { addr: `127.0.0.1:${registryPort}`, relativeurls: true },
    }));
    registry = spawn(REGISTRY_BINARY, ['serve', registryConfig], { stdio: 'ignore' });
    await eventually(async () => (await fetch(`http://127.0.0.1:${registryPort}/v2/`)).status === 200, 'the registry upstream', 20_000, 100);
    const shared = { SVC_STORE_URL: POSTGRES_URL, SVC_STORE_TABLE: table, SVC_REGISTRY_UPSTREAM: `http://127.0.0.1:${registryPort}` };
    envs = await Promise.all([1, 2, 3].map(async (n) => ({
      dataDir: path.join(dir, `data${n}`), redisUrl: redis.url, prefix, httpsPort: await freePort(), apiPort: await freePort(), secretKeyFile: TEST_SECRET_KEY_FILE, extraEnv: shared,
    })));
    svcs = envs.map((e) => new ServiceProcess(e));
    await Promise.all(svcs.map((s) => s.start()));
  });

  after(async () => {
    cli?.dispose();
    await Promise.all(svcs.map((s) => s.terminate(25_000)));
    registry?.kill('SIGKILL');
    counter?.disconnect();
    await redis?.down();
    await removeInstance(prefix).catch(() => undefined);
    const store = await openStore(POSTGRES_URL, { table, secretKeyFile: TEST_SECRET_KEY_FILE });
    await destroyStore(store);
    fs.rmSync(dir, { recursive: true, force: true });
    console.log(`\n${figures.map((f) => `# ${f}`).join('\n')}\n`);
  });

  it('a user and a token from the CLI; the same ca.pem from all three', async () => {
    await svcCli('user', 'create', `scale-${prefix}`);
    token = await svcCli('token', 'create', `scale-${prefix}`);
    assert.match(token, /^svc_/, 'the CLI printed a token as its last line');
    const pems = await Promise.all(svcs.map(async (s) => (await fetch(`${s.apiUrl}/ca.pem`)).text()));
    assert.match(pems[0]!, /BEGIN CERTIFICATE/);
    assert.equal(pems[1], pems[0]);
    assert.equal(pems[2], pems[0]);
    fs.writeFileSync(caFile, pems[0]!);
  });

  it('a sandbox created through the first; an app started through its engine address answers through the second and the third', async () => {
    const created = await api(svcs[0]!, 'POST', '/api/sandboxes', { name: `web-${prefix}`, idle_timeout: '1h' });
    assert.equal(created.status, 201, answerOf(created));
    sandbox = created.body.name;
    cli = new EngineCli(created.body.engine_access.host, '127.0.0.1', envs[0]!.httpsPort, created.body);
    await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE], { timeoutMs: 120_000 });
    const serve = 'mkdir -p /www && echo the-app > /www/index.html && echo hello-from-app && exec httpd -f -p 8080 -h /www';
    await cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c', serve]);
    const ran = Date.now();
    const served = await Promise.all([svcs[1]!, svcs[2]!].map((s) => eventually(async () => (await appGet(s)).includes('the-app') && Date.now() - ran, 'the app through another process', 30_000, 50)));
    figures.push(`app discovered through one process's engine, served by the others' edges: ${served.map((ms) => `${ms} ms`).join(', ')} after docker run returned`);
    assert.ok((await appGet(svcs[0]!)).includes('the-app'));
  });

  it('a registry push through the second, a pull through the third, the report through the first', async () => {
    const client = (s: ServiceProcess) => new OciClient({ port: s.env.httpsPort, host: 'registry.localhost', ca: fs.readFileSync(caFile, 'utf8'), auth: OciClient.basic(token) });
    const [second, third] = [client(svcs[1]!), client(svcs[2]!)];
    try {
      const repo = `${sandbox}/hello`;
      const pushed = await second.pushImage(repo, 'v1', [{ blob: gzip(await makeTar([{ path: 'bin/hello', content: 'hello' }])), mediaType: LAYER_GZIP }]);
      assert.equal(pushed.status, 201, pushed.body);
      const pulled = await third.request('GET', `/v2/${repo}/manifests/v1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } });
      assert.equal(pulled.status, 200);
      assert.equal(pulled.headers['docker-content-digest'], pushed.digest);
      const report = await eventually(async () => {
        const res = await api(svcs[0]!, 'GET', `/api/sandboxes/${sandbox}/registry`);
        const image = (res.body as { images: Array<{ name: string; visibility: string; versions: Array<{ digest: string; scan: { state: string } }> }> }).images.find((i) => i.name === repo);
        return image?.versions.every((v) => v.scan.state === 'clean') && image.visibility === 'public' ? image : undefined;
      }, 'the scan and the visibility it decides, as the first process reports them', 60_000);
      assert.deepEqual(report.versions.map((v) => v.digest), [pushed.digest]);
      assert.equal(report.visibility, 'public');
    } finally {
      second.close();
      third.close();
    }
  });

  it('the log stream through the third shows the app', async () => {
    const ac = new AbortController();
    const res = await fetch(`${svcs[2]!.apiUrl}/api/sandboxes/${sandbox}/logs/stream?tail=20`, { headers: { authorization: `Bearer ${token}` }, signal: ac.signal });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    let text = '';
    const deadline = setTimeout(() => ac.abort(), 30_000);
    try {
      while (!text.includes('hello-from-app')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
    } finally {
      clearTimeout(deadline);
      ac.abort();
    }
    assert.match(text, /hello-from-app/);
  });

  it('30 starts spread over the three processes start the container once; one process follows its engine', async () => {
    await putToSleep(svcs[1]!);
    const starts = await watchStarts(docker, sandbox);
    const results = await Promise.all(svcs.flatMap((s) => Array.from({ length: 10 }, () => api(s, 'POST', `/api/sandboxes/${sandbox}/start`))));
    for (const r of results) assert.equal(r.status, 200, answerOf(r));
    const counted = await starts.stop();
    assert.equal(counted.starts, 1, `${counted.starts} container starts`);
    const watchers = await eventually(async () => (await counter.keys(`${prefix}:watch:*`)).length || undefined, 'a watcher', 20_000);
    assert.equal(watchers, 1, 'one engine watcher across the three processes');
    for (const s of svcs) assert.ok((await appGet(s)).includes('the-app'));
  });

  it('Redis round trips: none per app request; a few per wake (figures)', async () => {
    const agent = new https.Agent({ keepAlive: true, ca: fs.readFileSync(caFile), servername: `${sandbox}-web.localhost` });
    const get = () => new Promise<void>((resolve, reject) => {
      https.get({ host: '127.0.0.1', port: envs[1]!.httpsPort, path: '/', agent, headers: { host: `${sandbox}-web.localhost` } }, (res) => {
        res.resume();
        res.on('end', () => resolve());
      }).on('error', reject);
    });
    const requests = 200;
    try {
      await get(); // the first request after a wake renews the session
      const perRequest = await commandsOf(async () => { for (let i = 0; i < requests; i++) await get(); });
      figures.push(`Redis commands during ${requests} app requests through another process's edge: ${perRequest.count} (${perRequest.kinds.join('; ') || 'none'})`);
      assert.ok(perRequest.count <= 2, `the edge's hot path sent Redis commands: ${perRequest.kinds.join('; ')}`);
    } finally {
      agent.destroy();
    }
    await putToSleep(svcs[0]!);
    const wake = await commandsOf(async () => {
      assert.equal((await api(svcs[1]!, 'POST', `/api/sandboxes/${sandbox}/start`)).status, 200);
    });
    figures.push(`Redis commands per wake (asleep → running, through the API): ${wake.count} (${wake.kinds.join('; ')})`);
  });

  it('the idle timer puts the sandbox to sleep once, and every process stops following it', async () => {
    const stops: string[] = [];
    const events = await docker.getEvents({ filters: { type: ['container'], container: [sandbox], event: ['stop', 'start'] } }) as unknown as NodeJS.ReadableStream & { destroy(): void };
    onJsonLines(events, (e) => stops.push((e as { Action: string }).Action));
    try {
      assert.equal((await api(svcs[1]!, 'PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '2s' })).status, 200);
      await eventually(async () => (await status(svcs[0]!)) === 'exited', 'asleep', 60_000);
      await eventually(async () => (await counter.keys(`${prefix}:watch:*`)).length === 0, 'no engine watcher left', 15_000);
      await new Promise((r) => setTimeout(r, 3000)); // a second timer, if any, would have fired by now
      assert.deepEqual(stops, ['stop'], 'one container stop, no start');
    } finally {
      events.destroy();
    }
    assert.equal((await api(svcs[1]!, 'PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '1h' })).status, 200);
  });

  it('the first process killed with SIGKILL in the middle of a wake: the others finish it, the app answers, timers still fire', async () => {
    const started = await engineEvent(docker, sandbox, 'start', 60_000);
    const wake = api(svcs[0]!, 'POST', `/api/sandboxes/${sandbox}/start`).catch(() => undefined);
    await started.seen;
    await svcs[0]!.kill('SIGKILL');
    await wake;
    const finished = await api(svcs[1]!, 'POST', `/api/sandboxes/${sandbox}/start`);
    assert.equal(finished.status, 200, answerOf(finished));
    assert.ok((await appGet(svcs[2]!)).includes('the-app'), 'the app answers through the third');
    await eventually(async () => (await counter.keys(`${prefix}:watch:*`)).length === 1 || undefined, 'one process follows the engine again', 60_000);
    assert.equal((await api(svcs[2]!, 'PATCH', `/api/sandboxes/${sandbox}`, { idle_timeout: '2s' })).status, 200);
    await eventually(async () => (await status(svcs[1]!)) === 'exited', 'the idle timer fired', 60_000);
    svcs[0] = new ServiceProcess(envs[0]!);
    await svcs[0].start();
  });

  it('a delete through the second: 410 through the first', async () => {
    const deleted = await api(svcs[1]!, 'DELETE', `/api/sandboxes/${sandbox}`);
    assert.ok(deleted.status === 200 || deleted.status === 202, answerOf(deleted));
    const gone = await api(svcs[0]!, 'GET', `/api/sandboxes/${sandbox}`);
    assert.equal(gone.status, 410, answerOf(gone));
    assert.equal(await appGet(svcs[2]!).then((body) => body.includes('the-app')), false, 'its app address is gone everywhere');
  });
});
