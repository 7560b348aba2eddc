import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { issueEngineCerts } from '../../lifecycle/engine-certs.ts';
import type { EngineCerts } from '../../store/records.ts';
import https from 'node:https';
import { curl, freePort, lookupLoopback, sleep, startApp, startTestEdge, TestBackend, tlsConnect, type TestEdge } from '../../harness/edge.ts';
import { eventually } from '../../harness/service.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { haproxyDataPlane } from '../../edge/dataplane/haproxy-data-plane.ts';
import type { EdgeCertificates } from '../../edge/certs/edge-certificates.ts';
import { DEFAULT_LIMITS, DEFAULT_TIMEOUTS } from '../../edge/limits.ts';
import { pino } from 'pino';

/**
 * HAProxy as the data plane (docs/data-plane.md), the real one from Debian: it owns the port,
 * serves running apps and passes engines through itself, and hands the rest to Node's edge.
 */
describe('the HAProxy data plane', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let api: RuntimeApi;
  let appsMap: string;
  let engineMap: string;
  let engine: tls.Server;
  let certs: EngineCerts;
  const seen: Array<{ xff: string | undefined; host: string | undefined }> = [];
  let app: Awaited<ReturnType<typeof startApp>>;

  before(async () => {
    app = await startApp((req, res) => {
      seen.push({ xff: req.headers['x-forwarded-for'] as string | undefined, host: req.headers.host });
      res.end('app says hi\n');
    });
    backend.addApp('svc-dp-web', 'svc-dp', { host: '127.0.0.1', port: app.port });
    backend.addApp('svc-dq-web', 'svc-dq', { host: '127.0.0.1', port: app.port });
    certs = await issueEngineCerts('svc-dpe', 'svc-dpe-engine.localhost');
    engine = tls.createServer({ key: certs.server_key, cert: certs.server_cert, ca: certs.ca_cert, requestCert: true, rejectUnauthorized: true }, (s) => {
      s.on('error', () => undefined);
      s.on('data', (d) => s.write(d));
    });
    engine.on('tlsClientError', () => undefined);
    const enginePort = await freePort();
    await new Promise<void>((r) => engine.listen(enginePort, '127.0.0.1', r));
    backend.sandboxes.set('svc-dpe', { status: 'running', address: '127.0.0.1' });
    edge = await startTestEdge(backend, {
      dataPlane: 'haproxy',
      sandboxPorts: { engine: enginePort },
      timeouts: { activityIntervalMs: 0 },
      registry: (req, res) => res.end(`registry ${(req.socket as tls.TLSSocket).encrypted} ${req.socket.remoteAddress} ${req.url}`),
    });
    const files = edge.edge.dataPlane!.files;
    api = new RuntimeApi(files.adminSocket);
    appsMap = files.appsMap;
    engineMap = files.engineMap;
  });
  after(async () => {
    await edge?.close();
    engine?.close();
    await app?.close();
  });

  const mapHas = async (map: string, key: string) => (await api.send(`show map ${map}`)).includes(` ${key} `);

  it('the first request goes through Node, which puts the route into HAProxy; the next ones HAProxy serves', async () => {
    const first = await curl(edge.port, 'svc-dp-web.localhost', '/', edge.caFile, ['-H', 'X-Forwarded-For: 6.6.6.6']);
    assert.equal(first.status, 200);
    await eventually(async () => mapHas(appsMap, 'svc-dp-web.localhost'), 'the route in the map', 2_000, 10);
    seen.length = 0;
    const second = await curl(edge.port, 'svc-dp-web.localhost', '/', edge.caFile, ['-H', 'X-Forwarded-For: 6.6.6.6']);
    assert.equal(second.status, 200);
    assert.equal(second.stdout, 'app says hi\n');
    assert.deepEqual(seen, [{ xff: '127.0.0.1', host: `svc-dp-web.localhost:${edge.port}` }], 'the client address, never the client\'s own X-Forwarded-For');
    const table = await api.table('be_app');
    assert.ok((table.get('svc-dp')?.http_req_cnt ?? 0) >= 1, 'HAProxy counted the request for the sandbox');
  });

  it('registry.<domain>: TLS ended by HAProxy, the front gets plain HTTP knowing the client and that it came over TLS', async () => {
    const r = await curl(edge.port, 'registry.localhost', '/v2/', edge.caFile);
    assert.equal(r.status, 200);
    assert.equal(r.stdout, 'registry true 127.0.0.1 /v2/');
    assert.match(await api.send('show ssl cert'), /registry\.localhost/, 'its own certificate is loaded into HAProxy');
  });

  it('counts app requests served by HAProxy as activity within about a second', async () => {
    backend.activity.length = 0;
    assert.equal((await curl(edge.port, 'svc-dp-web.localhost', '/', edge.caFile)).status, 200);
    await eventually(async () => backend.activity.includes('svc-dp'), 'activity for svc-dp', 3_000, 50);
  });

  it('a map write whose words hold a space, a newline or a ; is refused before HAProxy sees it (no second command)', async () => {
    const injected = ['x.localhost', '127.0.0.1\nadd map ' + appsMap + ' svc-evil-web.localhost svc-evil|127.0.0.1|1'];
    await assert.rejects(api.putMapEntry(appsMap, injected[0]!, injected[1]!), /not one printable word/);
    await assert.rejects(api.putMapEntry(appsMap, 'x.localhost y', 'svc-x|127.0.0.1|1'), /not one printable word/);
    await assert.rejects(api.deleteMapEntry(appsMap, 'svc-dp-web.localhost\nclear map ' + appsMap), /not one printable word/);
    await assert.rejects(api.putMapEntry(appsMap, 'x.localhost', `127.0.0.1;clear map ${appsMap}`), /not one printable word/, 'HAProxy runs commands a ; separates');
    const map = await api.send(`show map ${appsMap}`);
    assert.ok(!map.includes('x.localhost') && !map.includes('svc-evil'), map);
  });

  it('Host ≠ SNI on a connection HAProxy holds: 421 from the edge, nothing reaches the app', async () => {
    seen.length = 0;
    const r = await curl(edge.port, 'svc-dp-web.localhost', '/', edge.caFile, ['-H', 'Host: svc-other-web.localhost']);
    assert.equal(r.status, 421);
    assert.equal(seen.length, 0);
  });

  it('a sandbox the backend says is going to sleep leaves the map at once; its next request gets the waiting page and a wake', async () => {
    assert.ok(await mapHas(appsMap, 'svc-dp-web.localhost'));
    // the backend's memory still says "running" (as the real one's does for a second): a pass over
    // the routes would keep the route, so only the notice of the sleep can remove it
    const running = (await backend.resolveApp('svc-dp-web', { fresh: true }))!;
    backend.setStatus('svc-dp', 'exited');
    backend.remembered.set('svc-dp-web', running);
    await eventually(async () => !(await mapHas(appsMap, 'svc-dp-web.localhost')), 'the route gone on the notice', 2_000, 2);
    backend.remembered.delete('svc-dp-web');
    const r = await curl(edge.port, 'svc-dp-web.localhost', '/', edge.caFile);
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-svc-waiting'], '1');
    assert.deepEqual(backend.wakeCalls, ['svc-dp']);
    backend.setStatus('svc-dp', 'running');
  });

  it('a sandbox stopped behind the service\'s back, which nobody tells the edge of, leaves the map at the next pass over the routes', async () => {
    assert.equal((await curl(edge.port, 'svc-dq-web.localhost', '/', edge.caFile)).status, 200);
    await eventually(async () => mapHas(appsMap, 'svc-dq-web.localhost'), 'the route in the map', 2_000, 10);
    backend.sandboxes.set('svc-dq', { status: 'exited' }); // no notice: found by the pass (routeRecheckMs, 1 s)
    await eventually(async () => !(await mapHas(appsMap, 'svc-dq-web.localhost')), 'the route gone', 10_000, 10);
    backend.sandboxes.set('svc-dq', { status: 'running', address: '127.0.0.1' });
  });

  it('engine TLS passes through HAProxy to dockerd; only a client the engine accepted is activity', async () => {
    const session = (withCert: boolean, bytes: number, holdMs = 1_500) => new Promise<number>((resolve) => {
      const s = tls.connect({
        host: '127.0.0.1', port: edge.port, servername: 'svc-dpe-engine.localhost', ca: certs.ca_cert,
        ...(withCert ? { cert: certs.client_cert, key: certs.client_key } : {}),
      });
      let echoed = 0;
      s.on('error', () => undefined);
      s.on('data', (d: Buffer) => { echoed += d.length; if (echoed >= bytes) setTimeout(() => s.end(), holdMs); });
      s.on('secureConnect', () => s.write(Buffer.alloc(bytes, 'x')));
      s.on('close', () => resolve(echoed));
      setTimeout(() => s.destroy(), 8_000);
    });
    // the first connections go through Node, until one proves a client (TLS records read there):
    // then the route, and the size of dockerd's handshake flight, go to HAProxy
    assert.equal(await session(false, 100), 0);
    await sleep(300);
    assert.ok(!(await mapHas(engineMap, 'svc-dpe-engine.localhost')), 'no route before a proven client');
    assert.equal(await session(true, 10), 10);
    await eventually(async () => mapHas(engineMap, 'svc-dpe-engine.localhost'), 'the engine route in the map', 2_000, 10);
    backend.activity.length = 0;
    for (let i = 0; i < 3; i++) assert.equal(await session(false, 100_000), 0, 'the engine refused the client');
    await sleep(1_200);
    assert.deepEqual(backend.activity.filter((s) => s === 'svc-dpe'), [], 'refused handshakes are no activity');
    const conns = (await api.table('be_engine')).get('svc-dpe');
    assert.ok(conns, 'these connections went through HAProxy');
    assert.equal(await session(true, 2_048), 2_048, 'a small session (as `docker version`)');
    assert.ok(backend.activity.includes('svc-dpe'), 'an accepted client moving a couple of KiB is activity');
    // one shorter than a poll (as `docker ps`): counted from HAProxy's table once it ended
    await sleep(1_100);
    backend.activity.length = 0;
    assert.equal(await session(true, 300, 0), 300);
    await eventually(async () => backend.activity.includes('svc-dpe'), 'activity for a short session', 3_000, 50);
    // and many refused ones that end at once still are not
    await sleep(1_100);
    backend.activity.length = 0;
    for (let i = 0; i < 5; i++) assert.equal(await session(false, 100, 0), 0);
    await sleep(2_200);
    assert.deepEqual(backend.activity.filter((x) => x === 'svc-dpe'), [], 'short refused connections are no activity');
  });

  it('HAProxy killed: the service starts it again with its routes, requests fail for at most a few seconds', async () => {
    const dp = edge.edge.dataPlane!;
    const pid = dp.pid!;
    for (let i = 0; i < 2; i++) assert.equal((await curl(edge.port, 'svc-dq-web.localhost', '/', edge.caFile)).status, 200); // Node, then HAProxy
    const counted = (await dp.traffic()).routes['app-http']!;
    assert.ok(counted.requests > 0 && counted.connections > 0 && counted.bytesOut > 0, 'the requests HAProxy served are in the metrics');
    execFileSync('kill', ['-9', String(pid)]);
    const t0 = Date.now();
    await eventually(async () => dp.pid !== pid && (await curl(edge.port, 'svc-dq-web.localhost', '/', edge.caFile)).status === 200, 'answers again', 5_000, 20);
    const down = Date.now() - t0;
    assert.ok(down < 3_000, `down for ${down} ms`);
    await eventually(async () => mapHas(engineMap, 'svc-dpe-engine.localhost'), 'the routes restored', 2_000, 10);
    // a request before the maps were restored went to Node; this one HAProxy serves
    await eventually(async () => mapHas(appsMap, 'svc-dq-web.localhost'), 'the app route restored', 2_000, 10);
    assert.equal((await curl(edge.port, 'svc-dq-web.localhost', '/', edge.caFile)).status, 200);
    const after = (await dp.traffic()).routes['app-http']!;
    assert.ok(after.requests > counted.requests && after.bytesOut > counted.bytesOut, 'the metrics count on across the restart');
  });
});

