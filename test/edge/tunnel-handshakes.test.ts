import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { issueEngineCerts } from '../../lifecycle/engine-certs.ts';
import type { EngineCerts } from '../../store/records.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { DEFAULT_LIMITS } from '../../edge/limits.ts';
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
 * ssh. Review S12 H1: a shell's TLS asks no credential, so carried shells and TCP twins hold at
 * most 64 of those places, 32 per client address; M1: engine connections HAProxy carries for a
 * proven address (counted from their ClientHello) at most 64 per address. Default limits; the
 * edge SVC_DATA_PLANE chooses (with HAProxy, the shell name in its map and the owner's engine
 * connections carried by it, a stranger's by Node).
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
  const { shellTunnelsPerSandbox, shellTunnelsPerClient, engineTunnelsPerClient, tunnelsPerSandbox, tunnelHandshakesPerClient } = DEFAULT_LIMITS;

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
    await closeAll();
  });
  after(async () => {
    await closeAll();
    await edge?.close();
    engine?.close();
    sshd?.close();
  });

  /**
   * Ends every connection the test opened and waits until the edge let go of it: the edge's FIN
   * comes back once it closed its side (Node), HAProxy's tables show it (HAProxy).
   */
  const closeAll = async () => {
    await Promise.all(opened.splice(0).map((s) => new Promise<void>((resolve) => {
      if (s.destroyed) return resolve();
      s.once('close', () => resolve());
      s.end();
      setTimeout(() => s.destroy(), 2_000).unref();
    })));
    if (api) {
      const haproxy = api;
      await eventually(async () => {
        for (const table of ['be_engine', 'st_tunnels', 'st_client_tunnels', 'st_client_carried', 'st_client_engines']) {
          for (const [key, c] of await haproxy.table(table)) if (key.endsWith(SANDBOX) && c.conn_cur) return false;
        }
        return true;
      }, 'HAProxy let go of every connection', 5_000, 20);
    }
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
  /** A TCP connection to the edge from the address `from`. */
  const from = (address: string) => net.connect({ host: '127.0.0.1', port: edge.port, localAddress: address });
  /** The owner's docker: a client certificate dockerd accepts. */
  const docker = async (address = '127.0.0.1') => echoes(await tlsConnect(edge.port, ENGINE, { ca: certs.ca_cert, cert: certs.client_cert, key: certs.client_key, socket: from(address) }).catch(() => null));
  /** An ssh, whose TLS the edge ends: it asks no credential, so the owner's and a stranger's look alike. */
  const ssh = async (address = '127.0.0.1') => echoes(await tlsConnect(edge.port, SHELL, { socket: from(address) }).catch(() => null));
  /** `count` of `open` in rounds of 8 (below the 16 handshakes per client and sandbox); those that were carried. */
  const inRounds = async (count: number, open: () => Promise<net.Socket | null>) => {
    const carried: net.Socket[] = [];
    for (let done = 0; done < count; done += 8) {
      const round = await Promise.all(Array.from({ length: Math.min(8, count - done) }, open));
      carried.push(...round.filter((s): s is net.Socket => s !== null));
    }
    return carried;
  };

  /**
   * `count` handshakes from `address` that send `hello` and then nothing, at once; resolves
   * with those the edge took on (the server's hello came back), left hanging.
   */
  const hang = async (address: string, hello: Buffer, count: number): Promise<net.Socket[]> => {
    const answered = await Promise.all(Array.from({ length: count }, () => new Promise<net.Socket | null>((resolve) => {
      const s = from(address).once('connect', () => s.write(hello));
      opened.push(s);
      s.on('error', () => undefined);
      s.once('data', () => resolve(s));
      s.once('close', () => resolve(null));
    })));
    return answered.filter((s): s is net.Socket => s !== null);
  };

  it('a stranger\'s hanging handshakes hold 16 places per address and sandbox, none of the sandbox\'s: the owner\'s docker and ssh get through', async () => {
    const [engineHello, shellHello] = [await clientHello(ENGINE), await clientHello(SHELL)];
    assert.equal((await hang('127.0.0.2', shellHello, 20)).length, tunnelHandshakesPerClient, 'one address: 16 hanging shell handshakes, the rest refused');
    if (api) assert.equal((await api.table('st_client_tunnels')).get(`127.0.0.2|${SANDBOX}`)?.conn_cur, 16, 'HAProxy holds them');
    assert.equal((await hang('127.0.0.3', engineHello, 20)).length, tunnelHandshakesPerClient, 'one address: 16 hanging engine handshakes, the rest refused');
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
    await closeAll();
  });

  it('one address holds at most 32 carried shells per sandbox', async () => {
    // addresses the test has not used yet: Node holds the first test's hanging handshakes for its deadline
    const held = await inRounds(shellTunnelsPerClient + 16, () => ssh('127.0.0.30'));
    assert.equal(held.length, shellTunnelsPerClient, '32 carried and held, the rest refused once their TLS ended');
    if (api) assert.equal((await api.table('st_client_carried')).get(`127.0.0.30|${SANDBOX}`)?.conn_cur, shellTunnelsPerClient, 'HAProxy carries them');
    assert.ok(await ssh('127.0.0.31'), 'another address\'s ssh');
    await closeAll();
  });

  it('shells hold at most 64 of the sandbox\'s 128 places: strangers\' shells leave the owner\'s docker the rest', async () => {
    // three stranger addresses, each up to its 32, at once
    const strangers = (await Promise.all(['127.0.0.32', '127.0.0.33', '127.0.0.34'].map((address) => inRounds(shellTunnelsPerClient, () => ssh(address))))).flat();
    assert.equal(strangers.length, shellTunnelsPerSandbox, 'the strangers hold the shells\' 64 places, no more');
    assert.equal(await ssh(), null, 'the owner\'s 65th shell is refused');
    const dockers = await inRounds(tunnelsPerSandbox - shellTunnelsPerSandbox, () => docker());
    assert.equal(dockers.length, tunnelsPerSandbox - shellTunnelsPerSandbox, 'the owner\'s docker gets the other 64 places');
    if (api) {
      assert.equal((await api.table('be_engine')).get(SANDBOX)?.conn_cur, 64, 'HAProxy carries the owner\'s engine connections');
      assert.equal((await api.table('st_tunnels')).get(SANDBOX)?.conn_cur, 64, 'and the strangers\' shells');
    }
    // HAProxy refuses an engine connection at its ClientHello, Node once dockerd accepted the
    // client: what dockerd sent with its acceptance (here the echo) may reach the client first
    const extra = await docker();
    if (extra) await eventually(async () => extra.destroyed, 'a 129th tunnel (docker) is ended by the edge', 5_000, 20);
    strangers[0].destroy();
    await eventually(async () => (await ssh()) !== null, 'a stranger\'s closed shell leaves its place to the owner\'s', 5_000, 50);
    await closeAll();
  });

  it('a neighbour at the owner\'s proven address holds at most 64 engine connections with hanging ClientHellos', async () => {
    // HAProxy carries 127.0.0.1's engine connections from their ClientHello (the owner's docker was
    // proven from there); Node holds each as one of the address's 16 handshakes
    const hanging = await hang('127.0.0.1', await clientHello(ENGINE), tunnelsPerSandbox);
    assert.equal(hanging.length, api ? engineTunnelsPerClient : tunnelHandshakesPerClient, 'the rest refused');
    assert.ok(await docker('127.0.0.35'), 'docker from another address');
    assert.ok(await ssh('127.0.0.35'), 'ssh from another address');
    assert.equal(hanging.filter((s) => s.destroyed).length, 0, 'the neighbour\'s handshakes were still hanging');
    await closeAll();
  });
});
