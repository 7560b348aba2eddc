import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import type tls from 'node:tls';
import { WAITING_HEADER } from '../../edge/index.ts';
import { curl, freePort, httpsRequest, startApp, startTestEdge, tlsConnect, readUntilClose, TestBackend, type TestEdge } from '../../harness/edge.ts';

const backend = new TestBackend();
let edge: TestEdge;
let app: Awaited<ReturnType<typeof startApp>>;
let redirectPort: number;
const appConnections = new Set<number>();

before(async () => {
  app = await startApp((req, res) => {
    appConnections.add(req.socket.remotePort!);
    res.setHeader('content-type', 'application/json');
    res.setHeader('set-cookie', ['a=1', 'b=2']);
    res.end(JSON.stringify({ app: 'web', url: req.url, method: req.method, headers: req.headers }));
  });
  backend.addApp('svc-a-web', 'svc-a', { host: '127.0.0.1', port: app.port });
  const registry = http.createServer(); // a server that never listens: the edge re-emits requests on it
  registry.on('request', (req, res) => res.end(`registry ${req.method} ${req.url}`));
  redirectPort = await freePort();
  edge = await startTestEdge(backend, {
    api: (req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ api: true, url: req.url, host: req.headers.host ?? null, encrypted: (req.socket as tls.TLSSocket).encrypted === true }));
    },
    registry,
    config: { httpPort: redirectPort },
  });
});

after(async () => {
  await edge.close();
  await app.close();
});

test('<domain> goes to the API handler, TLS terminated with a certificate curl trusts', async () => {
  const r = await curl(edge.port, 'localhost', '/api/health', edge.caFile);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.status, 200);
  const body = JSON.parse(r.stdout);
  assert.equal(body.api, true);
  assert.equal(body.url, '/api/health');
  assert.equal(body.encrypted, true);
});

test('registry.<domain> goes to the registry server', async () => {
  const r = await curl(edge.port, 'registry.localhost', '/v2/', edge.caFile);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'registry GET /v2/');
});

test('no SNI (a client connecting by IP) gets the API with the <domain> certificate', async () => {
  const r = await httpsRequest(edge.port, '127.0.0.1', { ca: edge.caPem, path: '/api/x', rejectUnauthorized: false });
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).api, true);
  const cert = r.socket.getPeerCertificate();
  assert.match(cert.subjectaltname ?? '', /DNS:localhost/);
});

test('an app host is proxied with X-Forwarded-* set by the edge alone', async () => {
  const r = await curl(edge.port, 'svc-a-web.localhost', '/hello?x=1', edge.caFile, ['-H', 'X-Forwarded-For: 6.6.6.6', '-H', 'X-Custom: yes']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.status, 200);
  const body = JSON.parse(r.stdout);
  assert.equal(body.url, '/hello?x=1');
  assert.equal(body.headers['x-forwarded-for'], '127.0.0.1');
  assert.equal(body.headers['x-forwarded-proto'], 'https');
  assert.equal(body.headers['x-forwarded-host'], `svc-a-web.localhost:${edge.port}`);
  assert.equal(body.headers['x-forwarded-port'], String(edge.port));
  assert.equal(body.headers['x-custom'], 'yes');
  assert.equal(body.headers.host, `svc-a-web.localhost:${edge.port}`);
  assert.ok(backend.activity.includes('svc-a'), 'a request counts as activity');
});

test('repeated Set-Cookie headers reach the client', async () => {
  const r = await httpsRequest(edge.port, 'svc-a-web.localhost', { ca: edge.caPem, path: '/' });
  assert.deepEqual(r.headers['set-cookie'], ['a=1', 'b=2']);
});

test('connections to the app are kept alive across requests', async () => {
  appConnections.clear();
  const r = await curl(edge.port, 'svc-a-web.localhost', '/1', edge.caFile, [
    '--next', '-sS', '--resolve', `svc-a-web.localhost:${edge.port}:127.0.0.1`, '--cacert', edge.caFile, `https://svc-a-web.localhost:${edge.port}/2`,
    '--next', '-sS', '--resolve', `svc-a-web.localhost:${edge.port}:127.0.0.1`, '--cacert', edge.caFile, `https://svc-a-web.localhost:${edge.port}/3`,
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(appConnections.size, 1, `app saw ${appConnections.size} connections for 3 requests`);
});

test('an unknown app name gets a 404 page with a valid certificate, never another sandbox', async () => {
  const r = await curl(edge.port, 'svc-nope-web.localhost', '/', edge.caFile);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.status, 404);
  assert.match(r.headers['content-type'], /text\/html/);
  assert.match(r.stdout, /No app answers at <code>svc-nope-web\.localhost<\/code>/);
});

test('names outside the routing table get the 404 page', async () => {
  for (const host of ['a.b.localhost', 'other.example.org']) {
    const r = await curl(edge.port, host, '/', null);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.status, 404, host);
  }
});

test('a Host header naming another app than the SNI is refused (421), not routed', async () => {
  backend.addApp('svc-b-web', 'svc-b', { host: '127.0.0.1', port: app.port });
  const r = await curl(edge.port, 'svc-a-web.localhost', '/', edge.caFile, ['-H', 'Host: svc-b-web.localhost']);
  assert.equal(r.status, 421);
});

test('port 80 redirects to https with the same host and path, keeping a non-443 port', async () => {
  const r = await new Promise<http.IncomingMessage>((resolve, reject) =>
    http.get({ host: '127.0.0.1', port: redirectPort, path: '/some/path?q=1', headers: { host: `svc-a-web.localhost:${redirectPort}` } }, resolve).on('error', reject),
  );
  r.resume();
  assert.equal(r.statusCode, 301);
  assert.equal(r.headers.location, `https://svc-a-web.localhost:${edge.port}/some/path?q=1`);
});

test('HEAD on a page has headers and no body', async () => {
  backend.addApp('svc-asleep-web', 'svc-asleep');
  backend.setStatus('svc-asleep', 'exited');
  const r = await curl(edge.port, 'svc-asleep-web.localhost', '/', edge.caFile, ['-I']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.status, 200);
  assert.equal(r.headers[WAITING_HEADER], '1');
  assert.doesNotMatch(r.stdout, /<html/); // with -I curl prints the head again, and no body
});

test('plain HTTP sent to the TLS port gets a short 400 and is closed', async () => {
  const net = await import('node:net');
  const s = net.connect(edge.port, '127.0.0.1');
  s.write('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n');
  const r = await readUntilClose(s, 3000);
  assert.ok(r.closed, 'the edge closes the connection');
  assert.match(r.data, /^HTTP\/1\.1 400/);
  assert.match(r.data, /speaks HTTPS/);
});

test('ALPN: the edge offers only HTTP/1.1 on HTTP routes', async () => {
  const s = await tlsConnect(edge.port, 'svc-a-web.localhost', { ALPNProtocols: ['h2', 'http/1.1'] });
  assert.equal(s.alpnProtocol, 'http/1.1');
  s.destroy();
});
