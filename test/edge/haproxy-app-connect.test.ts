import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER } from '../../edge/index.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { curl, startTestEdge, TestBackend, type TestEdge } from '../../harness/edge.ts';

const run = promisify(execFile);

/**
 * An app whose machine went away while its route is still in HAProxy's map (an Incus member killed,
 * in the seconds before its sandbox is marked unavailable: docs/incus.md): its SYNs get no answer.
 * HAProxy's app table waited `timeout connect` (10 s) on each of its default 4 tries, 40 s before its
 * 503, past curl's 30 s in the cluster test. Bounded in the app table (edge/dataplane/haproxy-config.ts):
 * the request is answered (the waiting page) within curl's --max-time instead of hanging.
 *
 * The machine: a network namespace behind a veth with an app on port 8080; "lost" once iptables in the
 * namespace drops every packet to that port (nothing of this host's rules touched).
 */
const id = randomBytes(3).toString('hex');
const ns = `svcdrop${id}`;
const veth = `vdrop${id}`;
const net = `198.18.${randomInt(0, 256)}`;
const machine = `${net}.2`;
const backend = new TestBackend();
const host = 'svc-drop-web.localhost';
let edge: TestEdge;
let app: ChildProcess;

before(async () => {
  await run('sh', ['-ec', `ip netns add ${ns}; ip link add ${veth} type veth peer name eth0 netns ${ns}
    ip addr add ${net}.1/30 dev ${veth}; ip link set ${veth} up
    ip -n ${ns} addr add ${machine}/30 dev eth0; ip -n ${ns} link set eth0 up; ip -n ${ns} link set lo up`]);
  app = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', "require('http').createServer((q, s) => s.end('reached')).listen(8080)"], { stdio: 'ignore' });
  edge = await startTestEdge(backend);
  backend.addApp('svc-drop-web', 'svc-drop', { host: machine, port: 8080 });
  backend.setStatus('svc-drop', 'running');
});

after(async () => {
  await edge?.close();
  app?.kill();
  await run('sh', ['-c', `ip link del ${veth}; ip netns del ${ns}`]).catch(() => undefined);
});

/** Whether HAProxy's app map holds the route (always true for the Node edge: no map). */
async function mapped(): Promise<boolean> {
  const dp = edge.edge.dataPlane;
  if (!dp) return true;
  return (await new RuntimeApi(dp.files.adminSocket).run(`show map ${dp.files.appsMap}`)).includes(host);
}

test('a mapped app whose machine drops its SYNs is answered (the waiting page) within curl\'s --max-time, not held for HAProxy\'s connect timeout times its retries', async () => {
  // the app answers (through Node first), and its route goes into HAProxy's map
  for (let i = 0; ; i++) {
    const ok = await curl(edge.port, host, '/', edge.caFile);
    if (ok.status === 200 && ok.stdout === 'reached' && await mapped()) break;
    assert.ok(i < 100, `the app never answered through HAProxy's map: ${ok.status} ${ok.stderr}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  // its machine lost: every packet to the app's port dropped, the route still mapped
  await run('ip', ['netns', 'exec', ns, 'iptables', '-A', 'INPUT', '-p', 'tcp', '--dport', '8080', '-j', 'DROP']);
  const dropped = await curl(edge.port, host, '/', edge.caFile, ['--max-time', '20']);
  assert.equal(dropped.code, 0, `curl gave up (its --max-time): ${dropped.stderr}`);
  // the waiting page (HAProxy's 503 errorfile, served as the page Node serves: it retries in a few seconds)
  assert.equal(dropped.headers[WAITING_HEADER], '1', `${dropped.status} ${JSON.stringify(dropped.headers)}`);
  assert.ok(await mapped(), 'the request went through HAProxy\'s map');
});
