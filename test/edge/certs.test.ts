import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { loadEdgeCertificates, serviceCaPem, wildcardAccepted } from '../../edge/index.ts';
import { curl, startApp, startTestEdge, tmpDir, TestBackend } from '../../harness/edge.ts';

const noFiles = { tlsCertFile: undefined, tlsKeyFile: undefined };

test('the service CA is created once, its key mode 0600, and kept across restarts', async () => {
  const dataDir = await tmpDir();
  const a = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  a.close();
  const dir = path.join(dataDir, 'ca');
  assert.equal(fs.statSync(path.join(dir, 'ca-key.pem')).mode & 0o777, 0o600);
  assert.equal(fs.statSync(path.join(dir, 'edge-key.pem')).mode & 0o777, 0o600);
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  const ca = new X509Certificate(fs.readFileSync(path.join(dir, 'ca.pem')));
  assert.equal(ca.ca, true);
  const leaf = new X509Certificate(fs.readFileSync(path.join(dir, 'edge.pem')));
  assert.equal(leaf.subjectAltName, 'DNS:localhost, DNS:*.localhost');
  assert.ok(leaf.verify(ca.publicKey), 'the domain certificate is signed by the CA');

  const b = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  b.close();
  assert.equal(b.caPem, a.caPem, 'same CA after a restart');
  assert.equal(fs.readFileSync(path.join(dir, 'edge.pem'), 'utf8'), leaf.toString(), 'same domain certificate after a restart');
  assert.equal(await serviceCaPem({ dataDir, domain: 'localhost', ...noFiles }), a.caPem);
});

test('a new domain gets a new CA (the old one is constrained to the old domain) and a new certificate', async () => {
  const dataDir = await tmpDir();
  const a = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  const b = await loadEdgeCertificates({ dataDir, domain: 'sb.example.test', ...noFiles });
  a.close();
  b.close();
  assert.notEqual(b.caPem, a.caPem);
  const leaf = new X509Certificate(fs.readFileSync(path.join(dataDir, 'ca', 'edge.pem')));
  assert.equal(leaf.subjectAltName, 'DNS:sb.example.test, DNS:*.sb.example.test');
  assert.ok(leaf.verify(new X509Certificate(b.caPem!).publicKey));
});

test('a lost ca.pem is made again from the kept key', async () => {
  const dataDir = await tmpDir();
  const a = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  a.close();
  fs.rmSync(path.join(dataDir, 'ca', 'ca.pem'));
  const b = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  b.close();
  const ka = new X509Certificate(a.caPem!).publicKey.export({ format: 'der', type: 'spki' });
  const kb = new X509Certificate(b.caPem!).publicKey.export({ format: 'der', type: 'spki' });
  assert.ok(ka.equals(kb), 'same CA key');
  const leaf = new X509Certificate(fs.readFileSync(path.join(dataDir, 'ca', 'edge.pem')));
  assert.ok(leaf.verify(new X509Certificate(b.caPem!).publicKey), 'the kept domain certificate still verifies');
});

test('wildcards: OpenSSL refuses *.localhost, so a one-label domain gets per-name certificates', () => {
  assert.equal(wildcardAccepted('localhost'), false);
  assert.equal(wildcardAccepted('sb.example.com'), true);
  assert.equal(wildcardAccepted('example.com'), true);
});

test('per-name mode (domain=localhost): curl verifies svc-x-web.localhost against the CA', async () => {
  const backend = new TestBackend();
  const app = await startApp((_req, res) => res.end('hi'));
  backend.addApp('svc-x-web', 'svc-x', { host: '127.0.0.1', port: app.port });
  const e = await startTestEdge(backend);
  try {
    assert.equal(e.edge.certificates.mode, 'per-name');
    const r = await curl(e.port, 'svc-x-web.localhost', '/', e.caFile);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'hi');
  } finally {
    await e.close();
    await app.close();
  }
});

test('wildcard mode (domain=sb.test): one *.sb.test certificate, curl accepts it', async () => {
  const backend = new TestBackend();
  const app = await startApp((_req, res) => res.end('hi'));
  backend.addApp('svc-x-web', 'svc-x', { host: '127.0.0.1', port: app.port });
  const e = await startTestEdge(backend, { config: { domain: 'sb.test' } });
  try {
    assert.equal(e.edge.certificates.mode, 'wildcard');
    const r = await curl(e.port, 'svc-x-web.sb.test', '/', e.caFile);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'hi');
    const api = await curl(e.port, 'sb.test', '/', e.caFile);
    assert.equal(api.code, 0, api.stderr);
  } finally {
    await e.close();
    await app.close();
  }
});

test('operator certificate files (SVC_TLS_CERT/KEY) are served as they are; no CA of ours', async () => {
  const dir = await tmpDir('edge-op-certs-');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2', '-subj', '/CN=op.test', '-addext', 'subjectAltName=DNS:op.test,DNS:*.op.test'], { cwd: dir, stdio: 'pipe' });
  const backend = new TestBackend();
  const app = await startApp((_req, res) => res.end('hi'));
  backend.addApp('svc-x-web', 'svc-x', { host: '127.0.0.1', port: app.port });
  const config = { domain: 'op.test', tlsCertFile: path.join(dir, 'cert.pem'), tlsKeyFile: path.join(dir, 'key.pem') };
  const e = await startTestEdge(backend, { config });
  try {
    assert.equal(e.edge.certificates.mode, 'files');
    assert.equal(e.edge.certificates.caPem, null);
    assert.equal(await serviceCaPem({ dataDir: e.dataDir, ...config }), null);
    const r = await curl(e.port, 'svc-x-web.op.test', '/', path.join(dir, 'cert.pem'));
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'hi');
    assert.equal(fs.existsSync(path.join(e.dataDir, 'ca')), false, 'no CA created');
  } finally {
    await e.close();
    await app.close();
  }
});
