import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { createToken, createUser } from '../../accounts/index.ts';
import { openStore } from '../../store/index.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { freePort } from '../../harness/ports.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, removeInstance } from '../../harness/service.ts';
import { TEST_SECRET_KEY_FILE } from '../store/helpers.ts';
import { watchStarts } from '../helpers/container-starts.ts';
import { engineEvent, OwnRedis, registryProcesses, ServiceProcess, type ServiceEnv } from './harness.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve(import.meta.dirname, '../../fixtures/busybox');
const MiB = 1024 * 1024;

/** One row of the figures table. The goal is 0, 0, 0 on every row. */
interface Row {
  fault: string;
  faults: number;
  wrongStates: string[];
  filesLost: string[];
  requestsFailed: string[];
}

/**
 * The fault suite (issue 14): real service processes (`node --import tsx main.ts`) with their own
 * data folder, ports and Redis, killed and starved at bad moments. After each fault every sandbox
 * must read its true state with its timers, no file may be lost or half-written under its final
 * name, and the requests a client is owed must be answered. Prints a table of the figures.
 */
describe('faults: the service, Redis and sandboxes killed at bad moments', () => {
  const docker = sandboxDocker();
  const rows: Row[] = [];
  let redis: OwnRedis;
  let env: ServiceEnv;
  let svc: ServiceProcess;
  let token: string;
  let dir: string;
  let caFile: string;
  /** A sandbox with an app (busybox httpd at <name>-web) and engine access, reused by the wake rows. */
  let web: { name: string; cli: EngineCli };

  const row = (fault: string): Row => {
    const r: Row = { fault, faults: 0, wrongStates: [], filesLost: [], requestsFailed: [] };
    rows.push(r);
    return r;
  };
  const settle = (r: Row) => {
    const problems = [...r.wrongStates.map((w) => `wrong state: ${w}`), ...r.filesLost.map((f) => `file lost: ${f}`), ...r.requestsFailed.map((q) => `request failed: ${q}`)];
    assert.deepEqual(problems, [], `${r.fault}\n--- service log ---\n${svc.tail()}`);
  };

  /** A request as the test's user; status 0 when no answer came (the process killed under it). */
  const api = (method: string, route: string, body?: unknown, target = svc): Promise<{ status: number; body: any }> =>
    target.api(method, route, token, body).catch((err: Error) => ({ status: 0, body: err.message }));
  /** GET of the sandbox: its state as a client reads it. */
  const view = async (name: string) => (await api('GET', `/api/sandboxes/${name}`)).body as { status: string; stops_at: string | null; deep_sleep_at: string | null };
  /** The engine's truth about a sandbox container. */
  const truth = async (name: string): Promise<'running' | 'exited' | 'deep_sleep'> => {
    try {
      const info = await docker.getContainer(name).inspect();
      return info.State.Running && !info.State.Restarting ? 'running' : 'exited';
    } catch {
      return 'deep_sleep';
    }
  };
  /** An app request through the edge, as a browser makes it: the body, or why not. */
  const appGet = async (name: string): Promise<{ status: number; body: string; waiting: boolean }> => {
    const host = `${name}-web.localhost`;
    try {
      const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '60', '--cacert', caFile, '--resolve', `${host}:${env.httpsPort}:127.0.0.1`, `https://${host}:${env.httpsPort}/`]);
      const [head, ...rest] = stdout.split('\r\n\r\n');
      return { status: Number(/^HTTP\/[\d.]+ (\d+)/.exec(head!)?.[1] ?? 0), body: rest.join('\r\n\r\n'), waiting: /x-svc-waiting: 1/i.test(head!) };
    } catch (err) {
      return { status: 0, body: (err as Error).message, waiting: false };
    }
  };
  const create = async (label: string, settings: { idle_timeout?: string; deep_sleep_after?: string } = {}) => {
    const res = await api('POST', '/api/sandboxes', { name: `${label}-${env.prefix}`, idle_timeout: '1h', ...settings });
    assert.equal(res.status, 201, answerOf(res));
    return res.body as { name: string; ca_cert: string; client_cert: string; client_key: string; engine_access: { host: string } };
  };
  /** Puts a running sandbox to sleep the way the service does (a short idle timeout), then restores 1h. */
  const putToSleep = async (name: string) => {
    assert.equal((await api('PATCH', `/api/sandboxes/${name}`, { idle_timeout: '1s' })).status, 200);
    await eventually(async () => (await view(name)).status === 'exited', `${name} asleep`, 60_000);
    assert.equal((await api('PATCH', `/api/sandboxes/${name}`, { idle_timeout: '1h' })).status, 200);
  };
  const upload = async (name: string, file: string, bytes: Buffer) => {
    const res = await fetch(`${svc.apiUrl}/api/sandboxes/${name}/files/content?path=${encodeURIComponent(file)}`, {
      method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' }, body: new Uint8Array(bytes), signal: AbortSignal.timeout(120_000),
    });
    return res.status;
  };
  /** sha256 of a file in the sandbox, or its HTTP status when it cannot be read. */
  const download = async (name: string, file: string): Promise<string | number> => {
    try {
      const res = await fetch(`${svc.apiUrl}/api/sandboxes/${name}/files/content?path=${encodeURIComponent(file)}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(120_000) });
      if (res.status !== 200) return res.status;
      return createHash('sha256').update(Buffer.from(await res.arrayBuffer())).digest('hex');
    } catch {
      return 0;
    }
  };
  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

  /** After a restart: the state a client reads is the engine's, and a running sandbox has its session. */
  const checkTruth = async (r: Row, name: string) => {
    const seen = await eventually(async () => {
      const [v, t] = [await view(name), await truth(name)];
      return v.status === t ? v : undefined;
    }, `${name}: the API agrees with the engine`, 30_000).catch(() => undefined);
    if (!seen) return void r.wrongStates.push(`${name}: the API never agreed with the engine (${(await view(name)).status} vs ${await truth(name)})`);
    if (seen.status === 'running') {
      // a session opened by traffic is opened in the background of that request: a few seconds
      const session = await eventually(async () => (await view(name)).stops_at, `${name}: stops_at`, 10_000).catch(() => null);
      if (!session || Date.parse(session) < Date.now()) r.wrongStates.push(`${name}: running without an idle session (stops_at ${session})`);
    }
  };
  /** The service killed: its registry must die with it (setpriv's death signal), and one runs after a restart. */
  const checkRegistry = async (r: Row, expected: number) => {
    const pids = await eventually(async () => { const p = registryProcesses(env.dataDir); return p.length === expected ? p : undefined; }, `${expected} registry process(es)`, 10_000).catch(() => undefined);
    if (!pids) r.wrongStates.push(`registry processes: ${registryProcesses(env.dataDir).length}, expected ${expected}`);
  };
  const restart = async () => {
    svc = new ServiceProcess(env);
    await svc.start();
  };
  const ensureUp = async () => {
    if (!svc.running) await restart();
  };

  before(async () => {
    redis = await OwnRedis.start();
    const prefix = `svcf${randomBytes(3).toString('hex')}`;
    dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
    env = { dataDir: path.join(dir, 'data'), redisUrl: redis.url, prefix, httpsPort: await freePort(), apiPort: await freePort(), secretKeyFile: TEST_SECRET_KEY_FILE };
    await restart();
    const store = await openStore(`sqlite://${path.join(env.dataDir, 'svc.sqlite')}`, { secretKeyFile: TEST_SECRET_KEY_FILE });
    try {
      const { user } = await createUser(store, { name: `faults-${prefix}` });
      token = (await createToken(store, { userId: user.id })).value;
    } finally {
      await store.close();
    }
    caFile = path.join(dir, 'ca.pem');
    const ca = await fetch(`${svc.apiUrl}/ca.pem`);
    fs.writeFileSync(caFile, await ca.text());

    const sb = await create('web');
    web = { name: sb.name, cli: new EngineCli(sb.engine_access.host, '127.0.0.1', env.httpsPort, sb) };
    await web.cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE], { timeoutMs: 120_000 });
    const serve = 'mkdir -p /www && echo the-app > /www/index.html && exec httpd -f -p 8080 -h /www';
    await web.cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c', serve]);
    await eventually(async () => (await appGet(web.name)).body.includes('the-app'), 'the app answers through the edge', 60_000);
  });

  after(async () => {
    const table = [
      '| fault | faults injected | wrong states | files lost | requests failed |',
      '|---|---|---|---|---|',
      ...rows.map((r) => `| ${r.fault} | ${r.faults} | ${r.wrongStates.length} | ${r.filesLost.length} | ${r.requestsFailed.length} |`),
      `| all | ${rows.reduce((n, r) => n + r.faults, 0)} | ${rows.reduce((n, r) => n + r.wrongStates.length, 0)} | ${rows.reduce((n, r) => n + r.filesLost.length, 0)} | ${rows.reduce((n, r) => n + r.requestsFailed.length, 0)} |`,
    ];
    console.log(`\n${table.join('\n')}\n`);
    web?.cli.dispose();
    await svc?.terminate(25_000);
    await redis?.down();
    if (env) await removeInstance(env.prefix).catch(() => undefined);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('SIGKILL during a wake (three moments): after a restart the sandbox reads true, has its session, and its app answers', async () => {
    const r = row('SIGKILL during a wake (x3)');
    const pause = (ms: number) => new Promise<void>((res) => setTimeout(res, ms));
    const moments: Array<[string, (started: Promise<void>) => Promise<void>]> = [
      ['as the wake is asked for', () => pause(100)],
      ['as the container starts', (started) => started],
      ['a second after the container started', async (started) => { await started; await pause(1000); }],
    ];
    for (const [moment, wait] of moments) {
      await ensureUp();
      await putToSleep(web.name);
      const { seen: started } = await engineEvent(docker, web.name, 'start', 60_000); // subscribed before the wake is asked for
      started.catch(() => undefined); // the first moment kills before it
      const wake = api('POST', `/api/sandboxes/${web.name}/start`);
      await wait(started);
      await svc.kill('SIGKILL');
      r.faults += 1;
      await wake; // its connection died with the service: the fault, not a failed request
      await checkRegistry(r, 0);
      await restart();
      await checkRegistry(r, 1);
      await checkTruth(r, web.name);
      // A client goes on: it wakes the sandbox if it is not running, then uses the app.
      if ((await view(web.name)).status !== 'running') {
        const again = await api('POST', `/api/sandboxes/${web.name}/start`);
        if (again.status !== 200) r.requestsFailed.push(`start after the kill ${moment}: ${again.status} ${JSON.stringify(again.body)}`);
      }
      const answered = await eventually(async () => (await appGet(web.name)).body.includes('the-app'), 'the app', 60_000).catch(() => false);
      if (!answered) r.wrongStates.push(`killed ${moment}: the app address never answered (${JSON.stringify(await appGet(web.name))})`);
      await checkTruth(r, web.name);
    }
    settle(r);
  });

  it('SIGKILL during a 64 MiB upload: nothing half-written under the final name, earlier files intact', async () => {
    const r = row('SIGKILL during a 64 MiB upload');
    await ensureUp();
    const sb = await create('upload');
    const keep = randomBytes(MiB);
    assert.equal(await upload(sb.name, '/root/keep.bin', keep), 200);
    const big = randomBytes(64 * MiB);

    // The upload streams slowly enough to be cut in the middle: 1 MiB pieces, following backpressure.
    const req = http.request(`${svc.apiUrl}/api/sandboxes/${sb.name}/files/content?path=${encodeURIComponent('/root/big.bin')}`, {
      method: 'PUT', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': String(big.length) },
    });
    let answered = false;
    const answer = new Promise<number>((resolve) => {
      req.on('response', (res) => { answered = true; res.resume(); resolve(res.statusCode ?? 0); });
      req.on('error', () => { answered = true; resolve(0); });
    });
    let sent = 0;
    const write = async () => {
      while (sent < big.length) {
        const piece = big.subarray(sent, sent + MiB);
        sent += piece.length;
        // an early answer (a refusal) ends the wait too: the assertion below then says why
        if (!req.write(piece)) await new Promise((res) => { req.once('drain', res); req.once('close', res); req.once('response', res); });
        if (answered) return;
        if (sent === 24 * MiB) return; // the rest never comes: the service is killed with 24 MiB in
      }
    };
    await write();
    assert.equal(sent, 24 * MiB, 'the upload was under way when the service was killed');
    await svc.kill('SIGKILL');
    r.faults += 1;
    req.destroy();
    await answer;
    await restart();
    await checkTruth(r, sb.name);
    if ((await download(sb.name, '/root/keep.bin')) !== sha(keep)) r.filesLost.push('keep.bin, uploaded before the kill');
    const half = await download(sb.name, '/root/big.bin');
    if (half !== 404 && half !== sha(big)) r.filesLost.push(`big.bin under its final name is neither absent nor whole (${half})`);
    const again = await upload(sb.name, '/root/big.bin', big);
    if (again !== 200) r.requestsFailed.push(`the upload again after the restart: ${again}`);
    if ((await download(sb.name, '/root/big.bin')) !== sha(big)) r.filesLost.push('big.bin uploaded again');
    settle(r);
  });

  it('SIGKILL during a deep sleep: the sandbox ends in deep sleep, wakes with its files', async () => {
    const r = row('SIGKILL during a deep sleep');
    await ensureUp();
    const sb = await create('deep', { deep_sleep_after: '2s' });
    const marker = randomBytes(4096);
    assert.equal(await upload(sb.name, '/root/marker.bin', marker), 200);
    const going = svc.waitLog(new RegExp(`"sandbox":"${sb.name}".*going into deep sleep`), 90_000);
    assert.equal((await api('PATCH', `/api/sandboxes/${sb.name}`, { idle_timeout: '1s' })).status, 200);
    await going; // asleep for 2 s: the deep-sleep timer fired and takes the container down
    await svc.kill('SIGKILL');
    r.faults += 1;
    await restart();
    assert.equal((await api('PATCH', `/api/sandboxes/${sb.name}`, { idle_timeout: '1h' })).status, 200);
    await checkTruth(r, sb.name);
    const deep = await eventually(async () => (await view(sb.name)).status === 'deep_sleep' && (await truth(sb.name)) === 'deep_sleep', `${sb.name} in deep sleep`, 60_000).catch(() => false);
    if (!deep) r.wrongStates.push(`${sb.name} never reached deep sleep (${(await view(sb.name)).status})`);
    const wake = await api('POST', `/api/sandboxes/${sb.name}/start`);
    if (wake.status !== 200) r.requestsFailed.push(`wake from deep sleep: ${wake.status} ${JSON.stringify(wake.body)}`);
    await checkTruth(r, sb.name);
    if ((await download(sb.name, '/root/marker.bin')) !== sha(marker)) r.filesLost.push('/root/marker.bin after deep sleep');
    settle(r);
  });

  it('SIGKILL during an archive (DELETE): the sandbox reads archived, the archive is whole, nothing is left', async () => {
    const r = row('SIGKILL during an archive');
    await ensureUp();
    const sb = await create('arch');
    const marker = randomBytes(4096);
    assert.equal(await upload(sb.name, '/root/marker.bin', marker), 200);
    const { seen: died } = await engineEvent(docker, sb.name, 'die', 60_000);
    const del = api('DELETE', `/api/sandboxes/${sb.name}`);
    await died; // stopping the container: the archive is under way
    await svc.kill('SIGKILL');
    r.faults += 1;
    await del;
    await restart();
    const read = await api('GET', `/api/sandboxes/${sb.name}`);
    if (read.status === 200) r.wrongStates.push(`${sb.name} reads as a live sandbox after its DELETE was accepted`);
    const left = async () => {
      const filters = { label: [`svc.sandbox=${sb.name}`] };
      const containers = await docker.listContainers({ all: true, filters });
      const { Volumes } = await docker.listVolumes({ filters });
      return containers.length + (Volumes?.length ?? 0);
    };
    const clean = await eventually(async () => (await left()) === 0, `${sb.name}: nothing left on the engine`, 60_000).catch(() => false);
    if (!clean) r.wrongStates.push(`${sb.name}: ${await left()} containers/volumes left after the restart`);
    const archiveRoot = path.join(env.dataDir, 'archive');
    const archives = fs.existsSync(archiveRoot) ? fs.readdirSync(archiveRoot).filter((d) => d.startsWith(`${sb.name}-`)) : [];
    const folder = archives.length === 1 ? path.join(env.dataDir, 'archive', archives[0]!) : undefined;
    if (!folder || !fs.existsSync(path.join(folder, 'sandbox.json'))) r.filesLost.push(`the archive of ${sb.name} (${archives.join(', ')})`);
    else {
      const { stdout } = await run('tar', ['-xzOf', path.join(folder, 'root.tar.gz'), 'root/marker.bin'], { encoding: 'buffer', maxBuffer: 16 * MiB });
      if (sha(stdout) !== sha(marker)) r.filesLost.push('/root/marker.bin in the archive');
    }
    settle(r);
  });

  it('a sandbox container killed, then removed, behind the service\'s back during traffic', async () => {
    const r = row('sandbox container killed, then removed');
    await ensureUp();
    const sb = await create('gone');
    const marker = randomBytes(4096);
    assert.equal(await upload(sb.name, '/root/marker.bin', marker), 200);
    let traffic = true;
    const reads = (async () => {
      while (traffic) {
        const res = await api('GET', `/api/sandboxes/${sb.name}`);
        if (res.status !== 200) r.requestsFailed.push(`GET during the faults: ${res.status}`);
        await new Promise((res) => setTimeout(res, 200));
      }
    })();
    try {
      await docker.getContainer(sb.name).kill();
      r.faults += 1;
      const asleep = await eventually(async () => { const v = await view(sb.name); return v.status !== 'running' && v.stops_at === null && (await truth(sb.name)) === v.status; }, 'killed: not running', 30_000).catch(() => false);
      // the restart policy may bring it back by itself (unless-stopped): the API must still agree
      if (!asleep) await checkTruth(r, sb.name);
      await docker.getContainer(sb.name).remove({ force: true });
      r.faults += 1;
      const deep = await eventually(async () => (await view(sb.name)).status === 'deep_sleep', 'removed: deep sleep', 30_000).catch(() => false);
      if (!deep) r.wrongStates.push(`${sb.name} removed, reads ${(await view(sb.name)).status}`);
      const wake = await api('POST', `/api/sandboxes/${sb.name}/start`);
      if (wake.status !== 200) r.requestsFailed.push(`wake after removal: ${wake.status} ${JSON.stringify(wake.body)}`);
      await checkTruth(r, sb.name);
      if ((await download(sb.name, '/root/marker.bin')) !== sha(marker)) r.filesLost.push('/root/marker.bin after the container was removed');
    } finally {
      traffic = false;
      await reads;
    }
    settle(r);
  });

  it('Redis flushed and restarted empty under traffic: sessions and timers rebuilt, nobody asleep early', async () => {
    const r = row('Redis flushed, restarted empty');
    await ensureUp();
    if ((await view(web.name)).status !== 'running') assert.equal((await api('POST', `/api/sandboxes/${web.name}/start`)).status, 200);
    assert.equal((await api('PATCH', `/api/sandboxes/${web.name}`, { idle_timeout: '20s' })).status, 200);
    const idle = await create('idle', { idle_timeout: '15s' });
    let traffic = true;
    const kept = (async () => {
      while (traffic) {
        const res = await appGet(web.name);
        if (!res.body.includes('the-app')) r.requestsFailed.push(`app request while Redis was away: ${res.status} ${res.waiting ? '(waiting page)' : res.body.slice(0, 80)}`);
        if ((await truth(web.name)) !== 'running') r.wrongStates.push(`${web.name} asleep although its app had traffic`);
        await new Promise((res) => setTimeout(res, 1000));
      }
    })();
    try {
      await redis.down();
      await redis.up();
      r.faults += 1;
      const flushedAt = Date.now();
      // the reconcile schedule is put back within 10 s and reconciles: the idle sandbox gets a
      // session again (a full idle timeout from then), then falls asleep when it runs out
      const session = await eventually(async () => (await view(idle.name)).stops_at, `${idle.name}: session rebuilt`, 45_000).catch(() => null);
      if (!session) r.wrongStates.push(`${idle.name}: no session after Redis came back`);
      else if (Date.parse(session) - flushedAt < 10_000) r.wrongStates.push(`${idle.name}: its rebuilt session ends early (${Date.parse(session) - flushedAt} ms after the flush)`);
      const slept = await eventually(async () => (await truth(idle.name)) === 'exited', `${idle.name} asleep`, 60_000).catch(() => false);
      if (!slept) r.wrongStates.push(`${idle.name} never fell asleep after Redis came back empty`);
      else if (Date.now() - flushedAt < 10_000) r.wrongStates.push(`${idle.name} fell asleep early`);
      await checkTruth(r, idle.name);
    } finally {
      traffic = false;
      await kept;
    }
    await checkTruth(r, web.name);
    assert.equal((await api('PATCH', `/api/sandboxes/${web.name}`, { idle_timeout: '1h' })).status, 200);
    settle(r);
  });

  it('SIGTERM with Redis down: the service exits within seconds', async () => {
    const r = row('SIGTERM with Redis down');
    await ensureUp();
    await redis.down();
    r.faults += 1;
    const ms = await svc.terminate(30_000);
    console.log(`# SIGTERM with Redis down: the service was gone after ${(ms / 1000).toFixed(1)} s`);
    if (ms >= 25_000) r.wrongStates.push(`the service took ${ms} ms to exit after SIGTERM (Redis down)`);
    await checkRegistry(r, 0);
    await redis.up();
    await restart();
    settle(r);
  });

  it('100 concurrent wakes from the API and the edge start the container once; two service processes still once', async () => {
    const r = row('100 wakes (API + edge), 20 from two processes');
    await ensureUp();
    await putToSleep(web.name);
    const counter = await watchStarts(docker, web.name);
    const results = await Promise.all([
      ...Array.from({ length: 50 }, () => api('POST', `/api/sandboxes/${web.name}/start`).then((res) => res.status === 200 || `API start: ${res.status} ${JSON.stringify(res.body)}`)),
      ...Array.from({ length: 50 }, () => appGet(web.name).then((res) => res.status === 200 || `edge: ${res.status} ${res.body.slice(0, 80)}`)),
    ]);
    r.faults += 100;
    for (const res of results) if (res !== true) r.requestsFailed.push(res);
    await eventually(async () => (await view(web.name)).status === 'running', 'running', 60_000);
    const once = await counter.stop();
    if (once.policyRestarts) console.log(`# the restart policy restarted ${web.name} ${once.policyRestarts} time(s)`);
    if (once.starts !== 1) r.wrongStates.push(`100 wakes started the container ${once.starts} times`);

    // a second process on the same Redis and store: wakes from deep sleep through both
    const other = new ServiceProcess({ ...env, httpsPort: await freePort(), apiPort: await freePort() });
    await other.start();
    try {
      assert.equal((await api('PATCH', `/api/sandboxes/${web.name}`, { deep_sleep_after: '1s' })).status, 200);
      await putToSleep(web.name);
      await eventually(async () => (await truth(web.name)) === 'deep_sleep', 'deep sleep', 60_000);
      assert.equal((await api('PATCH', `/api/sandboxes/${web.name}`, { deep_sleep_after: '7d' })).status, 200);
      const counting = await watchStarts(docker, web.name);
      const both = await Promise.all([svc, other].flatMap((target) => Array.from({ length: 10 }, () => api('POST', `/api/sandboxes/${web.name}/start`, undefined, target))));
      r.faults += 20;
      for (const res of both) if (res.status !== 200) r.requestsFailed.push(`start through two processes: ${res.status} ${JSON.stringify(res.body)}`);
      const twice = await counting.stop();
      if (twice.creates !== 1 || twice.starts !== 1) r.wrongStates.push(`two processes: ${twice.creates} creates, ${twice.starts} starts`);
    } finally {
      await other.terminate(25_000);
    }
    await checkTruth(r, web.name);
    settle(r);
  });
});
