import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { ACTIVITY_POLL_MS } from '../../edge/dataplane/activity-poll.ts';
import { issueEngineCerts } from '../../lifecycle/engine-certs.ts';
import type { EngineCerts } from '../../store/records.ts';
import { eventually } from '../../harness/service.ts';
import { freePort, sleep, startTestEdge, TestBackend, type TestEdge } from '../../harness/edge.ts';

/**
 * Issue 14, hole 5: engine connections pass through the edge unopened (mutual TLS ends at the
 * sandbox's dockerd), and their bytes counted as activity — so anyone without credentials could
 * keep any sandbox awake by starting handshakes. Bytes count only once the engine accepted the
 * client. A stand-in engine here: a TLS server that requires the sandbox's client certificate.
 */
/** Longer than one reading of the data plane's activity, with a busy machine's delay. */
const ACTIVITY_READING_MS = ACTIVITY_POLL_MS + 500;

describe('engine activity needs a client the engine accepted', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let engine: tls.Server;
  let certs: EngineCerts;

  before(async () => {
    certs = await issueEngineCerts('svc-eng', 'svc-eng-engine.localhost');
    engine = tls.createServer({ key: certs.server_key, cert: certs.server_cert, ca: certs.ca_cert, requestCert: true, rejectUnauthorized: true }, (s) => {
      s.on('error', () => undefined);
      s.on('data', (d) => s.write(d));
    });
    engine.on('tlsClientError', () => undefined);
    const port = await freePort();
    await new Promise<void>((r) => engine.listen(port, '127.0.0.1', r));
    backend.sandboxes.set('svc-eng', { status: 'running', address: '127.0.0.1' });
    edge = await startTestEdge(backend, { sandboxPorts: { engine: port }, timeouts: { activityIntervalMs: 0 } });
  });
  after(async () => {
    await edge?.close();
    engine?.close();
  });

  /**
   * Connects through the edge, sends a few lines, and waits until the connection ends. Each line
   * carries 1 KiB, as any docker command moves a few: through HAProxy an engine connection counts
   * once dockerd sent more than a refused client ever gets (its handshake flight + 1 KiB).
   */
  const session = (version: tls.SecureVersion, withCert: boolean) => new Promise<string>((resolve) => {
    const s = tls.connect({
      host: '127.0.0.1', port: edge.port, servername: 'svc-eng-engine.localhost', ca: certs.ca_cert,
      minVersion: version, maxVersion: version,
      ...(withCert ? { cert: certs.client_cert, key: certs.client_key } : {}),
    });
    let echoed = '';
    s.on('error', () => undefined);
    s.on('data', (d) => { echoed += d; if (echoed.includes('ping 2')) s.end(); });
    s.on('secureConnect', async () => {
      for (let i = 0; i < 3 && !s.destroyed; i++) {
        s.write(`ping ${i} ${'x'.repeat(1024)}\n`);
        await sleep(50);
      }
    });
    s.on('close', () => resolve(echoed));
    setTimeout(() => s.destroy(), 5_000);
  });

  for (const version of ['TLSv1.3', 'TLSv1.2'] as const) {
    it(`${version}: a client without the certificate moves bytes but renews nothing; one with it does`, async () => {
      backend.activity.length = 0;
      for (let i = 0; i < 3; i++) assert.equal(await session(version, false), '', 'the engine refused the client');
      // What both edges promise is activity within its granularity (docs/data-plane.md): Node counts
      // as bytes pass, HAProxy's sessions are read once a second, so wait one reading before saying none
      await sleep(ACTIVITY_READING_MS);
      assert.equal(backend.activity.length, 0, `refused handshakes are no activity (${backend.activity.length} renewals)`);
      assert.match(await session(version, true), /ping 2/);
      await eventually(async () => backend.activity.includes('svc-eng'), 'an accepted client is activity', 3 * ACTIVITY_READING_MS, 20);
    });
  }

  it('ignores bytes that are no TLS at all', async () => {
    backend.activity.length = 0;
    const s = net.connect(edge.port, '127.0.0.1');
    s.on('error', () => undefined);
    // a ClientHello-looking start (so the edge routes it), then garbage records
    const hello = Buffer.from('16030100', 'hex');
    s.write(hello);
    s.destroy();
    await sleep(200);
    assert.equal(backend.activity.length, 0);
  });
});

