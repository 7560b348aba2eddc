import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { issueEngineCerts } from '../../lifecycle/engine-certs.ts';
import type { EngineCerts } from '../../store/records.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { clientHello, freePort, startTestEdge, TestBackend, tlsConnect, type TestEdge } from '../../harness/edge.ts';
import { eventually } from '../../harness/service.ts';

const SANDBOX = 'svc-hs';
const ENGINE = `${SANDBOX}-engine.localhost`;
const SHELL = `${SANDBOX}-shell-tcp.localhost`;

/**
 * Review M4: a sandbox's 128 tunnel places are taken only by carried tunnels (a shell once its
 * TLS ended, an engine connection once dockerd accepted its client), and a tunnel still in its
 * handshake holds one of its client address's 16 places for that sandbox. So a stranger's
 * handshakes left hanging (ClientHello sent, then nothing) never lock the owner out of docker and
 * ssh. Default limits; the edge SVC_DATA_PLANE chooses (with HAProxy, the shell name in its map
 * and the owner's engine connections carried by it, a stranger's by Node).
 */
describe('tunnel handshakes and the sandbox\'s places', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let engine: tls.Server;
  let sshd: net.Server;
  let certs: EngineCerts;
  /** HAProxy's Runtime API, when it is the data plane. */
  let api: RuntimeApi | null = null;
  const opened: net.Socket[] = [];

  before(async () => {
    certs = await issueEngineCerts(SANDBOX, ENGINE);
    // stand-ins for the sandbox's dockerd (mutual TLS) and sshd: they echo
    engine = tls.createServer({ key: certs.server_key, cert: certs.server_cert, ca: certs.ca_cert, requestCert: true, rejectUnauthorized: true }, (s) => {
      s.on('error', () => undefined);
      s.pipe(s);
    });
    engine.on('tlsClientError', () => undefined);
    sshd = net.createServer((s) => { s.on('error', () => undefined); s.pipe(s); });
    const [enginePort, shellPort] = [await freePort(), await freePort()];
    await new Promise<void>((r) => engine.listen(enginePort, '127.0.0.1', r));
    await new Promise<void>((r) => sshd.listen(shellPort, '127.0.0.1', r));
    backend.sandboxes.set(SANDBOX, { status: 'running', address: '127.0.0.1' });
    // Node's own TLS deadline would end the hanging shell handshakes while the test still needs them
    edge = await startTestEdge(backend, { sandboxPorts: { engine: enginePort, shell: shellPort }, timeouts: { handshakeMs: 120_000 } });
    // the owner (127.0.0.1) used both once: with HAProxy, the shell name is then in its map and the
    // owner's engine connections are its own
    assert.ok(await docker(), 'the owner\'s first docker connection');
    assert.ok(await ssh(), 'the owner\'s first ssh connection');
    const files = edge.edge.dataPlane?.files;
    if (files) {
      const haproxy = new RuntimeApi(files.adminSocket);
      api = haproxy;
      await eventually(async () => (await haproxy.send(`show map ${files.tunnelsMap}`)).includes(` ${SHELL} `), 'the shell in HAProxy\'s map', 3_000, 20);
      await eventually(async () => (await haproxy.table('st_engine_clients')).has(`127.0.0.1|${SANDBOX}`), 'the owner\'s address proven in HAProxy', 3_000, 20);
    }
    closeAll();
  });
  after(async () => {
    closeAll();
    await edge?.close();
    engine?.close();
    sshd?.close();
  });

  const closeAll = () => {
    for (const s of opened.splice(0)) s.destroy();
  };
  /** `s` if it echoes a byte, else null (closed or reset first); it stays open. */
  const echoes = (s: net.Socket | null) => new Promise<net.Socket | null>((resolve) => {
    if (!s) return resolve(null);
    opened.push(s);
    s.on('error', () => undefined);
    s.once('data', () => resolve(s));
    s.once('close', () => resolve(null));
    s.write('x');
  });
  /** The owner's docker: a client certificate dockerd accepts. */
  const docker = async () => echoes(await tlsConnect(edge.port, ENGINE, { ca: certs.ca_cert, cert: certs.client_cert, key: certs.client_key }).catch(() => null));
  /** The owner's ssh, whose TLS the edge ends. */
  const ssh = async () => echoes(await tlsConnect(edge.port, SHELL).catch(() => null));

  /**
   * `count` handshakes from the address `from` that send `hello` and then nothing, at once; resolves
   * with those the edge took on (the server's hello came back), left hanging.
   */
  const hang = async (from: string, hello: Buffer, count: number): Promise<net.Socket[]> => {
    const answered = await Promise.all(Array.from({ length: count }, () => new Promise<net.Socket | null>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: edge.port, localAddress: from }, () => s.write(hello));
      opened.push(s);
      s.on('error', () => undefined);
      s.once('data', () => resolve(s));
      s.once('close', () => resolve(null));
    })));
    return answered.filter((s): s is net.Socket => s !== null);
  };

  it('a stranger\'s hanging handshakes hold 16 places per address and sandbox, none of the sandbox\'s: the owner\'s docker and ssh get through', async () => {
    const [engineHello, shellHello] = [await clientHello(ENGINE), await clientHello(SHELL)];
    assert.equal((await hang('127.0.0.2', shellHello, 20)).length, 16, 'one address: 16 hanging shell handshakes, the rest refused');
    if (api) assert.equal((await api.table('st_client_tunnels')).get(`127.0.0.2|${SANDBOX}`)?.conn_cur, 16, 'HAProxy holds them');
    assert.equal((await hang('127.0.0.3', engineHello, 20)).length, 16, 'one address: 16 hanging engine handshakes, the rest refused');
    // eight more addresses each for the shell and the engine: 144 hanging handshakes for each name
    const hanging: net.Socket[] = [];
    for (let i = 0; i < 8; i++) {
      hanging.push(...await hang(`127.0.0.${10 + i}`, shellHello, 16));
      hanging.push(...await hang(`127.0.0.${20 + i}`, engineHello, 16));
    }
    assert.equal(hanging.length, 256);
    assert.ok(await docker(), 'the owner\'s docker connection');
    assert.ok(await ssh(), 'the owner\'s ssh connection');
    assert.equal(hanging.filter((s) => s.destroyed).length, 0, 'the strangers\' handshakes were still hanging');
    closeAll();
  });

  it('128 carried tunnels per sandbox, engine and shell together; a closed one frees its place', async () => {
    // in rounds of 8: never more than 16 of the owner's in a handshake at once
    for (let round = 0; round < 8; round++) {
      const done = await Promise.all([...Array.from({ length: 8 }, docker), ...Array.from({ length: 8 }, ssh)]);
      assert.ok(done.every(Boolean), `round ${round}: every tunnel carried`);
    }
    if (api) {
      assert.equal((await api.table('be_engine')).get(SANDBOX)?.conn_cur, 64, 'HAProxy carries the owner\'s engine connections');
      assert.equal((await api.table('st_tunnels')).get(SANDBOX)?.conn_cur, 64, 'and the shells');
    }
    // HAProxy refuses an engine connection at its ClientHello, Node once dockerd accepted the
    // client: what dockerd sent with its acceptance (here the echo) may reach the client first
    const extra = await docker();
    if (extra) await eventually(async () => extra.destroyed, 'a 129th tunnel (docker) is ended by the edge', 5_000, 20);
    assert.equal(await ssh(), null, 'a 129th tunnel (ssh) is refused');
    opened.find((s) => !s.destroyed)!.destroy();
    await eventually(async () => (await ssh()) !== null, 'a place again after a close', 5_000, 50);
    closeAll();
  });
});
