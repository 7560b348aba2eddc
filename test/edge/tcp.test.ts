import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, beforeEach, test } from 'node:test';
import { curl, readUntilClose, sleep, startTestEdge, tlsConnect, tmpDir, TestBackend, type TestEdge } from '../../harness/edge.ts';

const backend = new TestBackend();
let edge: TestEdge;
let certDir: string;
let engine: https.Server;
let echo: net.Server;
let dbEcho: net.Server;
const pem = (f: string) => fs.readFileSync(path.join(certDir, f), 'utf8');

/** An engine-like CA, server and client certificate, made with the openssl CLI (as docker's docs do). */
function makeEngineCerts(dir: string): void {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca-key.pem', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=test engine CA');
  fs.writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=DNS:svc-e-engine.localhost\nextendedKeyUsage=serverAuth\n');
  fs.writeFileSync(path.join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  run('req', ...ec, '-keyout', 'server-key.pem', '-out', 'server.csr', '-subj', '/CN=svc-e-engine.localhost');
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial', '-out', 'server-cert.pem', '-days', '2', '-extfile', 'server.ext');
  run('req', ...ec, '-keyout', 'key.pem', '-out', 'client.csr', '-subj', '/CN=docker client');
  run('x509', '-req', '-in', 'client.csr', '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial', '-out', 'cert.pem', '-days', '2', '-extfile', 'client.ext');
}

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as net.AddressInfo).port;
}

before(async () => {
  certDir = await tmpDir('edge-engine-certs-');
  makeEngineCerts(certDir);
  // Stands in for the inner dockerd: HTTPS on "2376" that requires a client certificate.
  engine = https.createServer({ key: pem('server-key.pem'), cert: pem('server-cert.pem'), ca: pem('ca.pem'), requestCert: true, rejectUnauthorized: true }, (req, res) => {
    const peer = (req.socket as tls.TLSSocket).getPeerCertificate();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ Version: 'test', client: peer.subject?.CN, path: req.url }));
  });
  const enginePort = await listen(engine);
  echo = net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s)); // stands in for sshd
  const shellPort = await listen(echo);
  dbEcho = net.createServer((s) => {
    s.write('db ready\n');
    s.pipe(s);
  });
  const dbPort = await listen(dbEcho);
  backend.sandboxes.set('svc-e', { status: 'running', address: '127.0.0.1' });
  backend.addApp('svc-e-db', 'svc-e', { host: '127.0.0.1', port: dbPort });
  edge = await startTestEdge(backend, { sandboxPorts: { engine: enginePort, shell: shellPort }, timeouts: { activityIntervalMs: 0, shellProofMs: 0 } });
});

after(async () => {
  await edge.close();
  engine.closeAllConnections();
  engine.close();
  echo.close();
  dbEcho.close();
});

beforeEach(() => {
  backend.setStatus('svc-e', 'running');
  backend.wakeCalls = [];
});

test('engine: curl with the client certificate reaches the inner server through the passthrough', async () => {
  backend.activity = [];
  const r = await curl(edge.port, 'svc-e-engine.localhost', '/version', path.join(certDir, 'ca.pem'), [
    '--cert', path.join(certDir, 'cert.pem'), '--key', path.join(certDir, 'key.pem'),
  ]);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { Version: 'test', client: 'docker client', path: '/version' });
  assert.ok(backend.activity.includes('svc-e'), 'engine bytes count as activity');
});

test('engine: the client sees the upstream certificate, not the edge one (the edge holds no engine key)', async () => {
  const s = await tlsConnect(edge.port, 'svc-e-engine.localhost', {
    ca: pem('ca.pem'), cert: pem('cert.pem'), key: pem('key.pem'), rejectUnauthorized: true,
  });
  const seen = s.getPeerX509Certificate()!;
  const upstream = new X509Certificate(pem('server-cert.pem'));
  assert.equal(seen.fingerprint256, upstream.fingerprint256);
  s.write('GET /ping HTTP/1.1\r\nHost: svc-e-engine.localhost\r\nConnection: close\r\n\r\n');
  const r = await readUntilClose(s);
  assert.match(r.data, /"path":"\/ping"/);
});

test('engine: without a client certificate the inner server refuses', async () => {
  const r = await curl(edge.port, 'svc-e-engine.localhost', '/version', path.join(certDir, 'ca.pem'));
  assert.notEqual(r.code, 0);
  assert.doesNotMatch(r.stdout, /Version/);
});