/**
 * Shell (`<sb>-shell-tcp`) and TCP twin (`<label>-tcp`) names through HAProxy: the first connection
 * goes through Node, which puts the name into HAProxy's tunnel map; the next ones HAProxy ends the
 * TLS of (with the name's own certificate) and relays as raw TCP.
 */
/** A backend that tells of its changes, as the lifecycle's does when its app table changes (AppDirectory.onChanged). */
class TellingBackend extends TestBackend {
  private readonly changeListeners = new Set<(sandbox: string) => void>();
  onChanged(listener: (sandbox: string) => void): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }
  tellChanged(sandbox: string): void {
    for (const listener of this.changeListeners) listener(sandbox);
  }
}

/** With no pass over the routes for an hour, only the backend's notices can move HAProxy's maps. */
describe('the HAProxy data plane follows the backend\'s notices', () => {
  const backend = new TellingBackend();
  let edge: TestEdge;
  let api: RuntimeApi;
  let appsMap: string;
  let one: Awaited<ReturnType<typeof startApp>>;
  let two: Awaited<ReturnType<typeof startApp>>;

  before(async () => {
    one = await startApp((_req, res) => res.end('one\n'));
    two = await startApp((_req, res) => res.end('two\n'));
    edge = await startTestEdge(backend, { dataPlane: 'haproxy', timeouts: { routeRecheckMs: 3_600_000 } });
    api = new RuntimeApi(edge.edge.dataPlane!.files.adminSocket);
    appsMap = edge.edge.dataPlane!.files.appsMap;
  });
  after(async () => {
    await edge?.close();
    await one?.close();
    await two?.close();
  });

  const mapValue = async (host: string) => (await api.send(`show map ${appsMap}`)).split('\n').find((l) => l.includes(` ${host} `))?.split(' ').at(-1);

  it('an app that moved to another port: its route leaves at the notice, and comes back at the new port once the app answered there', async () => {
    backend.addApp('svc-nt-web', 'svc-nt', { host: '127.0.0.1', port: one.port });
    assert.equal((await curl(edge.port, 'svc-nt-web.localhost', '/', edge.caFile)).stdout, 'one\n');
    await eventually(async () => (await mapValue('svc-nt-web.localhost')) === `svc-nt|127.0.0.1|${one.port}`, 'the route in the map', 2_000, 10);
    backend.addApp('svc-nt-web', 'svc-nt', { host: '127.0.0.1', port: two.port });
    backend.tellChanged('svc-nt');
    await eventually(async () => (await mapValue('svc-nt-web.localhost')) === undefined, 'the route gone on the notice', 2_000, 2);
    assert.equal((await curl(edge.port, 'svc-nt-web.localhost', '/', edge.caFile)).stdout, 'two\n');
    await eventually(async () => (await mapValue('svc-nt-web.localhost')) === `svc-nt|127.0.0.1|${two.port}`, 'the new route in the map', 2_000, 10);
  });

  it('an app turned private leaves the map at the notice: its next request is Node\'s, which checks its user', async () => {
    backend.addApp('svc-nu-web', 'svc-nu', { host: '127.0.0.1', port: one.port });
    assert.equal((await curl(edge.port, 'svc-nu-web.localhost', '/', edge.caFile)).status, 200);
    await eventually(async () => (await mapValue('svc-nu-web.localhost')) !== undefined, 'the route in the map', 2_000, 10);
    backend.addApp('svc-nu-web', 'svc-nu', { host: '127.0.0.1', port: one.port, visibility: 'owner' });
    backend.tellChanged('svc-nu');
    await eventually(async () => (await mapValue('svc-nu-web.localhost')) === undefined, 'the route gone on the notice', 2_000, 2);
    const servedByHaproxy = async () => (await api.table('be_app')).get('svc-nu')?.http_req_cnt ?? 0;
    const before = await servedByHaproxy();
    await curl(edge.port, 'svc-nu-web.localhost', '/', edge.caFile);
    assert.equal(await servedByHaproxy(), before, 'the request went to Node, past HAProxy\'s app backend');
  });
});

