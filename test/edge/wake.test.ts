import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, beforeEach, test } from 'node:test';
import { UNAVAILABLE_HEADER, WAITING_HEADER } from '../../edge/index.ts';
import { curl, freePort, httpsRequest, sleep, startApp, startTestEdge, TestBackend, type TestEdge } from '../../harness/edge.ts';

const backend = new TestBackend();
let edge: TestEdge;
let app: Awaited<ReturnType<typeof startApp>>;
let closedPort: number;

before(async () => {
  app = await startApp((_req, res) => res.end('the app'));
  closedPort = await freePort(); // nothing listens here: connection refused
  edge = await startTestEdge(backend, { timeouts: { wakeHoldMs: 60_000 } });
});

after(async () => {
  await edge.close();
  await app.close();
});

beforeEach(() => {
  backend.wakeCalls = [];
  backend.wakeLimitReached = false;
  backend.remembered.clear();
});

/** The backend still remembers `label`'s sandbox as running at `port`; in truth it is `status` now. */
function stoppedSinceLastLook(label: string, sandbox: string, port: number, status: 'exited' | 'deep_sleep' | 'unavailable'): void {
  backend.addApp(label, sandbox, { host: '127.0.0.1', port });
  backend.remembered.set(label, { sandbox, status: 'running', target: { sandbox, host: '127.0.0.1', port } });
  backend.setStatus(sandbox, status);
}

