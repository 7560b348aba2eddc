import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { WAITING_HEADER, type WakeUnderWay } from '../../edge/index.ts';
import { launchChromium } from '../../harness/browser.ts';
import { curl, freePort, startApp, startTestEdge, TestBackend, type TestEdge } from '../../harness/edge.ts';

/** A backend whose wakes take `wakeMs`: the sandbox runs that long after requestWake. */
class WakingBackend extends TestBackend {
  wakeMs = 300;
  private readonly timers = new Set<NodeJS.Timeout>();

  override async requestWake(sandbox: string): Promise<WakeUnderWay> {
    const wake = await super.requestWake(sandbox);
    const timer = setTimeout(() => { this.timers.delete(timer); this.setStatus(sandbox, 'running'); }, this.wakeMs);
    this.timers.add(timer);
    return wake;
  }

  dispose(): void {
    for (const t of this.timers) clearTimeout(t);
  }
}

const backend = new WakingBackend();
let held: TestEdge; // holds requests up to 3 s
let brief: TestEdge; // holds them 300 ms
let app: Awaited<ReturnType<typeof startApp>>;
const servers: http.Server[] = [];

before(async () => {
  app = await startApp((_req, res) => res.end('<h1 id="app">the app</h1>'));
  held = await startTestEdge(backend, { timeouts: { heldRequestMs: 3_000 } });
  brief = await startTestEdge(backend, { timeouts: { heldRequestMs: 300 } });
});
after(async () => {
  backend.dispose();
  for (const s of servers) s.close();
  await held.close();
  await brief.close();
  await app.close();
});

test('a request to an asleep sandbox is held while it wakes and answered by the app; many requests, one wake', async () => {
  backend.addApp('svc-h-web', 'svc-h', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-h', 'exited');
  backend.wakeCalls = [];
  const results = await Promise.all(Array.from({ length: 5 }, () => curl(held.port, 'svc-h-web.localhost', '/', held.caFile)));
  for (const r of results) {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.status, 200);
    assert.equal(r.headers[WAITING_HEADER], undefined, 'the app answered, not the waiting page');
    assert.match(r.stdout, /the app/);
  }
  assert.deepEqual(backend.wakeCalls, ['svc-h']);
});

test('a wake longer than the hold gets the waiting page (spec 7), which looks for the app every 250 ms instead of reloading', async () => {
  backend.addApp('svc-s-web', 'svc-s', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-s', 'exited');
  backend.wakeMs = 60_000;
  try {
    const r = await curl(brief.port, 'svc-s-web.localhost', '/', brief.caFile);
    assert.equal(r.status, 200);
    assert.equal(r.headers[WAITING_HEADER], '1');
    assert.match(r.stdout, /Sandbox is waking up/);
    assert.match(r.stdout, /fetch\(u,\{method:'HEAD'/);
    assert.match(r.stdout, /setTimeout\(look,250\)/);
    assert.match(r.stdout, /<noscript><meta http-equiv="refresh" content="3"><\/noscript>/);
    const head = await curl(brief.port, 'svc-s-web.localhost', '/', brief.caFile, ['-I']);
    assert.equal(head.headers[WAITING_HEADER], '1', 'the page\'s own look (HEAD) tells waiting apart');
  } finally {
    backend.wakeMs = 300;
  }
});

test('an app that refuses connections just after its sandbox started is waited for, then answers', async () => {
  const port = await freePort();
  backend.addApp('svc-r-web', 'svc-r', { host: '127.0.0.1', port });
  backend.setStatus('svc-r', 'running');
  backend.wakeCalls = [];
  const late = http.createServer((_req, res) => res.end('late app'));
  servers.push(late);
  setTimeout(() => late.listen(port, '127.0.0.1'), 400);
  const r = await curl(held.port, 'svc-r-web.localhost', '/', held.caFile);
  assert.equal(r.status, 200);
  assert.equal(r.stdout, 'late app');
  assert.deepEqual(backend.wakeCalls, [], 'a running sandbox is not woken');
});

test('a sandbox stopped since the edge last looked is woken and the request held; after its next sleep the first request wakes it again', async () => {
  const closedPort = await freePort();
  backend.addApp('svc-t-web', 'svc-t', { host: '127.0.0.1', port: app.port });
  backend.wakeCalls = [];
  // the edge still remembers it running, at an address that no longer answers
  backend.remembered.set('svc-t-web', { sandbox: 'svc-t', status: 'running', target: { sandbox: 'svc-t', host: '127.0.0.1', port: closedPort } });
  backend.setStatus('svc-t', 'exited');
  const first = await curl(held.port, 'svc-t-web.localhost', '/', held.caFile);
  assert.equal(first.headers[WAITING_HEADER], undefined, 'the app answered, not the waiting page');
  assert.match(first.stdout, /the app/);
  // asleep again, and known to be: this request must wake it, not join the finished wake
  backend.setStatus('svc-t', 'exited');
  const second = await curl(held.port, 'svc-t-web.localhost', '/', held.caFile);
  assert.equal(second.headers[WAITING_HEADER], undefined, 'the app answered again, not the waiting page');
  assert.match(second.stdout, /the app/);
  assert.deepEqual(backend.wakeCalls, ['svc-t', 'svc-t']);
});

test('over the wake limit: the 429 page at once, nothing held', async () => {
  backend.addApp('svc-l-web', 'svc-l', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-l', 'exited');
  backend.wakeLimitReached = true;
  try {
    const r = await curl(held.port, 'svc-l-web.localhost', '/', held.caFile);
    assert.equal(r.status, 429);
    assert.equal(r.headers[WAITING_HEADER], undefined);
  } finally {
    backend.wakeLimitReached = false;
  }
});

test('in Chromium, the waiting page turns into the app by itself once it answers, with one reload', async () => {
  backend.addApp('svc-c-web', 'svc-c', { host: '127.0.0.1', port: app.port });
  backend.setStatus('svc-c', 'exited');
  backend.wakeMs = 1_500;
  const browser = await launchChromium('localhost');
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    let navigations = 0;
    page.on('framenavigated', (frame) => { if (frame === page.mainFrame()) navigations++; });
    await page.goto(`https://svc-c-web.localhost:${brief.port}/`);
    assert.match(await page.textContent('h1') ?? '', /Sandbox is waking up/);
    await page.waitForSelector('#app', { timeout: 15_000 });
    assert.equal(navigations, 2, 'the waiting page, then the app');
  } finally {
    backend.wakeMs = 300;
    await browser.close();
  }
});