describe('the HAProxy data plane: shell and TCP twin tunnels', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let api: RuntimeApi;
  let tunnelsMap: string;
  let sshd: net.Server;
  let db: net.Server;
  const opened: tls.TLSSocket[] = [];
  const SHELL_PROOF_MS = 3_000;

  before(async () => {
    // stand-ins for the sandbox's sshd and an app's TCP port: they echo
    const echo = () => net.createServer({ allowHalfOpen: true }, (s) => { s.on('error', () => undefined); s.pipe(s); });
    sshd = echo();
    db = echo();
    const shellPort = await freePort();
    await new Promise<void>((r) => sshd.listen(shellPort, '127.0.0.1', r));
    await new Promise<void>((r) => db.listen(0, '127.0.0.1', r));
    const dbPort = (db.address() as net.AddressInfo).port;
    backend.sandboxes.set('svc-dt', { status: 'running', address: '127.0.0.1' });
    backend.addApp('svc-dt-db', 'svc-dt', { host: '127.0.0.1', port: dbPort });
    backend.addApp('svc-dt-db2', 'svc-dt', { host: '127.0.0.1', port: dbPort });
    edge = await startTestEdge(backend, {
      dataPlane: 'haproxy',
      sandboxPorts: { shell: shellPort },
      timeouts: { activityIntervalMs: 0, shellProofMs: SHELL_PROOF_MS },
      limits: { tunnelsPerSandbox: 3 },
    });
    const files = edge.edge.dataPlane!.files;
    api = new RuntimeApi(files.adminSocket);
    tunnelsMap = files.tunnelsMap;
  });
  after(async () => {
    for (const s of opened) s.destroy();
    await edge?.close();
    sshd?.close();
    db?.close();
  });

  const mapHas = async (key: string) => (await api.send(`show map ${tunnelsMap}`)).includes(` ${key} `);
  /** A tunnel that checks the name's certificate; resolves with the socket once a byte came back, or null. */
  const tunnel = async (name: string): Promise<tls.TLSSocket | null> => {
    const s = await tlsConnect(edge.port, name, { ca: edge.caPem, rejectUnauthorized: true }).catch(() => null);
    if (!s) return null;
    opened.push(s);
    s.on('error', () => undefined);
    const echoed = await new Promise<boolean>((resolve) => {
      s.once('data', () => resolve(true));
      s.once('close', () => resolve(false));
      s.write('x');
    });
    return echoed ? s : null;
  };
  const closeAll = async () => {
    for (const s of opened.splice(0)) s.destroy();
    await eventually(async () => !(await api.table('st_tunnels')).get('svc-dt')?.conn_cur, 'no tunnel open', 3_000, 20);
  };

  it('<label>-tcp: the first connection through Node, the next ones HAProxy carries with the name\'s certificate; their bytes are activity', async () => {
    assert.ok(await tunnel('svc-dt-db-tcp.localhost'), 'through Node');
    await eventually(async () => mapHas('svc-dt-db-tcp.localhost'), 'the TCP twin in the tunnel map', 2_000, 10);
    await closeAll();
    backend.activity.length = 0;
    const counted = await edge.edge.dataPlane!.traffic();
    const s = await tunnel('svc-dt-db-tcp.localhost'); // rejectUnauthorized: the certificate names it
    assert.ok(s, 'through HAProxy');
    assert.equal((await api.table('be_tunnel')).get('svc-dt')?.conn_cur, 1, 'HAProxy carries it');
    const now = await edge.edge.dataPlane!.traffic();
    assert.equal(now.routes['app-tcp']!.connections, counted.routes['app-tcp']!.connections + 1, 'a TCP twin in the metrics');
    assert.equal(now.routes['app-tcp']!.open, 1);
    assert.equal(now.routes.shell!.connections, counted.routes.shell!.connections, 'not a shell');
    for (let i = 0; i < 6; i++) { s.write('more'); await sleep(250); }
    assert.ok(backend.activity.includes('svc-dt'), 'bytes of a live TCP twin count within a second');
    await closeAll();
  });

  it('shell: HAProxy carries it, and its bytes count only once it is older than sshd\'s login grace', async () => {
    assert.ok(await tunnel('svc-dt-shell-tcp.localhost'), 'through Node');
    await eventually(async () => mapHas('svc-dt-shell-tcp.localhost'), 'the shell in the tunnel map', 2_000, 10);
    await closeAll();
    await sleep(1_100); // one poll: nothing of the connection above is left to count
    backend.activity.length = 0;
    const s = await tunnel('svc-dt-shell-tcp.localhost');
    assert.ok(s, 'through HAProxy');
    assert.equal((await api.table('st_tunnels')).get('svc-dt')?.conn_cur, 1);
    const t0 = Date.now();
    while (Date.now() - t0 < SHELL_PROOF_MS - 500) { s.write('typing'); await sleep(200); }
    assert.equal(backend.activity.length, 0, 'no activity within the login grace');
    while (Date.now() - t0 < SHELL_PROOF_MS + 2_500 && !backend.activity.includes('svc-dt')) { s.write('typing'); await sleep(200); }
    assert.ok(backend.activity.includes('svc-dt'), 'a shell past the grace is activity');
    await closeAll();
  });

  it('at most N tunnels per sandbox, whichever process carries them', async () => {
    // two through HAProxy (a shell and a TCP twin already in its map)
    assert.ok(await tunnel('svc-dt-shell-tcp.localhost'));
    assert.ok(await tunnel('svc-dt-db-tcp.localhost'));
    // the third through Node: a TCP twin name HAProxy has not seen
    assert.ok(!(await mapHas('svc-dt-db2-tcp.localhost')));
    assert.ok(await tunnel('svc-dt-db2-tcp.localhost'), 'the third tunnel');
    await eventually(async () => mapHas('svc-dt-db2-tcp.localhost'), 'the second TCP twin in the map', 2_000, 10);
    for (const name of ['svc-dt-shell-tcp.localhost', 'svc-dt-db-tcp.localhost', 'svc-dt-db2-tcp.localhost']) {
      assert.equal(await tunnel(name), null, `a fourth (${name}) is refused`);
    }
    opened[0]!.destroy();
    await eventually(async () => (await tunnel('svc-dt-db-tcp.localhost')) !== null, 'a place again after a close', 3_000, 50);
    await closeAll();
  });

  it('a host with 50 000 other established sockets: a shell\'s bytes still count (the reading lists only HAProxy\'s tunnel sockets)', async () => {
    // three processes each holding 9 000 loopback connections to itself (both ends: 18 000 of its 20 000 files)
    const holder = `const net = require('node:net'); const held = [];
      const server = net.createServer((s) => held.push(s)).listen(0, '127.0.0.1', async () => {
        for (let i = 0; i < 9000; i += 500) await Promise.all(Array.from({ length: 500 }, () => new Promise((r) => held.push(net.connect(server.address().port, '127.0.0.1', r)))));
        console.log('ready');
      });`;
    const holders: ChildProcess[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const child = spawn(process.execPath, ['-e', holder], { stdio: ['ignore', 'pipe', 'inherit'] });
        holders.push(child);
        await new Promise<void>((resolve, reject) => {
          child.stdout!.once('data', () => resolve());
          child.once('exit', (code) => reject(new Error(`socket holder exited (${code})`)));
        });
      }
      await sleep(1_100); // one poll with them all
      backend.activity.length = 0;
      // a shell's bytes are read only from the kernel's socket counters (a TCP twin's also from its table)
      const s = await tunnel('svc-dt-shell-tcp.localhost');
      assert.ok(s, 'through HAProxy');
      const t0 = Date.now();
      while (Date.now() - t0 < SHELL_PROOF_MS + 3_000 && !backend.activity.includes('svc-dt')) { s.write('typing'); await sleep(200); }
      assert.ok(backend.activity.includes('svc-dt'), 'a shell past the grace is activity');
      await closeAll();
    } finally {
      for (const h of holders) h.kill();
    }
  });

  it('asleep: the names leave the map; a shell is reset and not woken, a TCP twin is reset and woken', async () => {
    assert.ok(await mapHas('svc-dt-shell-tcp.localhost'));
    assert.ok(await mapHas('svc-dt-db-tcp.localhost'));
    backend.wakeCalls = [];
    backend.setStatus('svc-dt', 'exited');
    await eventually(async () => !(await mapHas('svc-dt-shell-tcp.localhost')) && !(await mapHas('svc-dt-db-tcp.localhost')), 'the names gone', 2_000, 5);
    const err = await tlsConnect(edge.port, 'svc-dt-shell-tcp.localhost').then(() => null, (e: NodeJS.ErrnoException) => e);
    assert.equal(err?.code, 'ECONNRESET');
    assert.deepEqual(backend.wakeCalls, []);
    const tcpErr = await tlsConnect(edge.port, 'svc-dt-db-tcp.localhost').then(() => null, (e: NodeJS.ErrnoException) => e);
    assert.equal(tcpErr?.code, 'ECONNRESET');
    assert.deepEqual(backend.wakeCalls, ['svc-dt']);
  });
});

