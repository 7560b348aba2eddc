import assert from 'node:assert/strict';
import net from 'node:net';
import type tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../harness/service.ts';
import { startTestEdge, TestBackend, tlsConnect, type TestEdge } from '../../harness/edge.ts';

/**
 * Issue 14, hole 5: raw tunnels and connections were not bounded, and a tunnel whose client
 * vanished without a FIN held its place for ever. Small limits here; the defaults are 256
 * connections per client, 128 tunnels per sandbox and 1 h without a byte.
 */
describe('tunnel and connection limits', () => {
  const backend = new TestBackend();
  let edge: TestEdge;
  let echo: net.Server;
  const opened: net.Socket[] = [];

  before(async () => {
    echo = net.createServer((s) => { s.on('error', () => undefined); s.pipe(s); });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    backend.addApp('svc-lim-db', 'svc-lim', { host: '127.0.0.1', port: (echo.address() as net.AddressInfo).port });
    edge = await startTestEdge(backend, { limits: { tunnelsPerSandbox: 2 }, timeouts: { tunnelIdleMs: 3_000 } });
  });
  after(async () => {
    for (const s of opened) s.destroy();
    await edge?.close();
    echo?.close();
  });

  /** A TCP-twin tunnel; resolves with whether it carries bytes. */
  const tunnel = async (): Promise<{ socket: tls.TLSSocket | null; works: boolean }> => {
    const socket = await tlsConnect(edge.port, 'svc-lim-db-tcp.localhost').catch(() => null);
    if (!socket) return { socket, works: false }; // reset before the handshake ended
    opened.push(socket);
    socket.on('error', () => undefined);
    const works = await new Promise<boolean>((resolve) => {
      socket.once('data', () => resolve(true));
      socket.once('close', () => resolve(false));
      socket.write('x');
    });
    return { socket, works };
  };

  it('holds at most N tunnels per sandbox; a closed one frees its place', async () => {
    const first = await tunnel();
    const second = await tunnel();
    assert.ok(first.works && second.works);
    assert.equal((await tunnel()).works, false, 'the third tunnel is refused');
    first.socket!.destroy();
    await eventually(async () => (await tunnel()).works, 'a place again after a close', 10_000, 100);
    for (const s of opened) s.destroy();
  });

  it('closes a tunnel after its idle time without a byte', async () => {
    const { socket, works } = await eventually(async () => { const t = await tunnel(); return t.works ? t : null; }, 'a tunnel', 10_000, 100);
    assert.ok(works);
    await eventually(async () => socket!.destroyed, 'the idle tunnel closed', 10_000, 100);
  });

  it('holds at most N connections per client address', async () => {
    const own = await startTestEdge(backend, { limits: { connectionsPerClient: 4 } });
    try {
      const raw = Array.from({ length: 5 }, () => net.connect(own.port, '127.0.0.1'));
      for (const s of raw) { s.on('error', () => undefined); opened.push(s); }
      await eventually(async () => raw.filter((s) => s.destroyed).length === 1, 'one of five connections closed', 10_000, 100);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(raw.filter((s) => s.destroyed).length, 1, 'the other four stay open');
    } finally {
      for (const s of opened) s.destroy();
      await own.close();
    }
  });
});
