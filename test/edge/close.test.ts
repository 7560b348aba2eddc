import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import https from 'node:https';
import net from 'node:net';
import { test } from 'node:test';
import tls from 'node:tls';
import { within } from '../helpers/within.ts';
import { lookupLoopback, readUntilClose, startApp, startTestEdge, TestBackend } from '../../harness/edge.ts';

test('close() stops listening and drops open streams, passthroughs and half-done handshakes', async () => {
  let appSide = 0;
  const appEnded = new EventEmitter();
  const app = await startApp((req, res) => {
    appSide++;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: open\n\n');
    req.on('close', () => { if (--appSide === 0) appEnded.emit('all'); });
  });
  const engine = net.createServer((s) => s.on('data', () => {}));
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  const backend = new TestBackend();
  backend.addApp('svc-c-web', 'svc-c', { host: '127.0.0.1', port: app.port });
  const e = await startTestEdge(backend, { sandboxPorts: { engine: (engine.address() as net.AddressInfo).port } });

  const req = https.request({ host: 'svc-c-web.localhost', port: e.port, path: '/sse', ca: e.caPem, lookup: lookupLoopback as never, agent: false });
  req.end();
  const [res] = await once(req, 'response');
  await once(res, 'data');
  const sseClosed = new Promise((r) => res.once('close', r));
  res.on('error', () => {});

  // A connection that never sends a ClientHello, then a ClientHello for the engine route: spliced
  // to the engine stand-in, which never answers it. The edge accepts them in that order, so once
  // the engine has its connection, the idle one is the edge's too.
  let engineConns = 0;
  const spliced = within(5000, 'the engine connection to be spliced', (done) => {
    engine.on('connection', () => { engineConns++; done(undefined); });
    return () => undefined;
  });
  const idle = net.connect(e.port, '127.0.0.1');
  const pass = tls.connect({ host: '127.0.0.1', port: e.port, servername: 'svc-c-engine.localhost', rejectUnauthorized: false });
  pass.on('error', () => {});
  const passClosed = new Promise((r) => pass.once('close', r)); // events.once would reject on the expected error
  await spliced;
  assert.equal(engineConns, 1, 'the engine connection is spliced');

  const t0 = Date.now();
  await e.close();
  const idleEnd = await readUntilClose(idle, 2000);
  await within(2000, 'the SSE stream to close', (done) => { void sseClosed.then(done); return () => undefined; });
  assert.ok(idleEnd.closed, 'a connection still in its ClientHello is closed');
  await within(2000, 'the passthrough to close', (done) => { void passClosed.then(done); return () => undefined; });
  assert.ok(Date.now() - t0 < 3000, `close took ${Date.now() - t0} ms`);
  if (appSide > 0) await within(1000, 'the app to see its request end', (done) => { appEnded.once('all', () => done(undefined)); return () => undefined; });
  assert.equal(appSide, 0, 'the app saw its request end');
  const refused = await new Promise<string>((r) => net.connect(e.port, '127.0.0.1').on('error', (err: NodeJS.ErrnoException) => r(err.code ?? '')).on('connect', () => r('connected')));
  assert.equal(refused, 'ECONNREFUSED');
  engine.close();
  await app.close();
});