test('engine: a sleeping sandbox resets the connection and is not woken (spec 3 rule 1)', async () => {
  for (const status of ['exited', 'deep_sleep'] as const) {
    backend.setStatus('svc-e', status);
    await edge.outOfDataPlane('svc-e-engine.localhost');
    const err = await tlsConnect(edge.port, 'svc-e-engine.localhost', { ca: pem('ca.pem'), cert: pem('cert.pem'), key: pem('key.pem') }).then(
      () => null,
      (e: NodeJS.ErrnoException) => e,
    );
    assert.ok(err, 'the connection must fail');
    assert.equal(err.code, 'ECONNRESET', String(err));
    const r = await curl(edge.port, 'svc-e-engine.localhost', '/version', path.join(certDir, 'ca.pem'), ['--cert', path.join(certDir, 'cert.pem'), '--key', path.join(certDir, 'key.pem')]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /reset|SSL_ERROR_SYSCALL|EOF/i);
  }
  assert.deepEqual(backend.wakeCalls, []);
});

test('engine: an unknown sandbox resets the connection', async () => {
  const err = await tlsConnect(edge.port, 'svc-nobody-engine.localhost').then(() => null, (e: NodeJS.ErrnoException) => e);
  assert.equal(err?.code, 'ECONNRESET');
});

/** Runs the ssh ProxyCommand of design.md (openssl s_client -quiet), writes `input`, returns what came back. */
async function sClient(host: string, input: string, want: string): Promise<{ out: string; err: string }> {
  const p = spawn('openssl', ['s_client', '-quiet', '-connect', `127.0.0.1:${edge.port}`, '-servername', host, '-CAfile', edge.caFile, '-verify_return_error', '-verify_hostname', host], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  p.stdout.on('data', (c: Buffer) => (out += c.toString()));
  p.stderr.on('data', (c: Buffer) => (err += c.toString()));
  p.stdin.write(input);
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  for (let i = 0; i < 100 && !out.includes(want); i++) await Promise.race([sleep(50), exited]);
  p.kill();
  await exited;
  return { out, err };
}

test('shell-tcp: openssl s_client (the ssh ProxyCommand) reaches the sandbox port 22 in clear TCP', async () => {
  backend.activity = [];
  const r = await sClient('svc-e-shell-tcp.localhost', 'SSH-2.0-test\n', 'SSH-2.0-test\n');
  assert.equal(r.out, 'SSH-2.0-test\n', r.err);
  assert.ok(backend.activity.includes('svc-e'), 'shell bytes count as activity (here without a login grace time)');
});

test('shell-tcp: a sleeping sandbox resets and is not woken', async () => {
  backend.setStatus('svc-e', 'exited');
  await edge.outOfDataPlane('svc-e-shell-tcp.localhost');
  const err = await tlsConnect(edge.port, 'svc-e-shell-tcp.localhost').then(() => null, (e: NodeJS.ErrnoException) => e);
  assert.equal(err?.code, 'ECONNRESET');
  assert.deepEqual(backend.wakeCalls, []);
});

test('shell-tcp: a half-close from the client still gets the rest of the answer', async () => {
  const s = await tlsConnect(edge.port, 'svc-e-shell-tcp.localhost', { ca: edge.caPem, rejectUnauthorized: true, allowHalfOpen: true } as tls.ConnectionOptions);
  s.end('bye\n');
  const r = await readUntilClose(s);
  assert.equal(r.data, 'bye\n');
});

test('<label>-tcp: TLS off, raw TCP to the app port', async () => {
  const s = await tlsConnect(edge.port, 'svc-e-db-tcp.localhost', { ca: edge.caPem, rejectUnauthorized: true });
  s.write('select 1\n');
  let data = '';
  s.on('data', (c: Buffer) => (data += c.toString()));
  for (let i = 0; i < 100 && !data.includes('select 1'); i++) await sleep(20);
  assert.equal(data, 'db ready\nselect 1\n');
  s.destroy();
});

test('a sandbox whose host does not answer (unavailable): engine, shell and <label>-tcp connections reset, nothing woken', async () => {
  backend.setStatus('svc-e', 'unavailable');
  for (const name of ['svc-e-engine.localhost', 'svc-e-shell-tcp.localhost', 'svc-e-db-tcp.localhost']) {
    await edge.outOfDataPlane(name);
    const err = await tlsConnect(edge.port, name).then(() => null, (e: NodeJS.ErrnoException) => e);
    assert.equal(err?.code, 'ECONNRESET', name);
  }
  assert.deepEqual(backend.wakeCalls, []);
});

test('<label>-tcp: a sleeping sandbox is woken and the connection reset (retry later)', async () => {
  backend.setStatus('svc-e', 'exited');
  await edge.outOfDataPlane('svc-e-db-tcp.localhost');
  const err = await tlsConnect(edge.port, 'svc-e-db-tcp.localhost').then(() => null, (e: NodeJS.ErrnoException) => e);
  assert.equal(err?.code, 'ECONNRESET');
  assert.deepEqual(backend.wakeCalls, ['svc-e']);
});
