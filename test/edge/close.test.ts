import assert from 'node:assert/strict';
import { once } from 'node:events';
import https from 'node:https';
import net from 'node:net';
import { test } from 'node:test';
import tls from 'node:tls';
import { lookupLoopback, readUntilClose, sleep, startApp, startTestEdge, TestBackend } from './helpers.ts';

test('close() stops listening and drops open streams, passthroughs and half-done handshakes', async () => {
  let appSide = 0;
  const app = await startApp((req, res) => {
    appSide++;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: open\n\n');
    req.on('close', () => appSide--);
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

  // A ClientHello for the engine route: spliced to the engine stand-in, which never answers it.
  let engineConns = 0;
  engine.on('connection', () => engineConns++);
  const pass = tls.connect({ host: '127.0.0.1', port: e.port, servername: 'svc-c-engine.localhost', rejectUnauthorized: false });
  pass.on('error', () => {});
  const passClosed = new Promise((r) => pass.once('close', r)); // events.once would reject on the expected error
  const idle = net.connect(e.port, '127.0.0.1'); // never sends a ClientHello
  await sleep(200);
  assert.equal(engineConns, 1, 'the engine connection is spliced');

  const t0 = Date.now();
  await e.close();
  const idleEnd = await readUntilClose(idle, 2000);
  await Promise.race([sseClosed, sleep(2000).then(() => assert.fail('the SSE stream stayed open'))]);
  assert.ok(idleEnd.closed, 'a connection still in its ClientHello is closed');
  await Promise.race([passClosed, sleep(2000).then(() => assert.fail('the passthrough stayed open'))]);
  assert.ok(Date.now() - t0 < 3000, `close took ${Date.now() - t0} ms`);
  for (let i = 0; i < 50 && appSide > 0; i++) await sleep(20);
  assert.equal(appSide, 0, 'the app saw its request end');
  const refused = await new Promise<string>((r) => net.connect(e.port, '127.0.0.1').on('error', (err: NodeJS.ErrnoException) => r(err.code ?? '')).on('connect', () => r('connected')));
  assert.equal(refused, 'ECONNREFUSED');
  engine.close();
  await app.close();
});