/**
 * Issue 21's checks of the data plane under change: routes of many sandboxes coming and going
 * while one app keeps answering, and HAProxy killed under load.
 */
describe('the HAProxy data plane under churn and crashes', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let app: Awaited<ReturnType<typeof startApp>>;
  const CHURNED = 50;

  before(async () => {
    app = await startApp((_req, res) => res.end('ok\n'));
    backend.addApp('svc-stay-web', 'svc-stay', { host: '127.0.0.1', port: app.port });
    for (let i = 0; i < CHURNED; i++) backend.addApp(`svc-c${i}-web`, `svc-c${i}`, { host: '127.0.0.1', port: app.port });
    edge = await startTestEdge(backend, { dataPlane: 'haproxy' });
    // its route into HAProxy first, so the client's connections all go to HAProxy
    assert.equal((await curl(edge.port, 'svc-stay-web.localhost', '/', edge.caFile)).status, 200);
    await sleep(50);
  });
  after(async () => {
    await edge?.close();
    await app?.close();
  });

  /**
   * Requests to `host` one after another (kept-alive connections, as a browser), until stopped. A
   * request without an answer for 30 s (a stalled connection, not a slow machine) is a failure.
   */
  const client = (host: string) => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 4, ca: edge.caPem });
    const failures: Array<{ at: number; why: string }> = [];
    let ok = 0;
    let running = true;
    const one = () => new Promise<void>((resolve) => {
      const req = https.get({ host, port: edge.port, path: '/', agent, lookup: lookupLoopback as never, timeout: 30_000 }, (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode === 200 && !res.headers['x-svc-waiting']) ok++;
          else failures.push({ at: Date.now(), why: `status ${res.statusCode}` });
          resolve();
        });
      });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', (err) => { failures.push({ at: Date.now(), why: err.message }); resolve(); });
    });
    const loop = (async () => { while (running) await one(); })();
    return { failures, get ok() { return ok; }, stop: async () => { running = false; await loop; agent.destroy(); } };
  };

  it(`${CHURNED} sandboxes waking and sleeping: the app that stays up never fails a request`, async (t) => {
    const steady = client('svc-stay-web.localhost');
    // every churned sandbox's route into HAProxy, then flip them, 10 ms apart, each 5 times
    await Promise.all(Array.from({ length: CHURNED }, (_, i) => curl(edge.port, `svc-c${i}-web.localhost`, '/', edge.caFile)));
    const FLIPS = CHURNED * 5;
    // the steady client's answers during each fifth of the flips: the app was served all along, not
    // only before and after (counted, not timed: a loaded machine flips more slowly, not fewer times)
    const answeredPerFifth: number[] = [];
    for (let flips = 0; flips < FLIPS; flips++) {
      if (flips % CHURNED === 0) answeredPerFifth.push(steady.ok);
      const i = flips % CHURNED;
      backend.setStatus(`svc-c${i}`, backend.sandboxes.get(`svc-c${i}`)!.status === 'running' ? 'exited' : 'running');
      if (flips % 5 === 0) void curl(edge.port, `svc-c${i}-web.localhost`, '/', edge.caFile); // woken ones come back into the maps
      await sleep(10);
    }
    answeredPerFifth.push(steady.ok);
    await steady.stop();
    const perFifth = answeredPerFifth.slice(1).map((n, k) => n - answeredPerFifth[k]!);
    t.diagnostic(`${steady.ok} requests answered, ${steady.failures.length} failed, ${FLIPS} route changes; answered per fifth of them: ${perFifth.join(', ')}`);
    assert.deepEqual(steady.failures, [], `${steady.failures.length} failed of ${steady.ok + steady.failures.length}`);
    assert.ok(perFifth.every((n) => n > 0), `answered during each fifth of the route changes: ${perFifth.join(', ')}`);
  });

  it('HAProxy killed under load: restarted, and requests fail for at most a few seconds', async (t) => {
    const load = client('svc-stay-web.localhost');
    await sleep(500);
    const dp = edge.edge.dataPlane!;
    const pid = dp.pid!;
    const killedAt = Date.now();
    execFileSync('kill', ['-9', String(pid)]);
    await eventually(async () => dp.pid !== pid && load.ok > 0, 'restarted', 5_000, 20);
    const before = load.ok;
    await eventually(async () => load.ok > before + 20, 'answering again', 5_000, 20);
    await sleep(500);
    await load.stop();
    const last = load.failures.at(-1)?.at ?? killedAt;
    t.diagnostic(`${load.failures.length} requests failed, the last ${last - killedAt} ms after the kill; ${load.ok} answered`);
    assert.ok(last - killedAt < 3_000, `requests failed for ${last - killedAt} ms (${load.failures.length} failures)`);
    assert.ok(load.failures.every((f) => f.at - killedAt < 3_000));
  });
});