test('asleep sandbox: waiting page (200, HTML, Retry-After, X-Svc-Waiting, no-store) and one wake for many requests', async () => {
  backend.addApp('svc-z-web', 'svc-z', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-z', 'exited');
  const results = await Promise.all(Array.from({ length: 5 }, () => curl(edge.port, 'svc-z-web.localhost', '/', edge.caFile)));
  for (const r of results) {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.status, 200);
    assert.equal(r.headers['retry-after'], '3');
    assert.equal(r.headers[WAITING_HEADER], '1');
    assert.equal(r.headers['cache-control'], 'no-store');
    assert.match(r.headers['content-type'], /^text\/html/);
    assert.match(r.stdout, /Sandbox is waking up/);
    assert.match(r.stdout, /<meta http-equiv="refresh" content="3">/);
  }
  // The page reloads itself: more requests while waking ask for no second wake.
  await curl(edge.port, 'svc-z-web.localhost', '/', edge.caFile);
  assert.deepEqual(backend.wakeCalls, ['svc-z']);

  // Once running, the same address reaches the app.
  backend.setStatus('svc-z', 'running');
  const r = await curl(edge.port, 'svc-z-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 200);
  assert.equal(r.stdout, 'the app');
  assert.equal(r.headers[WAITING_HEADER], undefined);
});

test('deep sleep wakes the same way', async () => {
  backend.addApp('svc-d-web', 'svc-d', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-d', 'deep_sleep');
  const r = await curl(edge.port, 'svc-d-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 200);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.deepEqual(backend.wakeCalls, ['svc-d']);
});

test('a sandbox that fell asleep again is woken again at once', async () => {
  backend.addApp('svc-y-web', 'svc-y', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-y', 'exited');
  await curl(edge.port, 'svc-y-web.localhost', '/', edge.caFile);
  backend.setStatus('svc-y', 'running');
  await curl(edge.port, 'svc-y-web.localhost', '/', edge.caFile);
  backend.setStatus('svc-y', 'exited');
  await curl(edge.port, 'svc-y-web.localhost', '/', edge.caFile);
  assert.deepEqual(backend.wakeCalls, ['svc-y', 'svc-y']);
});

test('over the wake limit: 429 page with the reason', async () => {
  backend.addApp('svc-w-web', 'svc-w', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-w', 'exited');
  backend.wakeLimitReached = true;
  const r = await curl(edge.port, 'svc-w-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 429);
  assert.equal(r.headers['retry-after'], '120');
  assert.match(r.stdout, /Wake limit reached/);
  assert.match(r.stdout, /wake limit reached for this account \(2 per hour\)/);
  assert.match(r.stdout, /POST \/api\/sandboxes\/:name\/start/);
  assert.deepEqual(backend.wakeCalls, []);
  // The refusal is not remembered: once the limit allows, the next request wakes.
  backend.wakeLimitReached = false;
  const r2 = await curl(edge.port, 'svc-w-web.localhost', '/', edge.caFile);
  assert.equal(r2.status, 200);
  assert.deepEqual(backend.wakeCalls, ['svc-w']);
});

test('app listening only on 127.0.0.1: a 502 page that says to listen on 0.0.0.0', async () => {
  backend.addApp('svc-l-web', 'svc-l', { host: '127.0.0.1', port: closedPort, loopbackOnly: true });
  const r = await curl(edge.port, 'svc-l-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 502);
  assert.match(r.stdout, /listens only on 127\.0\.0\.1/);
  assert.match(r.stdout, /<code>0\.0\.0\.0<\/code>/);
  assert.match(r.stdout, new RegExp(`port <code>${closedPort}</code>`));
});

test('running sandbox whose app is not up yet: the waiting page, and no wake', async () => {
  backend.addApp('svc-u-web', 'svc-u', { host: '127.0.0.1', port: closedPort });
  const r = await curl(edge.port, 'svc-u-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 200);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.match(r.stdout, /does not answer yet/);
  assert.deepEqual(backend.wakeCalls, []);
});

test('an app that accepts and then drops the connection: 502 page', async () => {
  const rude = net.createServer((s) => s.destroy());
  await new Promise<void>((r) => rude.listen(0, '127.0.0.1', r));
  backend.addApp('svc-r-web', 'svc-r', { host: '127.0.0.1', port: (rude.address() as net.AddressInfo).port });
  const r = await curl(edge.port, 'svc-r-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 502);
  assert.match(r.stdout, /did not answer properly/);
  rude.close();
});

test('a POST with a body to an asleep sandbox gets the page and the connection closes', async () => {
  backend.addApp('svc-p-web', 'svc-p', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-p', 'exited');
  const r = await httpsRequest(edge.port, 'svc-p-web.localhost', { ca: edge.caPem, method: 'POST', body: 'x'.repeat(1000), headers: { 'content-type': 'text/plain' } });
  assert.equal(r.status, 200);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.equal(r.headers.connection, 'close'); // the unread body is not worth reading
  await sleep(10);
});

test('websocket upgrade to an asleep sandbox gets the waiting page and wakes it', async () => {
  backend.addApp('svc-ws-web', 'svc-ws', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-ws', 'exited');
  const r = await curl(edge.port, 'svc-ws-web.localhost', '/socket', edge.caFile, ['-H', 'Connection: Upgrade', '-H', 'Upgrade: websocket', '-H', 'Sec-WebSocket-Version: 13', '-H', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==']);
  assert.equal(r.status, 200);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.deepEqual(backend.wakeCalls, ['svc-ws']);
});

test('a sandbox stopped since the backend last looked (address refuses): the waiting page and a wake, not an error', async () => {
  stoppedSinceLastLook('svc-s-web', 'svc-s', closedPort, 'exited');
  const r = await curl(edge.port, 'svc-s-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 200, r.stdout);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.match(r.stdout, /Sandbox is waking up/);
  assert.deepEqual(backend.wakeCalls, ['svc-s']);
});

test('a sandbox removed to deep sleep since the last look (address resets, websocket too): the waiting page and one wake', async () => {
  const rude = net.createServer((s) => s.destroy());
  await new Promise<void>((r) => rude.listen(0, '127.0.0.1', r));
  try {
    stoppedSinceLastLook('svc-g-web', 'svc-g', (rude.address() as net.AddressInfo).port, 'deep_sleep');
    const r = await curl(edge.port, 'svc-g-web.localhost', '/', edge.caFile);
    assert.equal(r.status, 200, r.stdout);
    assert.equal(r.headers[WAITING_HEADER], '1');
    const ws = await curl(edge.port, 'svc-g-web.localhost', '/socket', edge.caFile, ['-H', 'Connection: Upgrade', '-H', 'Upgrade: websocket', '-H', 'Sec-WebSocket-Version: 13', '-H', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==']);
    assert.equal(ws.status, 200, ws.stdout);
    assert.equal(ws.headers[WAITING_HEADER], '1');
    assert.deepEqual(backend.wakeCalls, ['svc-g']);
  } finally {
    rude.close();
  }
});

test('a sandbox whose host does not answer: the 503 host-unavailable page (not the waiting page, websocket too, also once its remembered address fails), and no wake', async () => {
  const upgrade = ['-H', 'Connection: Upgrade', '-H', 'Upgrade: websocket', '-H', 'Sec-WebSocket-Version: 13', '-H', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='];
  backend.addApp('svc-u-web', 'svc-u', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-u', 'unavailable');
  stoppedSinceLastLook('svc-v-web', 'svc-v', closedPort, 'unavailable');
  for (const [label, extra] of [['svc-u-web', []], ['svc-u-web', upgrade], ['svc-v-web', []]] as const) {
    const r = await curl(edge.port, `${label}.localhost`, '/', edge.caFile, [...extra]);
    assert.equal(r.status, 503, `${label}: ${r.stdout}`);
    assert.equal(r.headers['retry-after'], '10');
    assert.equal(r.headers[UNAVAILABLE_HEADER], '1');
    assert.equal(r.headers[WAITING_HEADER], undefined);
    assert.equal(r.headers['cache-control'], 'no-store');
    assert.match(r.stdout, /host is unavailable/);
  }
  assert.deepEqual(backend.wakeCalls, []);
  backend.setStatus('svc-u', 'running'); // its host answers again: the next request reaches the app
  assert.equal((await curl(edge.port, 'svc-u-web.localhost', '/', edge.caFile)).stdout, 'the app');
});

test('a sandbox stopped since the last look, over the wake limit: the 429 page', async () => {
  stoppedSinceLastLook('svc-t-web', 'svc-t', closedPort, 'exited');
  backend.wakeLimitReached = true;
  const r = await curl(edge.port, 'svc-t-web.localhost', '/', edge.caFile);
  assert.equal(r.status, 429);
  assert.match(r.stdout, /Wake limit reached/);
  assert.deepEqual(backend.wakeCalls, []);
});