/**
 * The shell: TLS ends at the edge but SSH is opaque, and sshd drops a connection that has not
 * signed in within its login grace time (120 s); only an older connection's bytes count.
 */
describe('shell activity needs a connection older than the login grace time', () => {
  const backend = new TestBackend();
  let sshd: net.Server;
  let port: number;
  const edges: TestEdge[] = [];

  before(async () => {
    sshd = net.createServer((s) => { s.on('error', () => undefined); s.pipe(s); });
    await new Promise<void>((r) => sshd.listen(0, '127.0.0.1', r));
    port = (sshd.address() as net.AddressInfo).port;
    backend.sandboxes.set('svc-sh', { status: 'running', address: '127.0.0.1' });
  });
  after(async () => {
    for (const e of edges) await e.close();
    sshd?.close();
  });

  const shellThrough = async (shellProofMs: number) => {
    const edge = await startTestEdge(backend, { sandboxPorts: { shell: port }, timeouts: { activityIntervalMs: 0, shellProofMs } });
    edges.push(edge);
    const s = tls.connect({ host: '127.0.0.1', port: edge.port, servername: 'svc-sh-shell-tcp.localhost', rejectUnauthorized: false });
    s.on('error', () => undefined);
    await new Promise((r) => s.once('secureConnect', r));
    return s;
  };

  it('does not count the bytes of a young connection (a login attempt), and counts them later', async () => {
    backend.activity.length = 0;
    const young = await shellThrough(600_000);
    young.write('SSH-2.0-OpenSSH_9.2\r\n');
    await new Promise((r) => young.once('data', r));
    young.destroy();
    assert.equal(backend.activity.length, 0, 'a login attempt is no activity');

    const old = await shellThrough(300);
    await eventually(async () => {
      old.write('x');
      return backend.activity.includes('svc-sh');
    }, 'activity once the connection outlived the grace time', 10_000, 100);
    old.destroy();
  });

  it('a client that stalls its TLS handshake and then sends bytes until sshd drops its login is no activity', async () => {
    // sshd's clock starts when it accepts, after the handshake: it drops a login at its grace,
    // here just under the proof age (the default's margin, made small)
    const proofMs = 2_000;
    const graceSshd = net.createServer((s) => {
      s.on('error', () => undefined);
      s.pipe(s);
      setTimeout(() => s.destroy(), proofMs - 100);
    });
    await new Promise<void>((r) => graceSshd.listen(0, '127.0.0.1', r));
    const edge = await startTestEdge(backend, {
      sandboxPorts: { shell: (graceSshd.address() as net.AddressInfo).port },
      timeouts: { activityIntervalMs: 0, shellProofMs: proofMs },
    });
    edges.push(edge);
    // between the client and the edge: the ClientHello goes at once, the rest of the handshake 1.5 s later
    const stall = net.createServer((c) => {
      const e = net.connect(edge.port, '127.0.0.1');
      c.on('error', () => undefined);
      e.on('error', () => undefined);
      e.pipe(c);
      c.once('close', () => e.destroy());
      e.once('close', () => c.destroy());
      const held: Buffer[] = [];
      const hold = (d: Buffer) => void held.push(d);
      c.once('data', (d: Buffer) => {
        e.write(d);
        c.on('data', hold);
        setTimeout(() => {
          c.off('data', hold);
          for (const b of held) e.write(b);
          c.pipe(e);
        }, 1_500);
      });
    });
    await new Promise<void>((r) => stall.listen(0, '127.0.0.1', r));
    try {
      backend.activity.length = 0;
      const s = tls.connect({ host: '127.0.0.1', port: (stall.address() as net.AddressInfo).port, servername: 'svc-sh-shell-tcp.localhost', rejectUnauthorized: false });
      s.on('error', () => undefined);
      await new Promise((r) => s.once('secureConnect', r));
      const closed = new Promise((r) => s.once('close', r));
      const typing = setInterval(() => s.write('SSH-2.0-x\r\n'), 50);
      await closed;
      clearInterval(typing);
      assert.deepEqual(backend.activity, [], 'pre-auth bytes are no activity');
    } finally {
      stall.close();
      graceSshd.close();
    }
  });
});
