import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { watchStarts } from '../helpers/container-starts.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';

const run = promisify(execFile);
const docker = sandboxDocker();
const FIXTURE = path.resolve('fixtures/busybox');

/**
 * The whole life of a sandbox, driven through the HTTP API and the real docker CLI. One sandbox made
 * in `before` (with an app that restarts and one that does not, a file in /root and one in an app
 * volume); each test first brings it back to running with its usual settings, so a failure hides no
 * other test. The archive test has a sandbox of its own.
 */
describe('sandbox lifecycle', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let name: string;
  let cli: EngineCli;
  /** The create's answer (status 201). */
  let created: any;

  const get = async (sandbox = name) => (await t.api('GET', `/api/sandboxes/${sandbox}`, alice.token)).body;
  const status = async () => (await get()).status as string;
  const hostExec = async (cmd: string, sandbox = name) => (await run('docker', [...SANDBOX_CLI, 'exec', sandbox, 'sh', '-c', cmd])).stdout;
  const runningApps = async () => (await cli.docker(['ps', '--format', '{{.Names}}'])).stdout.split('\n').filter(Boolean).sort();
  const followAddress = async () => {
    const state = await t.service.lifecycle.status(name);
    assert.ok(state.address, 'a running sandbox has an address');
    cli.setAddress(state.address);
  };
  /** Running, with idle_timeout 1h and deep sleep after 7d, its engine followed at its address. */
  const ready = async () => {
    const patched = await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h', deep_sleep_after: '7d' });
    assert.equal(patched.status, 200, answerOf(patched));
    if ((await status()) !== 'running') {
      const started = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
      assert.equal(started.status, 200, answerOf(started));
    }
    await followAddress();
    await eventually(async () => (await cli.docker(['version', '--format', '{{.Server.Version}}'])).stdout.trim(), 'the inner engine', 30_000);
  };

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    created = await t.api('POST', '/api/sandboxes', alice.token, { name: `life-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(created.status, 201, answerOf(created));
    name = created.body.name;
    const state = await t.service.lifecycle.status(name);
    cli = new EngineCli(created.body.engine_access.host, state.address!, 2376, created.body);
    await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await cli.docker(['run', '-d', '--name', 'keeper', '--restart', 'unless-stopped', '-v', 'appdata:/data', 'busybox-app', 'sh', '-c', 'echo kept > /data/f; exec sleep 100000']);
    await hostExec('echo marker > /root/marker');
  });
  after(async () => {
    cli?.dispose();
    await t?.close();
  });

  it('creates a running sandbox whose record carries engine certificates', async () => {
    const res = created;
    assert.match(name, /^svc-life-/);
    assert.equal(res.body.status, 'running');
    assert.equal(res.body.engine_access.state, 'ready');
    assert.equal(res.body.engine_access.host, `${name}-engine.${t.config.domain}`);
    for (const pem of ['ca_cert', 'client_cert', 'client_key']) assert.ok(/^-----BEGIN [A-Z ]+-----\n/.test(res.body[pem]), `${pem} is PEM`); // match would print the key
    assert.ok(res.body.stops_at, 'a running sandbox has a stop time');
    assert.equal(res.body.hint, undefined);

    const list = await t.api('GET', '/api/sandboxes', alice.token);
    const row = list.body.find((r: { name: string }) => r.name === name);
    assert.ok(row.stops_at && 'deep_sleep_at' in row && row.deep_sleep_after === '7d');
  });

  it('serves its own engine over mutual TLS to the docker CLI, and refuses a client without a certificate', async () => {
    await ready();
    const { stdout } = await cli.docker(['version', '--format', '{{.Server.Version}}']);
    assert.match(stdout.trim(), /^\d+\.\d+/);
    const state = await t.service.lifecycle.status(name);
    const record = await get();
    await assert.rejects(
      new Promise((resolve, reject) => {
        const req = https.get({ host: state.address, port: 2376, path: '/_ping', ca: record.ca_cert, servername: name, checkServerIdentity: () => undefined }, resolve);
        req.on('error', reject);
      }),
      'the inner dockerd must refuse a TLS client without a certificate',
    );
  });

  it('runs apps deployed with the docker CLI; files in /root and in app volumes are kept', async () => {
    await ready();
    await cli.docker(['run', '-d', '--name', 'oneoff', 'busybox-app', 'sleep', '100000']);
    try {
      assert.ok((await runningApps()).includes('oneoff'), 'the new app runs');
      assert.ok((await runningApps()).includes('keeper'));
      assert.equal((await hostExec('cat /root/marker')).trim(), 'marker');
      assert.equal((await cli.docker(['exec', 'keeper', 'cat', '/data/f'])).stdout.trim(), 'kept');
    } finally {
      await cli.docker(['rm', '-f', 'oneoff']);
    }
  });

  it('falls asleep after idle_timeout and wakes on start with files and restartable apps', async () => {
    await ready();
    await cli.docker(['run', '-d', '--name', 'oneoff', 'busybox-app', 'sleep', '100000']);
    const patched = await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '3s' });
    assert.equal(patched.status, 200, answerOf(patched));
    assert.equal(patched.body.idle_timeout, '3s');
    await eventually(async () => (await status()) === 'exited', 'idle sleep', 30_000);
    const asleep = await get();
    assert.equal(asleep.stops_at, null);
    assert.ok(asleep.deep_sleep_at, 'an asleep sandbox shows when it will be taken down');
    assert.match(asleep.hint, /does not wake/);

    assert.equal((await t.api('POST', `/api/sandboxes/${name}/keep-awake`, alice.token)).status, 409, 'keep-awake never wakes');
    assert.equal((await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h' })).status, 200);
    assert.equal(await status(), 'exited', 'changing settings of an asleep sandbox keeps it asleep');

    const started = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
    assert.equal(started.status, 200, answerOf(started));
    assert.equal(started.body.status, 'running');
    await followAddress();
    assert.equal((await hostExec('cat /root/marker')).trim(), 'marker');
    assert.deepEqual(await runningApps(), ['keeper'], 'only unless-stopped/always apps come back');
    assert.equal((await cli.docker(['exec', 'keeper', 'cat', '/data/f'])).stdout.trim(), 'kept');
    await cli.docker(['rm', '-f', 'oneoff']);
  });

  it('sinks into deep sleep (container and network removed, volumes kept) and comes back', async () => {
    await ready();
    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '2s', deep_sleep_after: '2s' });
    await eventually(async () => (await status()) === 'deep_sleep', 'deep sleep', 40_000);
    await assert.rejects(docker.getContainer(name).inspect(), /no such container/i);
    await assert.rejects(docker.getNetwork(name).inspect());
    await docker.getVolume(`${name}-root`).inspect();

    await t.api('PATCH', `/api/sandboxes/${name}`, alice.token, { idle_timeout: '1h', deep_sleep_after: '7d' });
    const started = await t.api('POST', `/api/sandboxes/${name}/start`, alice.token);
    assert.equal(started.status, 200, answerOf(started));
    await followAddress();
    assert.equal((await hostExec('cat /root/marker')).trim(), 'marker');
    assert.deepEqual(await runningApps(), ['keeper']);
    assert.equal((await cli.docker(['exec', 'keeper', 'cat', '/data/f'])).stdout.trim(), 'kept');
  });

  it('starts the container once for a hundred concurrent wakes', async () => {
    await ready();
    await t.service.lifecycle.sleep(name, 'test');
    assert.equal(await status(), 'exited');
    const counter = await watchStarts(docker, name);
    const results = await Promise.all(Array.from({ length: 100 }, () => t.api('POST', `/api/sandboxes/${name}/start`, alice.token)));
    assert.deepEqual([...new Set(results.map((r) => r.status))], [200]);
    const { starts, policyRestarts } = await counter.stop();
    if (policyRestarts) console.log(`# the restart policy restarted ${name} ${policyRestarts} time(s)`);
    assert.equal(starts, 1, 'exactly one container start asked for');
  });

  it('keeps idle sessions across a controller restart', async () => {
    await ready();
    const before = (await get()).stops_at;
    await t.restart();
    const after = await get();
    assert.equal(after.status, 'running');
    assert.equal(after.stops_at, before, 'the session survived the restart unchanged');
    const schedulers = await t.service.lifecycle['deps'].queue.queue.getJobSchedulers();
    assert.ok(schedulers.some((s) => s.key === 'reconcile' && Number(s.every) <= 120_000), 'reconcile runs within two minutes');
  });

  it('notices a sandbox started outside the service and gives it an idle session', async () => {
    await ready();
    await t.service.lifecycle.sleep(name, 'test');
    await docker.getContainer(name).start();
    await eventually(async () => (await status()) === 'running', 'outside start');
    // the every-30-s reconcile may have run since the start: take its session away again
    await t.service.lifecycle['deps'].sessions.close(name);
    assert.equal((await get()).stops_at, null, 'no session yet');
    if (t.config.sandboxRuntime === 'userns') {
      // the service saw the start on the engine's event stream and handed the sandbox its cgroups at once
      const { Id } = await docker.getContainer(name).inspect();
      await eventually(async () => fs.statSync(`/sys/fs/cgroup/pids/svc-sandboxes/${Id}`).uid !== 0, 'cgroups handed over without a reconcile pass', 10_000, 100);
    }
    await t.service.lifecycle.reconcile();
    assert.ok((await get()).stops_at, 'the reconcile pass opened a session');
    await followAddress();
    await eventually(async () => (await cli.docker(['version', '--format', '{{.Server.Version}}'])).stdout.trim(), 'inner engine after outside start', 30_000);
  });

  it('reports a container removed behind its back truthfully, and start brings it back', async () => {
    await ready();
    await docker.getContainer(name).remove({ force: true });
    assert.equal(await status(), 'deep_sleep');
    assert.equal((await t.api('POST', `/api/sandboxes/${name}/start`, alice.token)).status, 200);
    assert.equal(await status(), 'running');
    await followAddress();
    assert.equal((await hostExec('cat /root/marker')).trim(), 'marker');
  });

  it('archives on DELETE: data kept in the archive, gone from the list and the engine', async () => {
    const made = await t.api('POST', '/api/sandboxes', alice.token, { name: `gone-${t.config.redisPrefix}`, idle_timeout: '1h' });
    assert.equal(made.status, 201, answerOf(made));
    const gone: string = made.body.name;
    await hostExec('echo marker > /root/marker', gone);
    const res = await t.api('DELETE', `/api/sandboxes/${gone}`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    const dir = path.join(t.config.dataDir, res.body.archive);
    const listing = (await run('tar', ['-tzf', path.join(dir, 'root.tar.gz')])).stdout;
    assert.match(listing, /root\/marker/);
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'sandbox.json'), 'utf8'));
    assert.equal(config.name, gone);
    assert.ok(!('certs' in config) && !('manager_password' in config), 'no private keys or passwords in the archive configuration');
    assert.equal(fs.statSync(dir).mode & 0o777, 0o700, "the archive is the service's alone");
    assert.ok(!(await t.api('GET', '/api/sandboxes', alice.token)).body.some((r: { name: string }) => r.name === gone));
    const start = await t.api('POST', `/api/sandboxes/${gone}/start`, alice.token);
    assert.equal(start.status, 410);
    assert.equal(start.body.error.code, 'SVC_SANDBOX_ARCHIVED');
    await assert.rejects(docker.getContainer(gone).inspect());
    await assert.rejects(docker.getVolume(`${gone}-root`).inspect());
    assert.equal((await t.api('POST', '/api/sandboxes', alice.token, { name: gone })).status, 409, 'an archived name stays reserved');
  });
});
