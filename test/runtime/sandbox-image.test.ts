// Integration test of the sandbox image with the host options from lifecycle/runtime/host-config.ts:
// a real sandbox container on the host engine, its inner dockerd over mutual TLS, a real image build and
// real containers inside, then stop/start as sleep/wake does it. Needs the host engine and the images
// from `bash scripts/setup.sh` (npm test runs it first).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir, access } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import https from 'node:https';
import http from 'node:http';
import Docker from 'dockerode';
import { loadConfig } from '../../core/config.ts';
import { delegateCgroups } from '../../lifecycle/runtime/cgroup-delegation.ts';
import { sandboxContainerOptions } from '../../lifecycle/runtime/host-config.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const FIXTURE = 'svc-fixture-busybox:latest';
// The engine's server certificate names this host; the docker CLI reaches it through a private /etc/hosts.
const ENGINE_HOST = 'sbx-engine.test';

// the engine that runs sandboxes, with the runtime mode the service would use on it
const docker = sandboxDocker();
const config = loadConfig();
// the image the service would run (SVC_SANDBOX_IMAGE: a build under test)
const IMAGE = config.sandboxImage;
const limits = { memoryMb: config.sandboxMemoryMb, cpus: config.sandboxCpus, pids: config.sandboxPids };

/** start() as the runtime does it: the container, then (in a user namespace) its own cgroups. */
async function startSandbox(container: Docker.Container): Promise<void> {
  await container.start();
  await delegateCgroups((await container.inspect()).State.Pid);
}