/** What HAProxy logs (a failed request's line) goes to the service's log: never a URL's query string. */
describe('the HAProxy data plane\'s log', () => {
  it('a request HAProxy could not serve is logged with its path, not its query string', async () => {
    const lines: string[] = [];
    const backend = new TestBackend();
    const app = await startApp((_req, res) => res.end('up\n'));
    backend.addApp('svc-dl-web', 'svc-dl', { host: '127.0.0.1', port: app.port });
    const edge = await startTestEdge(backend, {
      dataPlane: 'haproxy',
      logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }),
    });
    try {
      assert.equal((await curl(edge.port, 'svc-dl-web.localhost', '/', edge.caFile)).status, 200);
      const api = new RuntimeApi(edge.edge.dataPlane!.files.adminSocket);
      const appsMap = edge.edge.dataPlane!.files.appsMap;
      await eventually(async () => (await api.send(`show map ${appsMap}`)).includes(' svc-dl-web.localhost '), 'the route in the map', 2_000, 10);
      await app.close(); // HAProxy's connection is refused: its 503 page, and a log line
      await curl(edge.port, 'svc-dl-web.localhost', '/a-path?token=svc_not-for-logs', edge.caFile);
      await eventually(async () => lines.some((l) => l.includes('/a-path')), 'the request logged', 5_000, 20);
      assert.ok(!lines.some((l) => l.includes('svc_not-for-logs')), lines.filter((l) => l.includes('/a-path')).join('\n'));
    } finally {
      await edge.close();
      await app.close().catch(() => undefined);
    }
  });
});

