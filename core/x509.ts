import 'reflect-metadata'; // @peculiar/x509 resolves its formatters through tsyringe, which needs it
import { createPrivateKey, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

export { x509 };

/** ECDSA P-256 with SHA-256: small keys, fast handshakes, accepted by every client we care about. */
export const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

export const DAY_MS = 86_400_000;

export function toPem(der: ArrayBuffer, label: string): string {
  const b64 = Buffer.from(der).toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

/** Positive, non-zero 128-bit serial (leading byte below 0x80). */
export function randomSerial(): string {
  return '01' + Buffer.from(webcrypto.getRandomValues(new Uint8Array(15))).toString('hex');
}

export async function generateKeys(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
}

export async function privateKeyPem(key: CryptoKey): Promise<string> {
  return toPem(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

/** Imports a PEM private key (PKCS#8 or SEC1 "EC PRIVATE KEY") as a WebCrypto signing key. */
export async function importPrivateKey(pem: string): Promise<CryptoKey> {
  const der = createPrivateKey(pem).export({ format: 'der', type: 'pkcs8' });
  return webcrypto.subtle.importKey('pkcs8', der, ALG, true, ['sign']) as Promise<CryptoKey>;
}