interface Run {
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeout?: number } = {}): Promise<Run> {
  return new Promise((done, fail) => {
    execFile(cmd, args, { maxBuffer: 64 << 20, timeout: opts.timeout ?? 120_000, ...opts }, (err, stdout, stderr) => {
      if (err) fail(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
      else done({ stdout: stdout.toString(), stderr: stderr.toString() });
    });
  });
}

async function certs(dir: string): Promise<{ ca: string; serverCert: string; serverKey: string; clientDir: string }> {
  const ssl = (...args: string[]) => run('openssl', args, { cwd: dir });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=svc test CA');
  await writeFile(join(dir, 'server.ext'), `subjectAltName=DNS:${ENGINE_HOST}\nextendedKeyUsage=serverAuth\n`);
  await writeFile(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const who of ['server', 'client']) {
    await ssl('req', ...ec, '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=${who === 'server' ? ENGINE_HOST : 'client'}`);
    await ssl('x509', '-req', '-in', `${who}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
      '-out', `${who}.pem`, '-days', '2', '-extfile', `${who}.ext`);
  }
  const clientDir = join(dir, 'client');
  await mkdir(clientDir);
  await writeFile(join(clientDir, 'ca.pem'), await readFile(join(dir, 'ca.pem')));
  await writeFile(join(clientDir, 'cert.pem'), await readFile(join(dir, 'client.pem')));
  await writeFile(join(clientDir, 'key.pem'), await readFile(join(dir, 'client.key')), { mode: 0o600 });
  return {
    ca: await readFile(join(dir, 'ca.pem'), 'utf8'),
    serverCert: await readFile(join(dir, 'server.pem'), 'utf8'),
    serverKey: await readFile(join(dir, 'server.key'), 'utf8'),
    clientDir,
  };
}

/** GET /_ping on the inner engine over mutual TLS; resolves true on "OK". */
function ping(ip: string, tls: { ca: Buffer; cert: Buffer; key: Buffer }): Promise<boolean> {
  return new Promise((done) => {
    const req = https.get({ host: ip, port: 2376, path: '/_ping', servername: ENGINE_HOST, ...tls, agent: false, timeout: 1000 }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => done(res.statusCode === 200 && body === 'OK'));
    });
    req.on('error', () => done(false));
    req.on('timeout', () => req.destroy());
  });
}

function httpGet(url: string): Promise<string> {
  return new Promise((done, fail) => {
    http.get(url, { timeout: 3000 }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? done(body) : fail(new Error(`${url}: HTTP ${res.statusCode}`))));
    }).on('error', fail);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function ipOf(container: Docker.Container, network: string): Promise<string> {
  const info = await container.inspect();
  const ip = info.NetworkSettings.Networks[network]?.IPAddress;
  assert.ok(ip, `sandbox has no address on ${network}`);
  return ip;
}

/** Where the time of a start went, from the entrypoint's trace lines and dockerd's own log. */
async function startBreakdown(container: Docker.Container, since: number): Promise<string> {
  const logs = (await container.logs({ stdout: true, stderr: true, since: Math.floor(since / 1000) })).toString();
  const at = (re: RegExp) => {
    const m = logs.match(re);
    return m ? `+${Date.parse(m[1].replace(/(\.\d{3})\d*/, '$1')) - since} ms` : '?';
  };
  return [
    `entrypoint ${at(/\[svc-entrypoint\] (\S+) start/)}`,
    `dockerd exec'd ${at(/\[svc-entrypoint\] (\S+) sshd/)}`,
    `loading containers ${at(/time="([^"]+)" level=\w+ msg="Loading containers: start/)}`,
    `loaded ${at(/time="([^"]+)" level=\w+ msg="Loading containers: done/)}`,
    `API ${at(/time="([^"]+)" level=\w+ msg="API listen on/)}`,
  ].join(', ');
}

/** start() the sandbox and wait until its inner engine answers _ping over TLS; returns ms and the IP. */
async function startAndPing(container: Docker.Container, network: string, tls: { ca: Buffer; cert: Buffer; key: Buffer }) {
  const wall = Date.now();
  const t0 = performance.now();
  await startSandbox(container);
  const started = performance.now() - t0;
  const ip = await ipOf(container, network);
  const deadline = t0 + 60_000;
  while (!(await ping(ip, tls))) {
    if (performance.now() > deadline) {
      const logs = await container.logs({ stdout: true, stderr: true, tail: 40 });
      assert.fail(`inner engine did not answer within 60 s; sandbox log:\n${logs.toString()}`);
    }
    await sleep(10);
  }
  const ms = performance.now() - t0;
  return { ms, startMs: started, ip, breakdown: await startBreakdown(container, wall) };
}

async function preflight() {
  try {
    await docker.ping();
  } catch (e) {
    assert.fail(`the sandbox engine does not answer (${(e as Error).message}); run: bash scripts/setup.sh`);
  }
  for (const image of [IMAGE]) {
    await docker.getImage(image).inspect().catch(() => assert.fail(`image ${image} is missing; run: bash scripts/setup.sh`));
  }
  await access(join(ROOT, 'fixtures/busybox/.build/rootfs/bin/busybox')).catch(() =>
    assert.fail('fixtures/busybox/.build is missing; run: bash scripts/setup.sh'));
  await removeLeftovers();
}

/** Sandboxes of runs that were killed before their cleanup (older than an hour: not a parallel run's). */
async function removeLeftovers() {
  const filters = { label: ['svc.test=sandbox-image'] };
  const old = (created: number | string) => Date.now() - new Date(typeof created === 'number' ? created * 1000 : created).getTime() > 3600_000;
  for (const c of await docker.listContainers({ all: true, filters })) {
    if (old(c.Created)) await docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => {});
  }
  for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) {
    const created = (v as { CreatedAt?: string }).CreatedAt;
    if (created && old(created)) await docker.getVolume(v.Name).remove().catch(() => {});
  }
  for (const n of await docker.listNetworks({ filters })) {
    if (old(n.Created)) await docker.getNetwork(n.Id).remove().catch(() => {});
  }
}

/** A network, five volumes and a sandbox container from sandboxContainerOptions, all removed after t. */
async function makeSandbox(t: TestContext, env: string[]) {
  const name = `svc-imgtest-${randomBytes(3).toString('hex')}`;
  const network = `${name}-net`;
  const vol = (v: string) => `${name}-${v}`;
  const volumes = { root: vol('root'), home: vol('home'), srv: vol('srv'), opt: vol('opt'), docker: vol('docker') };
  const transferFolder = await mkdtemp(join(tmpdir(), `${name}-transfer-`));
  t.after(async () => {
    await rm(transferFolder, { recursive: true, force: true });
    await docker.getContainer(name).remove({ force: true, v: true }).catch(() => {});
    for (const v of Object.values(volumes)) await docker.getVolume(v).remove().catch(() => {});
    await docker.getNetwork(network).remove().catch(() => {});
  });
  await docker.createNetwork({ Name: network, Driver: 'bridge', Labels: { 'svc.test': 'sandbox-image' } });
  for (const v of Object.values(volumes)) await docker.createVolume({ Name: v, Labels: { 'svc.test': 'sandbox-image' } });
  const container = await docker.createContainer(
    sandboxContainerOptions({ name, image: IMAGE, network, volumes, transferFolder, env, labels: { 'svc.test': 'sandbox-image' }, runtime: config.sandboxRuntime, limits }),
  );
  return { name, network, container };
}

test('sandbox image: inner engine over TLS, ssh, and what survives a stop/start', { timeout: 600_000 }, async (t) => {
  await preflight();
  const dir = await mkdtemp(join(tmpdir(), 'svc-imgtest-'));
  t.after(() => rm(dir, { recursive: true, force: true }));

  const c = await certs(dir);
  await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'svc-test', '-f', join(dir, 'id')]);
  const pubKey = (await readFile(join(dir, 'id.pub'), 'utf8')).trim();
  const tls = {
    ca: await readFile(join(c.clientDir, 'ca.pem')),
    cert: await readFile(join(c.clientDir, 'cert.pem')),
    key: await readFile(join(c.clientDir, 'key.pem')),
  };

  const sb = await makeSandbox(t, [
    `SVC_TLS_CA=${c.ca}`,
    `SVC_TLS_CERT=${c.serverCert}`,
    `SVC_TLS_KEY=${c.serverKey}`,
    `SVC_SSH_AUTHORIZED_KEYS=# managed by the service\n${pubKey}`,
    'SVC_ENTRYPOINT_TRACE=1',
  ]);

  const first = await startAndPing(sb.container, sb.network, tls);
  console.log(`first start: container.start() ${first.startMs.toFixed(0)} ms, inner engine answers _ping after ${first.ms.toFixed(0)} ms (${first.breakdown})`);

  // The docker CLI, against the inner engine with verified TLS, resolving ENGINE_HOST in a private
  // mount namespace so the machine's /etc/hosts stays untouched.
  const hostsFile = join(dir, 'hosts');
  const setHosts = (ip: string) => writeFile(hostsFile, `127.0.0.1 localhost\n${ip} ${ENGINE_HOST}\n`);
  const innerEnv = {
    ...process.env,
    DOCKER_HOST: `tcp://${ENGINE_HOST}:2376`,
    DOCKER_TLS_VERIFY: '1',
    DOCKER_CERT_PATH: c.clientDir,
    DOCKER_CONFIG: join(dir, 'docker-config'),
    DOCKER_BUILDKIT: '0',
  };
  const inner = async (...args: string[]) =>
    (await run('unshare', ['-m', '--propagation', 'private', 'sh', '-c', 'mount --bind "$0" /etc/hosts && exec docker "$@"', hostsFile, ...args],
      { env: innerEnv, cwd: ROOT })).stdout.trim();
  const inSandbox = async (cmd: string) => (await run('docker', [...SANDBOX_CLI, 'exec', sb.name, 'sh', '-c', cmd])).stdout.trim();
  const sshArgs = (ip: string) => ['-i', join(dir, 'id'), '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=no',
    '-o', `UserKnownHostsFile=${join(dir, 'known_hosts')}`, '-o', 'ConnectTimeout=5', `root@${ip}`];
  const hostKey = async (ip: string) => (await run('ssh-keyscan', ['-t', 'ed25519', ip])).stdout.split(' ').slice(1).join(' ').trim();

  await setHosts(first.ip);
  // a supported engine (Debian 13's docker.io 26), and compose v2 + buildx for ssh sessions inside
  const version = await inner('version', '--format', '{{.Server.Version}}');
  assert.ok(Number(version.split('.')[0]) >= 26, `engine ${version}`);
  assert.match(await inSandbox('docker compose version --short && docker buildx version'), /^v?2\.\d+[\s\S]*buildx/);

  // without a client certificate the engine refuses
  await assert.rejects(run('curl', ['-sS', '--cacert', join(c.clientDir, 'ca.pem'), '--resolve', `${ENGINE_HOST}:2376:${first.ip}`,
    `https://${ENGINE_HOST}:2376/_ping`]));

  // ssh as root with the key from SVC_SSH_AUTHORIZED_KEYS; the session's docker CLI uses the inner engine
  assert.equal((await run('ssh', [...sshArgs(first.ip), 'docker info --format {{.Name}}'])).stdout.trim(), sb.name);
  const keyBefore = await hostKey(first.ip);
  assert.match(keyBefore, /^ssh-ed25519 /);
  assert.equal(await inSandbox('stat -c %a /etc/docker/tls/key.pem'), '400');
  assert.equal(await inSandbox('stat -c %a /root/.ssh/authorized_keys'), '600');

  // no image can be pulled: build the fixture inside, from the same context setup uses
  await inner('build', '-q', '-t', FIXTURE, 'fixtures/busybox');
  await inner('volume', 'create', 'svcdata');
  // sh traps TERM so the containers stop at once instead of after the 10 s kill timeout
  const idle = 'trap "exit 0" TERM; sleep 1000000 & wait';
  await inner('run', '-d', '--name', 'keep', '--restart', 'unless-stopped', '-p', '8080:80', '-v', 'svcdata:/data', FIXTURE,
    'sh', '-c', `httpd -p 80 -h /data; ${idle}`);
  await inner('run', '-d', '--name', 'once', '-v', 'svcdata:/data', FIXTURE, 'sh', '-c', idle);
  await inner('run', '-d', '--name', 'manual', '--restart', 'unless-stopped', FIXTURE, 'sh', '-c', idle);
  await inner('stop', 'manual');
  await inner('run', '--rm', '-v', 'svcdata:/data', FIXTURE, 'sh', '-c', 'echo volume-data > /data/file.txt');
  await inSandbox('echo root-data > /root/file.txt');
  // keys pushed into a running sandbox (as lifecycle/ does) must survive the next start, which does not
  // re-apply the creation-time SVC_SSH_AUTHORIZED_KEYS
  const pushedKeys = `${pubKey}\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPushedKeyPushedKeyPushedKeyPushedKey0000 pushed`;
  await inSandbox(`printf '%s\\n' '${pushedKeys.replace(/\n/g, "' '")}' > /root/.ssh/authorized_keys`);
  // a published port of an inner container is reachable at the sandbox's address
  assert.equal((await httpGet(`http://${first.ip}:8080/file.txt`)).trim(), 'volume-data');

  const tStop = performance.now();
  await sb.container.stop();
  const stopMs = performance.now() - tStop;

  const wake = await startAndPing(sb.container, sb.network, tls);
  console.log(`wake: container.stop() took ${stopMs.toFixed(0)} ms; container.start() ${wake.startMs.toFixed(0)} ms, ` +
    `inner engine answers _ping after ${wake.ms.toFixed(0)} ms (${wake.breakdown})`);
  await setHosts(wake.ip);

  assert.equal(await inSandbox('cat /root/file.txt'), 'root-data');
  assert.equal(await inSandbox('cat /root/.ssh/authorized_keys'), pushedKeys);
  assert.equal(await inner('run', '--rm', '-v', 'svcdata:/data', FIXTURE, 'cat', '/data/file.txt'), 'volume-data');
  // only the container with a restart policy that was running comes back
  assert.deepEqual((await inner('ps', '--format', '{{.Names}}')).split('\n'), ['keep']);
  assert.equal(await inner('inspect', '-f', '{{.State.Status}} {{.State.ExitCode}}', 'once'), 'exited 0');
  assert.equal(await inner('inspect', '-f', '{{.State.Status}}', 'manual'), 'exited');
  assert.equal((await httpGet(`http://${wake.ip}:8080/file.txt`)).trim(), 'volume-data');
  // the inner engine's bridge asks for a container's address every 10 ms (the kernel keeps it in ticks:
  // 12 at 250 Hz), not every second, up to 30 times: a wake's first connection to an app, sent before
  // the app's container was there, is answered as soon as it runs
  assert.ok(Number(await inSandbox('cat /proc/sys/net/ipv4/neigh/docker0/retrans_time_ms')) <= 20);
  assert.equal(await inSandbox('cat /proc/sys/net/ipv4/neigh/docker0/mcast_solicit'), '30');
  // the restarted app's network hook was the image's setkey, not dockerd's binary run again (runtime)
  const keepId = await inner('inspect', '-f', '{{.Id}}', 'keep');
  assert.match(await inSandbox(`cat /run/containerd/io.containerd.runtime.v2.task/moby/${keepId}/config.json`),
    /"prestart":\[\{"path":"\/usr\/local\/libexec\/svc\/setkey","args":\["libnetwork-setkey"/);
  // dockerd's two `runc features` at its start were answered from the container's own layer (runc)
  assert.match(await inSandbox('cat /var/cache/svc/runc-features.json'), /"mountOptions"/);
  assert.match(await inSandbox('runc --version'), /^runc version/);
  if (config.sandboxRuntime === 'userns') {
    // and the sandbox engine's (scripts/sandbox-engine.sh) for the sandbox container itself
    const bundle = `/run/svc-sandbox-docker/containerd/daemon/io.containerd.runtime.v2.task/moby/${(await sb.container.inspect()).Id}`;
    assert.match(await readFile(`${bundle}/config.json`, 'utf8'), /"path":"\/usr\/local\/libexec\/svc-sandbox-docker\/setkey"/);
  }
  // inner containers start on crun (the image's daemon.json), also below a cgroup of the user's own: on
  // cgroup v1 crun leaves a new cpuset cgroup empty, and the entrypoint's clone_children fills it in
  assert.equal(await inner('inspect', '-f', '{{.HostConfig.Runtime}}', 'keep'), 'crun');
  assert.equal(await inner('run', '--rm', '--cgroup-parent', '/users-own/app', FIXTURE, 'echo', 'started'), 'started');
  // same host key after the restart: it lives on the /var/lib/docker volume
  assert.equal(await hostKey(wake.ip), keyBefore);
  assert.equal((await run('ssh', [...sshArgs(wake.ip), 'cat /root/file.txt'])).stdout.trim(), 'root-data');
  // the stop was clean: dockerd stopped its containers and left no network state to clean up
  const logs = (await sb.container.logs({ stdout: true, stderr: true })).toString();
  assert.doesNotMatch(logs, /Removing stale sandbox/);
});

// Restarts the sandbox engine: every sandbox on this machine stops for a few seconds. npm test runs
// test files one at a time, so nothing else of ours is running; never run it beside other work.
test('sandbox containers across a sandbox engine restart: running ones come back, stopped ones stay stopped',
  { timeout: 300_000 },
  async (t) => {
    await preflight();
    const running = await makeSandbox(t, []);
    const asleep = await makeSandbox(t, []);
    const innerAnswers = async (name: string) =>
      (await run('docker', [...SANDBOX_CLI, 'exec', name, 'docker', 'version', '--format', '{{.Server.Version}}']).catch(() => ({ stdout: '' }))).stdout.trim() !== '';
    const waitInner = async (name: string) => {
      for (let i = 0; i < 600 && !(await innerAnswers(name)); i++) await sleep(100);
      assert.ok(await innerAnswers(name), `inner engine of ${name} does not answer`);
    };
    await startSandbox(running.container);
    await startSandbox(asleep.container);
    await waitInner(running.name);
    await waitInner(asleep.name);
    await asleep.container.stop();

    const pid = (await readFile(config.sandboxRuntime === 'unisolated' ? '/var/run/docker.pid' : '/run/svc-sandbox-docker.pid', 'utf8')).trim();
    process.kill(Number(pid), 'SIGTERM');
    for (let i = 0; i < 600; i++) {
      try {
        process.kill(Number(pid), 0);
        await sleep(100);
      } catch {
        break;
      }
    }
    await run('bash', [join(ROOT, 'scripts/setup.sh'), '--ensure'], { timeout: 120_000 });

    const state = async (c: Docker.Container) => (await c.inspect()).State;
    for (let i = 0; i < 300 && !(await state(running.container)).Running; i++) await sleep(100);
    assert.equal((await state(running.container)).Running, true, 'a running sandbox comes back after the engine restart');
    // the engine restarted it: its cgroups are new, and the service's reconcile pass hands them over
    await delegateCgroups((await state(running.container)).Pid);
    await waitInner(running.name);
    assert.equal((await state(asleep.container)).Running, false, 'an asleep sandbox stays stopped');
  });