/**
 * Certificates the edge replaces while HAProxy runs (the operator's files renewed, the domain
 * certificate renewed, a per-name one reissued) reach HAProxy without a restart, and a restart
 * keeps the new one. The edge's own certificate source re-reads files once a minute; here a stand-in
 * hands out the PEM so the swap is immediate, HAProxy is the real one.
 */
describe('the HAProxy data plane\'s certificates', () => {
  it('a replaced default certificate is served by the running HAProxy, and after a restart', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-dp-cert-'));
    const issue = (cn: string) => {
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${cn}.key`, '-out', `${cn}.crt`, '-days', '2', '-subj', `/CN=${cn}`, '-addext', 'subjectAltName=DNS:op.test,DNS:*.op.test'], { cwd: dir, stdio: 'pipe' });
      return fs.readFileSync(path.join(dir, `${cn}.crt`), 'utf8') + fs.readFileSync(path.join(dir, `${cn}.key`), 'utf8');
    };
    let pem = issue('first.op.test');
    const certificates: EdgeCertificates = { mode: 'files', caPem: null, contextFor: () => { throw new Error('HAProxy ends TLS here'); }, pemFor: async () => pem, close: () => undefined };
    const dp = haproxyDataPlane({
      domain: 'op.test', backend: new TestBackend(), certificates, logger: pino({ level: 'silent' }), port: 0, host: '127.0.0.1',
      enginePort: 2376, limits: DEFAULT_LIMITS, timeouts: DEFAULT_TIMEOUTS,
    });
    // registry.<domain> has its TLS ended by HAProxy itself, with the default certificate
    const servedName = (port: number) => new Promise<string>((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port, servername: 'registry.op.test', rejectUnauthorized: false }, () => {
        resolve(String(s.getPeerCertificate().subject.CN));
        s.destroy();
      });
      s.once('error', reject);
    });
    try {
      const { port } = await dp.start();
      assert.equal(await servedName(port), 'first.op.test');
      pem = issue('second.op.test');
      await dp.backend.certificates.refreshNow();
      assert.equal(await servedName(port), 'second.op.test', 'served without a restart');
      const pid = dp.pid!;
      process.kill(pid, 'SIGKILL');
      await eventually(async () => dp.pid !== pid && (await servedName(port).catch(() => '')) === 'second.op.test', 'the new one after a restart', 5_000, 50);
    } finally {
      await dp.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
