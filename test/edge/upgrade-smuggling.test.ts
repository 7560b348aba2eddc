import assert from 'node:assert/strict';
import type http from 'node:http';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { lookupLoopback, readUntilClose, startApp, startTestEdge, TestBackend, tlsConnect, type TestEdge } from '../../harness/edge.ts';

/**
 * Issue 14, hole 3: after a request asking for an upgrade the edge used to splice raw bytes, so a
 * second request on the same connection reached the app as the client wrote it — with a forged
 * X-Forwarded-For. Only a 101 may turn a connection into a tunnel.
 */
const backend = new TestBackend();
let edge: TestEdge;
let plain: { port: number; close(): Promise<void> };
let sockets: Awaited<ReturnType<typeof startApp>>;
const seen: Array<{ url: string; xff: string | undefined }> = [];

const record = (req: http.IncomingMessage) => seen.push({ url: req.url ?? '', xff: req.headers['x-forwarded-for'] as string | undefined });

/** An app that ignores Upgrade and keeps the connection (as nginx without websocket set-up does): 200 per request head. */
async function keepAliveApp(): Promise<{ port: number; close(): Promise<void> }> {
  const server = net.createServer((socket) => {
    let buffered = '';
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      let end: number;
      while ((end = buffered.indexOf('\r\n\r\n')) >= 0) {
        const [line, ...headers] = buffered.slice(0, end).split('\r\n');
        buffered = buffered.slice(end + 4);
        const url = line!.split(' ')[1] ?? '';
        const xff = headers.find((h) => /^x-forwarded-for:/i.test(h))?.split(':')[1]?.trim();
        seen.push({ url, xff });
        const body = `plain ${url}`;
        socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

before(async () => {
  plain = await keepAliveApp();
  sockets = await startApp((req, res) => {
    record(req);
    res.end('no');
  });
  const wss = new WebSocketServer({ server: sockets.server });
  wss.on('connection', (ws) => ws.on('message', (m) => ws.send(`echo ${m}`)));
  backend.addApp('svc-smug-web', 'svc-smug', { host: '127.0.0.1', port: plain.port });
  backend.addApp('svc-smug-ws', 'svc-smug', { host: '127.0.0.1', port: sockets.port });
  edge = await startTestEdge(backend);
});

after(async () => {
  await edge?.close();
  await plain?.close();
  await sockets?.close();
});

test('a request smuggled after a refused upgrade never reaches the app', async () => {
  seen.length = 0;
  const s = await tlsConnect(edge.port, 'svc-smug-web.localhost');
  s.write(
    'GET /first HTTP/1.1\r\nHost: svc-smug-web.localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n' +
      'GET /smuggled HTTP/1.1\r\nHost: svc-smug-web.localhost\r\nX-Forwarded-For: 10.6.6.6\r\n\r\n',
  );
  const { data, closed } = await readUntilClose(s, 10_000);
  assert.deepEqual(seen.map((r) => r.url), ['/first'], 'the app saw only the first request');
  assert.ok(closed, 'the edge closes the connection after the refused upgrade');
  assert.match(data, /^HTTP\/1\.1 200/);
  assert.match(data, /plain \/first$/);
  assert.equal(seen[0]!.xff, '127.0.0.1', 'X-Forwarded-For is the edge\'s own');
});

test('a 101 still turns the connection into a tunnel (websocket echo)', async () => {
  const ws = new WebSocket(`wss://svc-smug-ws.localhost:${edge.port}/ws`, { ca: edge.caPem, lookup: lookupLoopback as never });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const answer = new Promise<string>((resolve) => ws.once('message', (m) => resolve(String(m))));
  ws.send('hi');
  assert.equal(await answer, 'echo hi');
  ws.close();
});
