import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { startTestEdge, TestBackend, tlsConnect, type TestEdge } from '../../harness/edge.ts';

/**
 * An app that closes its connection after each answer (busybox httpd, HTTP/1.0 servers, a hostile
 * app on purpose), in front of a client that reads slowly: the edge pauses the app's response for
 * the client, and the app's FIN arrives meanwhile. undici 7 asserts on that and took the whole
 * process down (nodejs/undici#5360); the edge holds the FIN back until the response goes on.
 */
const BODY = 8 * 1024 * 1024;
const backend = new TestBackend();
let edge: TestEdge;
let app: net.Server;
let appPort: number;

before(async () => {
  app = net.createServer((socket) => {
    socket.once('data', (req) => {
      const path = /^GET (\S+)/.exec(req.toString())?.[1];
      const body = Buffer.alloc(BODY, 'z');
      if (path === '/length') socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${BODY}\r\nConnection: close\r\n\r\n`), body]));
      else if (path === '/eof') socket.end(Buffer.concat([Buffer.from('HTTP/1.0 200 OK\r\n\r\n'), body]));
      // declares more than it sends, then closes: the client must see a cut answer, never a whole one
      else socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${BODY * 2}\r\nConnection: close\r\n\r\n`), body]));
    });
    socket.on('error', () => undefined);
  });
  appPort = await new Promise<number>((r) => app.listen(0, '127.0.0.1', () => r((app.address() as net.AddressInfo).port)));
  edge = await startTestEdge(backend);
  backend.addApp('svc-c-web', 'svc-c', { host: '127.0.0.1', port: appPort });
  backend.setStatus('svc-c', 'running');
});

after(async () => {
  await edge.close();
  await new Promise((r) => app.close(r));
});

/** GET `path` through the edge, reading 64 KiB every 5 ms: the edge pauses the app again and again. */
async function slowGet(path: string): Promise<{ head: string; bodyBytes: number; closed: boolean }> {
  const socket = await tlsConnect(edge.port, 'svc-c-web.localhost');
  socket.write(`GET ${path} HTTP/1.1\r\nHost: svc-c-web.localhost\r\nConnection: close\r\n\r\n`);
  socket.pause();
  let received = Buffer.alloc(0);
  const closed = new Promise<boolean>((r) => socket.once('close', () => r(true)));
  const timer = setInterval(() => {
    for (let i = 0; i < 4; i++) {
      const chunk = socket.read() as Buffer | null;
      if (!chunk) break;
      received = Buffer.concat([received, chunk]);
    }
  }, 5);
  socket.on('end', () => undefined);
  const ended = await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), 60_000))]);
  clearInterval(timer);
  for (let chunk; (chunk = socket.read() as Buffer | null);) received = Buffer.concat([received, chunk]);
  socket.destroy();
  const split = received.indexOf('\r\n\r\n');
  const head = received.subarray(0, split).toString('latin1');
  // chunked framing adds a few bytes per chunk: count the payload's letters (z: no hex digit) only
  const bodyBytes = received.subarray(split + 4).reduce((n, b) => n + (b === 0x7a ? 1 : 0), 0);
  return { head, bodyBytes, closed: ended };
}

test('an app that closes after answering, behind a slow client: whole answers, and the edge lives on', async () => {
  for (const path of ['/length', '/eof', '/length', '/eof']) {
    const r = await slowGet(path);
    assert.ok(r.closed, `${path}: the answer ended`);
    // the app's own version may come back: HAProxy 2.6 relays a response's HTTP/1.0 status line
    // (h1_format_htx_stline) where Node's edge writes its own 1.1; the body ends at the close either way
    assert.match(r.head, /^HTTP\/1\.[01] 200/, path);
    assert.equal(r.bodyBytes, BODY, `${path}: the whole body`);
  }
});

test('an app that declares more than it sends, then closes: a cut answer, and the edge lives on', async () => {
  const r = await slowGet('/short');
  assert.match(r.head, /^HTTP\/1\.1 200/);
  assert.ok(r.bodyBytes < BODY * 2, 'never a whole answer');
  assert.ok(r.closed, 'the client connection is closed');
  const again = await slowGet('/length');
  assert.equal(again.bodyBytes, BODY);
});
