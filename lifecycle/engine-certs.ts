import type { EngineCerts } from '../store/index.ts';
import { ALG, generateKeys, privateKeyPem, randomSerial, x509 } from '../core/x509.ts';

const TEN_YEARS_MS = 10 * 365 * 86_400_000;

async function leaf(
  ca: { cert: x509.X509Certificate; keys: CryptoKeyPair },
  subject: string,
  usage: 'server' | 'client',
  sans: x509.JsonGeneralNames,
) {
  const keys = await generateKeys();
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject,
    issuer: ca.cert.subject,
    notBefore: new Date(now - 3_600_000),
    notAfter: new Date(now + TEN_YEARS_MS),
    signingAlgorithm: ALG,
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
      ...(sans.length ? [new x509.SubjectAlternativeNameExtension(sans)] : []),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  return { cert: cert.toString('pem') + '\n', key: await privateKeyPem(keys.privateKey) };
}

/**
 * Issues a fresh CA, a server certificate for the sandbox's inner dockerd and one client
 * certificate (docker's mutual TLS, protect-access.md). The CA key is thrown away afterwards:
 * nobody, not even the service, can mint another client certificate for this engine.
 */
export async function issueEngineCerts(sandbox: string, engineHost: string): Promise<EngineCerts> {
  const caKeys = await generateKeys();
  const now = Date.now();
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: `CN=${sandbox} engine CA`,
    notBefore: new Date(now - 3_600_000),
    notAfter: new Date(now + TEN_YEARS_MS),
    signingAlgorithm: ALG,
    keys: caKeys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const ca = { cert: caCert, keys: caKeys };
  const server = await leaf(ca, `CN=${engineHost}`, 'server', [
    { type: 'dns', value: engineHost },
    { type: 'dns', value: sandbox },
    { type: 'dns', value: 'localhost' },
    { type: 'ip', value: '127.0.0.1' },
  ]);
  const client = await leaf(ca, `CN=${sandbox} client`, 'client', []);
  return {
    ca_cert: caCert.toString('pem') + '\n',
    client_cert: client.cert,
    client_key: client.key,
    server_cert: server.cert,
    server_key: server.key,
  };
}
