import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { test } from 'node:test';
import { ALG, DAY_MS, generateKeys, privateKeyPem, randomSerial, x509 } from '../../core/x509.ts';
import { issueServerCert, loadOrCreateServiceCa } from '../../edge/certs/service-ca.ts';
import { loadEdgeCertificates } from '../../edge/index.ts';
import { tmpDir } from '../../harness/edge.ts';

const noFiles = { tlsCertFile: undefined, tlsKeyFile: undefined };

/** Node's TLS client against a server holding `certPem` for `servername`, trusting only `caPem`. */
async function handshake(caPem: string, certPem: string, keyPem: string, servername: string): Promise<string> {
  const server = tls.createServer({ cert: certPem + caPem, key: keyPem }, (s) => s.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  try {
    return await new Promise<string>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port, servername, ca: caPem }, () => {
        socket.destroy();
        resolve('ok');
      });
      socket.on('error', (err: NodeJS.ErrnoException) => resolve(`${err.code}: ${err.message}`));
    });
  } finally {
    server.close();
  }
}

test('the service CA is name-constrained to the domain: Node accepts its certificates there and refuses them elsewhere', async () => {
  const dataDir = await tmpDir();
  const ca = await loadOrCreateServiceCa(dataDir, 'localhost');
  const text = execFileSync('openssl', ['x509', '-noout', '-ext', 'nameConstraints'], { input: ca.certPem }).toString();
  assert.match(text, /X509v3 Name Constraints: critical/);
  assert.match(text, /Permitted:\s+DNS:localhost\s+DNS:\.localhost/);

  const inside = await issueServerCert(ca, ['svc-x-web.localhost']);
  assert.equal(await handshake(ca.certPem, inside.certPem, inside.keyPem, 'svc-x-web.localhost'), 'ok');
  const apex = await issueServerCert(ca, ['localhost']);
  assert.equal(await handshake(ca.certPem, apex.certPem, apex.keyPem, 'localhost'), 'ok');
  // What a stolen CA key would be used for: a certificate for another site. Clients that trust ca.pem refuse it.
  const outside = await issueServerCert(ca, ['bank.example.com']);
  assert.match(await handshake(ca.certPem, outside.certPem, outside.keyPem, 'bank.example.com'), /permitted subtree violation/);
  const lookalike = await issueServerCert(ca, ['evillocalhost']);
  assert.match(await handshake(ca.certPem, lookalike.certPem, lookalike.keyPem, 'evillocalhost'), /permitted subtree violation/);
});

test('an unconstrained CA on disk is retired at start: new key, the edge certificate re-issued', async () => {
  const dataDir = await tmpDir();
  const dir = path.join(dataDir, 'ca');
  fs.mkdirSync(dir, { mode: 0o700 });
  // The CA as versions before name constraints made it, with an edge certificate it signed.
  const keys = await generateKeys();
  const name = 'CN=svc sandbox CA (localhost), O=svc';
  const old = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(), subject: name, issuer: name, notBefore: new Date(Date.now() - 3_600_000), notAfter: new Date(Date.now() + 365 * DAY_MS),
    signingAlgorithm: ALG, publicKey: keys.publicKey, signingKey: keys.privateKey,
    extensions: [new x509.BasicConstraintsExtension(true, 0, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
  });
  const oldKeyPem = await privateKeyPem(keys.privateKey);
  fs.writeFileSync(path.join(dir, 'ca-key.pem'), oldKeyPem, { mode: 0o600 });
  fs.writeFileSync(path.join(dir, 'ca.pem'), old.toString('pem'));
  const oldCa = { cert: old, certPem: old.toString('pem'), key: keys.privateKey };
  const oldLeaf = await issueServerCert(oldCa, ['localhost', '*.localhost']);
  fs.writeFileSync(path.join(dir, 'edge.pem'), oldLeaf.certPem);
  fs.writeFileSync(path.join(dir, 'edge-key.pem'), oldLeaf.keyPem, { mode: 0o600 });

  const edge = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  edge.close();
  const fresh = new X509Certificate(edge.caPem!);
  assert.ok(fs.readFileSync(path.join(dir, 'ca-key.pem'), 'utf8') !== oldKeyPem, 'a new CA key'); // notEqual would print the key
  assert.ok(!fresh.publicKey.export({ format: 'der', type: 'spki' }).equals(new X509Certificate(oldCa.certPem).publicKey.export({ format: 'der', type: 'spki' })));
  assert.match(execFileSync('openssl', ['x509', '-noout', '-ext', 'nameConstraints'], { input: edge.caPem! }).toString(), /DNS:\.localhost/);
  assert.equal(fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8'), edge.caPem);
  const leaf = new X509Certificate(fs.readFileSync(path.join(dir, 'edge.pem')));
  assert.ok(leaf.verify(fresh.publicKey), 'the edge certificate comes from the new CA');
  assert.deepEqual(fs.readdirSync(dir).sort(), ['ca-key.pem', 'ca.pem', 'edge-key.pem', 'edge.pem'], 'the old key is gone, nothing left aside');

  const again = await loadEdgeCertificates({ dataDir, domain: 'localhost', ...noFiles });
  again.close();
  assert.equal(again.caPem, edge.caPem, 'a constrained CA is kept across restarts');
});
