import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { ARP_RETRY_MS } from '../../lifecycle/runtime/arp-retries.ts';
import { sandboxName } from '../../lifecycle/names.ts';
import { sandboxBridge } from '../../lifecycle/runtime/docker-runtime.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { testHostAddress, testHostPool, testHostsDown, testHostsUp } from '../../harness/test-hosts.ts';
import { svcCli } from '../helpers/svc-cli.ts';

const run = promisify(execFile);
const FIXTURE = path.resolve('fixtures/busybox');

/**
 * The service with two runner hosts on this machine (scripts/test-hosts.sh) and its own engine drained:
 * sandboxes are spread over the two, reached through the edge by real clients (curl, the docker CLI,
 * ssh), kept apart from each other and from the service's machine, and a host holding one stays.
 */
describe('sandboxes on two runner hosts', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let dir: string;
  let ca: string;
  let port: number;
  const sandboxes: Array<{ name: string; record: any; cli: EngineCli }> = [];

  const host = (label: string) => `${label}.${t.config.domain}`;
  const curl = async (label: string) =>
    (await run('curl', ['-sS', '--max-time', '20', '--cacert', ca, '--resolve', `${host(label)}:${port}:127.0.0.1`, `https://${host(label)}:${port}/`])).stdout;
  const address = async (name: string) => (await t.service.lifecycle.status(name)).address ?? '';

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    port = t.config.httpsPort;
    await testHostsUp(2, t.config);
    // host two's nameservers, as `svc hosts add --dns` records them: its sandboxes' inner containers ask those
    await t.service.store.hosts.put({ ...(await t.service.store.hosts.get('test-2'))!, dns: ['198.51.100.53'] });
    const drained = await svcCli(t.config, 'hosts', 'drain', 'local');
    assert.equal(drained.code, 0, drained.stderr);
    alice = await t.user('alice');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-two-hosts-'));
    ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
    for (const n of [1, 2]) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `h${n}-${t.config.redisPrefix}`, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      sandboxes.push({ name: res.body.name, record: res.body, cli: new EngineCli(res.body.engine_access.host, '127.0.0.1', port, res.body) });
    }
  });
  after(async () => {
    for (const s of sandboxes) s.cli.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
    await testHostsDown();
  });

  it('places new sandboxes on both hosts, each with an address of its host\'s pool; svc hosts list counts them', async () => {
    const pools = await Promise.all(sandboxes.map(async (s) => (await address(s.name)).slice(0, testHostPool(1).length)));
    assert.deepEqual(pools.sort(), [testHostPool(1), testHostPool(2)].sort(), 'one on each host');
    const listed = await svcCli(t.config, 'hosts', 'list', '--json');
    assert.equal(listed.code, 0, listed.stderr);
    const rows = new Map((JSON.parse(listed.stdout) as Array<{ name: string; state: string; sandboxes: number; networks: number }>).map((h) => [h.name, h]));
    assert.deepEqual([rows.get('local')?.state, rows.get('local')?.sandboxes], ['drained', 0]);
    assert.deepEqual([1, 2].map((i) => [rows.get(`test-${i}`)?.state, rows.get(`test-${i}`)?.sandboxes, rows.get(`test-${i}`)?.networks]), [['ready', 1, 4096], ['ready', 1, 4096]]);
    // a test host cuts its pool finer than this machine's engine: a /28 per sandbox network, 4096 in a /16
    for (const { name } of sandboxes) {
      const i = (await address(name)).startsWith(testHostPool(1)) ? 1 : 2;
      const { stdout } = await run('docker', ['-H', `unix:///run/svc-host-${i}.sock`, 'network', 'inspect', '-f', '{{(index .IPAM.Config 0).Subnet}}', name]);
      assert.match(stdout.trim(), /\/28$/);
      // the host's duties (scripts/host-duties.sh) did their part: ARP retries as on this machine's engine
      const arp = await run('nsenter', [`--net=/run/netns/svch${i}`, 'cat', `/proc/sys/net/ipv4/neigh/${sandboxBridge(name)}/retrans_time_ms`]);
      assert.equal(arp.stdout.trim(), String(ARP_RETRY_MS));
      // its engine listens on the host's private address only, not on its sandboxes' bridges
      const listens = await run('nsenter', [`--net=/run/netns/svch${i}`, 'ss', '-Hltn', 'sport = :2376']);
      assert.deepEqual(listens.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/)[3]), [`${testHostAddress(i)}:2376`]);
      const env = (await run('docker', ['-H', `unix:///run/svc-host-${i}.sock`, 'inspect', '-f', '{{range .Config.Env}}{{println .}}{{end}}', name])).stdout;
      assert.match(env, new RegExp(`^SVC_DNS=${i === 2 ? '198\\.51\\.100\\.53' : t.config.sandboxDns.join(',').replace(/\./g, '\\.')}$`, 'm'), 'the host\'s nameservers where recorded, else the service\'s');
    }
    const machines = await t.service.runtime.capacity?.();
    assert.equal(machines?.hosts, 3, 'the admission guard adds up this machine and both hosts');
    const admin = await t.user('root', { admin: true });
    const view = await t.api('GET', '/api/admin/sandboxes', admin.token);
    const hosts = (view.body as Array<{ name: string; host: string }>).filter((s) => sandboxes.some((x) => x.name === s.name)).map((s) => s.host);
    assert.deepEqual(hosts.sort(), ['test-1', 'test-2'], 'admins see each sandbox\'s host');
  });

  it('reaches each through the edge: the engine (docker build and run), the app, its logs, files and ssh', async () => {
    const key = path.join(dir, 'id_ed25519');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
    const added = await t.api('POST', '/api/me/ssh-keys', alice.token, { key: fs.readFileSync(key + '.pub', 'utf8').trim() });
    assert.equal(added.status, 201, answerOf(added));
    for (const { name, cli } of sandboxes) {
      await cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
      const serve = `mkdir -p /www && echo hello-from-${name} > /www/index.html && echo log-of-${name} && exec httpd -f -p 8080 -h /www`;
      await cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'busybox-app', 'sh', '-c', serve]);
      const body = await eventually(async () => {
        const text = await curl(`${name}-web`).catch(() => '');
        return text.includes(`hello-from-${name}`) ? text : null;
      }, `the app of ${name}`, 30_000, 500);
      assert.match(body, /hello-from-/);
      const logs = await t.api('GET', `/api/sandboxes/${name}/logs?tail=10`, alice.token);
      assert.ok((logs.body as Array<{ line: string }>).some((l) => l.line.includes(`log-of-${name}`)), answerOf(logs));
      const put = await fetch(`${t.url}/api/sandboxes/${name}/files/content?path=/root/on-host.txt`, {
        method: 'PUT', headers: { authorization: `Bearer ${alice.token}`, 'content-type': 'application/octet-stream' }, body: `file-of-${name}\n`,
      });
      assert.equal(put.status, 200, await put.text());
      const got = await fetch(`${t.url}/api/sandboxes/${name}/files/content?path=/root/on-host.txt`, { headers: { authorization: `Bearer ${alice.token}` } });
      assert.equal(await got.text(), `file-of-${name}\n`);
      const { stdout } = await run('ssh', [
        '-i', key, '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR',
        '-o', `ProxyCommand=openssl s_client -quiet -connect 127.0.0.1:${port} -servername %h`,
        `root@${host(`${name}-shell-tcp`)}`, 'cat /root/on-host.txt',
      ], { timeout: 30_000 });
      assert.equal(stdout, `file-of-${name}\n`);
    }
  });

  it('keeps a sandbox on host two away from host one\'s engine, its own host\'s engine, the service\'s machine and the other sandbox', async () => {
    const [onTwo, onOne] = (await address(sandboxes[0]!.name)).startsWith(testHostPool(2)) ? [sandboxes[0]!, sandboxes[1]!] : [sandboxes[1]!, sandboxes[0]!];
    // a listener of the service's machine on every address: reached, if at all, through host two's veth
    const listener = net.createServer((s) => s.end('reached\n'));
    await new Promise<void>((r) => listener.listen(0, '0.0.0.0', r));
    const open = (listener.address() as net.AddressInfo).port;
    const machine = os.networkInterfaces().eth0?.find((a) => a.family === 'IPv4')?.address;
    try {
      const targets: Array<[string, string, number]> = [
        ['its own sshd (the probe works)', '127.0.0.1', 22],
        ["host one's engine", testHostAddress(1), 2376],
        ["host two's own engine", testHostAddress(2), 2376],
        ['a listener of the service machine on its veth', '10.216.2.1', open],
        ...(machine ? [['that listener on the machine\'s address', machine, open] as [string, string, number]] : []),
        ["the service's Redis", '10.216.2.1', 6379],
        ["the service's PostgreSQL", '10.216.2.1', 5432],
        ['the sandbox on host one (its sshd)', await address(onOne.name), 22],
      ];
      // all at once (a dropped connection takes the whole 3 s), answers in the targets' order
      const probe = targets.map(([, a, p], i) => `(timeout 3 bash -c 'exec 3<>/dev/tcp/${a}/${p}' 2>/dev/null && echo open || echo closed) > /tmp/probe-${i} &`).join(' ') +
        ` wait; cat ${targets.map((_, i) => `/tmp/probe-${i}`).join(' ')}`;
      const answers = await eventually(async () => {
        const { stdout } = await t.service.runtime.exec.run(onTwo.name, ['bash', '-c', probe]);
        const lines = stdout.toString().trim().split('\n');
        return lines[0] === 'open' ? lines : null; // sshd up: the sandbox has finished starting
      }, 'the probe from host two', 30_000, 1000);
      assert.deepEqual(targets.map(([what], i) => `${what}: ${answers[i]}`), targets.map(([what], i) => `${what}: ${i === 0 ? 'open' : 'closed'}`));
    } finally {
      listener.close();
    }
  });

  it('keeps a sandbox on this machine off the hosts\' sandboxes (their pools, recorded by svc hosts add --pool)', async () => {
    const { stdout: pools } = await run('iptables', ['-w', '5', '-S', 'SVC-SANDBOX-POOLS']);
    for (const i of [1, 2]) assert.match(pools, new RegExp(`-d 10\\.${216 + i}\\.0\\.0/16 -i svcb\\+ -j DROP`));
    const { stdout: fwd } = await run('iptables', ['-w', '5', '-S', 'SVC-SANDBOX-FWD']);
    // first, with the private networks' (egress-firewall.ts): no ACCEPT before either
    assert.deepEqual(fwd.split('\n').slice(1, 3).sort(), ['-A SVC-SANDBOX-FWD -i svcb+ -j SVC-SANDBOX-POOLS', '-A SVC-SANDBOX-FWD -i svcb+ -j SVC-SANDBOX-PRIVATE']);
    const name = sandboxName(`l-${t.config.redisPrefix}`);
    await t.service.store.hosts.place(name, 'local'); // this machine is drained for the other tests
    const res = await t.api('POST', '/api/sandboxes', alice.token, { name, idle_timeout: '1h' });
    assert.equal(res.status, 201, answerOf(res));
    assert.equal(res.body.name, name);
    try {
      const target = await address(sandboxes[0]!.name);
      const probe = `for t in 127.0.0.1 ${target}; do timeout 3 bash -c "exec 3<>/dev/tcp/$t/22" 2>/dev/null && echo open || echo closed; done`;
      const answers = await eventually(async () => {
        const lines = (await t.service.runtime.exec.run(name, ['bash', '-c', probe])).stdout.toString().trim().split('\n');
        return lines[0] === 'open' ? lines : null;
      }, 'the probe from this machine', 30_000, 1000);
      assert.deepEqual(answers, ['open', 'closed'], `a sandbox of this machine reaches ${target}:22 on a test host`);
    } finally {
      await t.api('DELETE', `/api/sandboxes/${name}`, alice.token);
    }
  });

  it('uses no address a host reports outside its recorded pool (a compromised runner cannot point the edge elsewhere)', async () => {
    const one = (await t.service.store.hosts.get('test-1'))!;
    const onOne = (await address(sandboxes[0]!.name)).startsWith(testHostPool(1)) ? sandboxes[0]! : sandboxes[1]!;
    await t.service.store.hosts.put({ ...one, pool: '10.250.0.0/16' });
    try {
      const state = await t.service.runtime.inspect(onOne.name);
      assert.equal(state.status, 'running');
      assert.equal('address' in state ? state.address : undefined, undefined);
    } finally {
      await t.service.store.hosts.put(one);
    }
    assert.match((await address(onOne.name)), new RegExp(`^${testHostPool(1).replace(/\./g, '\\.')}`), 'its own pool again');
  });

  it('answers "unreachable" for the sandbox of a host whose engine is killed, while the other host\'s goes on; back with its engine', async () => {
    const [onTwo, onOne] = (await address(sandboxes[0]!.name)).startsWith(testHostPool(2)) ? [sandboxes[0]!, sandboxes[1]!] : [sandboxes[1]!, sandboxes[0]!];
    process.kill(Number(fs.readFileSync('/run/svc-host-2.pid', 'utf8')), 'SIGKILL');
    const away = await eventually(async () => {
      const state = await t.service.runtime.inspect(onTwo.name);
      return state.status === 'unreachable' ? state : null;
    }, 'host two away', 15_000);
    assert.equal(away.status, 'unreachable', 'never deep_sleep');
    assert.equal((await t.service.runtime.inspect(onOne.name)).status, 'running', 'host one goes on');
    assert.deepEqual((await t.service.runtime.list()).map((c) => c.name).filter((n) => sandboxes.some((s) => s.name === n)), [onOne.name], 'listings leave host two out');
    // a host whose engine presents another host's certificate (test-1's, at its address) cannot be asked either
    const badDns = await svcCli(t.config, 'hosts', 'add', 'test-4', testHostAddress(1), '--pool', '10.220.0.0/16', '--dns', '10.0.0.2,ns.example', '--certs-out', path.join(dir, 'test-4'));
    assert.notEqual(badDns.code, 0);
    assert.match(badDns.stderr, /"ns\.example" is not a nameserver's IPv4 address/);
    assert.equal(await t.service.store.hosts.get('test-4'), undefined, 'nothing registered');
    const impostor = await svcCli(t.config, 'hosts', 'add', 'test-3', testHostAddress(1), '--pool', '10.219.0.0/16', '--certs-out', path.join(dir, 'test-3'));
    assert.equal(impostor.code, 0, impostor.stderr);
    await t.service.store.hosts.place(`svc-elsewhere-${t.config.redisPrefix}`, 'test-3');
    const misnamed = await t.service.runtime.inspect(`svc-elsewhere-${t.config.redisPrefix}`);
    assert.ok(misnamed.status === 'unreachable' && /TLS/.test(misnamed.reason), `unreachable over TLS, not ${JSON.stringify(misnamed)}`);
    assert.deepEqual((await t.service.runtime.list()).map((c) => c.name).filter((n) => sandboxes.some((s) => s.name === n)), [onOne.name], 'still listed');
    const listed = JSON.parse((await svcCli(t.config, 'hosts', 'list', '--json')).stdout) as Array<{ name: string; state: string }>;
    assert.deepEqual(['test-2', 'test-3'].map((h) => listed.find((x) => x.name === h)?.state), ['away', 'away']);
    await t.service.store.hosts.unplace(`svc-elsewhere-${t.config.redisPrefix}`);
    assert.match((await svcCli(t.config, 'hosts', 'remove', 'test-3')).stderr, /not drained/);
    assert.equal((await svcCli(t.config, 'hosts', 'drain', 'test-3')).code, 0);
    assert.equal((await svcCli(t.config, 'hosts', 'remove', 'test-3')).code, 0);
    await testHostsUp(2, t.config); // its engine again, which finds the sandbox's container as it was
    const back = await eventually(async () => {
      const state = await t.service.runtime.inspect(onTwo.name);
      return state.status === 'unreachable' ? null : state;
    }, 'host two back', 30_000, 500);
    assert.ok(['running', 'exited'].includes(back.status), `its container is there (${back.status}), never deep_sleep`);
  });

  it('refuses to remove a host until drained and while it holds a sandbox; once the sandbox is deleted, the host goes', async () => {
    const onTwo = (await address(sandboxes[0]!.name)).startsWith(testHostPool(2)) ? sandboxes[0]! : sandboxes[1]!;
    assert.equal((await svcCli(t.config, 'hosts', 'drain', 'test-2')).code, 0);
    const refused = await svcCli(t.config, 'hosts', 'remove', 'test-2');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`holds 1 sandbox\\(es\\) \\(${onTwo.name}\\)`));
    const deleted = await t.api('DELETE', `/api/sandboxes/${onTwo.name}`, alice.token);
    assert.ok(deleted.status < 300, answerOf(deleted));
    const removed = await svcCli(t.config, 'hosts', 'remove', 'test-2');
    assert.equal(removed.code, 0, removed.stderr);
  });
});
