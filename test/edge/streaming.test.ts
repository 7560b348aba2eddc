import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import https from 'node:https';
import { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { lookupLoopback, sleep, startApp, startTestEdge, TestBackend, type TestEdge } from '../../harness/edge.ts';

const MB = 1024 * 1024;
const backend = new TestBackend();
let edge: TestEdge;
let app: Awaited<ReturnType<typeof startApp>>;
let wss: WebSocketServer;
let uploadFirstChunk: (() => void) | null = null;
/** Tells the SSE app that the client has received its last event whole. */
let sseReceived: (() => void) | null = null;
let downloadsCut = 0;

before(async () => {
  app = await startApp((req, res) => {
    if (req.url === '/sse') {
      // each event only once the client got the one before: an edge that held them back would stall
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      void (async () => {
        for (let n = 1; n <= 3 && !res.destroyed; n++) {
          const got = new Promise<void>((r) => (sseReceived = r));
          res.write(`data: tick ${n}\n\n`);
          await got;
        }
        res.end();
      })();
      return;
    }
    if (req.url?.startsWith('/download')) {
      const total = Number(new URL(req.url, 'http://x').searchParams.get('bytes'));
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let sent = 0;
      res.on('close', () => {
        if (!res.writableFinished) downloadsCut++;
      });
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) });
      // Readable.from respects backpressure: the app produces only as fast as the edge takes.
      Readable.from(
        (function* () {
          while (sent < total) {
            const n = Math.min(chunk.length, total - sent);
            sent += n;
            yield n === chunk.length ? chunk : chunk.subarray(0, n);
          }
        })(),
      ).pipe(res);
      return;
    }
    if (req.url === '/upload') {
      const hash = createHash('sha256');
      let size = 0;
      req.on('data', (c: Buffer) => {
        if (size === 0) uploadFirstChunk?.();
        size += c.length;
        hash.update(c);
      });
      req.on('end', () => res.end(JSON.stringify({ size, sha256: hash.digest('hex'), te: req.headers['transfer-encoding'] ?? null })));
      return;
    }
    res.end('ok');
  });
  wss = new WebSocketServer({ server: app.server });
  wss.on('connection', (ws, req) => {
    ws.send(`hello ${req.headers['x-forwarded-for']}`);
    ws.on('message', (m) => ws.send(`echo ${m.toString()}`));
  });
  backend.addApp('svc-s-web', 'svc-s', { host: '127.0.0.1', port: app.port });
  edge = await startTestEdge(backend, { timeouts: { activityIntervalMs: 50 } });
});

after(async () => {
  wss.close();
  await edge.close();
  await app.close();
});

function request(path: string, opts: https.RequestOptions = {}) {
  return https.request({ host: 'svc-s-web.localhost', port: edge.port, path, ca: edge.caPem, lookup: lookupLoopback as never, agent: false, ...opts });
}

test('websocket: upgrade, messages both ways, activity while messages flow', async () => {
  const ws = new WebSocket(`wss://svc-s-web.localhost:${edge.port}/ws`, { ca: edge.caPem, lookup: lookupLoopback as never });
  const messages: string[] = [];
  ws.on('message', (m) => messages.push(m.toString()));
  await once(ws, 'open');
  const before = backend.activity.length;
  for (let i = 0; i < 5; i++) {
    ws.send(`m${i}`);
    await sleep(80);
  }
  while (messages.length < 6) await sleep(10);
  assert.equal(messages[0], 'hello 127.0.0.1');
  assert.deepEqual(messages.slice(1), ['echo m0', 'echo m1', 'echo m2', 'echo m3', 'echo m4']);
  assert.ok(backend.activity.length - before >= 3, `websocket traffic recorded ${backend.activity.length - before} times`);
  ws.close();
  await once(ws, 'close');
});

