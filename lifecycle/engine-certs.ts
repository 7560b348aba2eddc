import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import type { EngineCerts } from '../store/records.ts';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const TEN_YEARS_MS = 10 * 365 * 86_400_000;

function toPem(der: ArrayBuffer, label: string): string {
  const b64 = Buffer.from(der).toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

function serial(): string {
  // Positive, non-zero serial: a leading byte below 0x80.
  return '01' + Buffer.from(webcrypto.getRandomValues(new Uint8Array(15))).toString('hex');
}

async function leaf(
  ca: { cert: x509.X509Certificate; keys: CryptoKeyPair },
  subject: string,
  usage: 'server' | 'client',
  sans: x509.JsonGeneralNames,
) {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
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
  return { cert: cert.toString('pem') + '\n', key: toPem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY') };
}

/**
 * Issues a fresh CA, a server certificate for the sandbox's inner dockerd and one client
 * certificate (docker's mutual TLS, protect-access.md). The CA key is thrown away afterwards:
 * nobody, not even the service, can mint another client certificate for this engine.
 */
export async function issueEngineCerts(sandbox: string, engineHost: string): Promise<EngineCerts> {
  const caKeys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
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