test('SSE: events arrive one by one, not at the end', async () => {
  const req = request('/sse');
  req.end();
  const [res] = await once(req, 'response');
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers['content-type'], 'text/event-stream');
  // the app sends the next event only once this client has the last one whole: the stream ends
  // only if each event came through on its own
  let text = '';
  res.on('data', (c: Buffer) => {
    text += c.toString();
    if (text.endsWith('\n\n')) sseReceived?.();
  });
  await once(res, 'end', { signal: AbortSignal.timeout(30_000) }).catch(() => assert.fail(`the stream stalled after ${JSON.stringify(text)}: an event was held back`));
  assert.equal(text, 'data: tick 1\n\ndata: tick 2\n\ndata: tick 3\n\n');
});

test('chunked upload streams: the app sees the first bytes before the client has sent the rest', async () => {
  const firstSeen = new Promise<void>((r) => (uploadFirstChunk = r));
  const req = request('/upload', { method: 'POST' }); // no content-length: chunked
  const hash = createHash('sha256');
  const first = Buffer.alloc(256 * 1024, 'a');
  hash.update(first);
  req.write(first);
  await Promise.race([firstSeen, sleep(3000).then(() => assert.fail('the app saw nothing while the upload was open'))]);
  uploadFirstChunk = null;
  let size = first.length;
  for (let i = 0; i < 80; i++) {
    const c = Buffer.alloc(256 * 1024, i);
    hash.update(c);
    size += c.length;
    if (!req.write(c)) await once(req, 'drain');
  }
  req.end();
  const [res] = await once(req, 'response');
  let body = '';
  for await (const c of res) body += c;
  const got = JSON.parse(body);
  assert.equal(got.size, size);
  assert.equal(got.sha256, hash.digest('hex'));
  assert.equal(got.te, 'chunked');
});

test('100 MB download streams with backpressure: memory stays flat while the client pauses', async () => {
  global.gc?.();
  const rss0 = process.memoryUsage().rss;
  const total = 100 * MB;
  const req = request(`/download?bytes=${total}`);
  req.end();
  const [res] = await once(req, 'response');
  assert.equal(res.headers['content-length'], String(total));
  let got = 0;
  let peak = 0;
  const sample = () => (peak = Math.max(peak, process.memoryUsage().rss - rss0));
  const sampler = setInterval(sample, 50);
  // Read 2 MB, then stop reading for a while: a proxy without backpressure would now pull the
  // whole 100 MB from the app into memory.
  await new Promise<void>((resolve) => {
    const onData = (c: Buffer) => {
      got += c.length;
      if (got >= 2 * MB) {
        res.off('data', onData);
        res.pause();
        resolve();
      }
    };
    res.on('data', onData);
  });
  await sleep(1500);
  sample();
  const pausedGrowth = peak;
  const t0 = Date.now();
  res.on('data', (c: Buffer) => (got += c.length));
  res.resume();
  await once(res, 'end');
  clearInterval(sampler);
  sample();
  const secs = (Date.now() - t0) / 1000;
  assert.equal(got, total);
  assert.ok(pausedGrowth < 40 * MB, `RSS grew ${(pausedGrowth / MB).toFixed(1)} MB while the client paused`);
  assert.ok(peak < 80 * MB, `RSS peak growth ${(peak / MB).toFixed(1)} MB for a 100 MB download`);
  console.log(`# 100 MB through the edge in ${secs.toFixed(2)} s after the pause; RSS growth paused ${(pausedGrowth / MB).toFixed(1)} MB, peak ${(peak / MB).toFixed(1)} MB`);
});

test('a client that goes away mid-download stops the app stream', async () => {
  const req = request(`/download?bytes=${50 * MB}`);
  req.end();
  const [res] = await once(req, 'response');
  await once(res, 'data');
  const cutBefore = downloadsCut;
  req.destroy();
  for (let i = 0; i < 50 && downloadsCut === cutBefore; i++) await sleep(20);
  assert.equal(downloadsCut, cutBefore + 1, 'the app saw its response cut');
  // The agent holds no socket busy for a dead download: the next request works at once.
  const r2 = request('/');
  r2.end();
  const [res2] = await once(r2, 'response');
  let body = '';
  for await (const c of res2) body += c;
  assert.equal(body, 'ok');
});
