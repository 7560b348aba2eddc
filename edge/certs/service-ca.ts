import fs from 'node:fs/promises';
import path from 'node:path';
import { ALG, DAY_MS, generateKeys, importPrivateKey, privateKeyPem, randomSerial, x509 } from '../../core/x509.ts';

/** The service's own certificate authority, kept in `<dataDir>/ca/` (design.md: SVC_TLS_CERT unset). */
export interface ServiceCa {
  cert: x509.X509Certificate;
  certPem: string;
  key: CryptoKey;
  /** True when this load retired a CA without the domain's name constraints (clients need the new ca.pem). */
  retired?: boolean;
}

const NAME_CONSTRAINTS_OID = '2.5.29.30';

export const CA_FILE = 'ca.pem';
export const CA_KEY_FILE = 'ca-key.pem';

export function caDir(dataDir: string): string {
  return path.join(dataDir, 'ca');
}

/**
 * Writes a file atomically (temp file, then rename) with the given mode, so a reader never sees
 * half a PEM and a crash never leaves one behind.
 */
export async function writeFileAtomic(file: string, data: string, mode: number): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  await fs.writeFile(tmp, data, { mode });
  await fs.chmod(tmp, mode); // writeFile's mode is filtered by the umask
  await fs.rename(tmp, file);
}

async function readIfExists(file: string): Promise<string | null> {
  try {
    return await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** DER of one element: tag, definite length, content. */
function der(tag: number, content: Buffer): Buffer {
  const n = content.length;
  const length = n < 0x80 ? Buffer.from([n]) : n < 0x100 ? Buffer.from([0x81, n]) : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), length, content]);
}

/**
 * The nameConstraints value that limits the CA to `<domain>` and its subdomains (RFC 5280 4.2.1.10):
 * permittedSubtrees [0] of two GeneralSubtrees whose base is a dNSName [2] (`<domain>`, `.<domain>`).
 * Written here in a few bytes: @peculiar/x509 has no class for this extension.
 */
export function nameConstraintsDer(domain: string): Buffer {
  const subtree = (name: string) => der(0x30, der(0x82, Buffer.from(name, 'ascii')));
  return der(0x30, der(0xa0, Buffer.concat([subtree(domain), subtree(`.${domain}`)])));
}

/** True when the CA certificate is limited, by a critical extension, to exactly this domain. */
export function constrainedTo(cert: x509.X509Certificate, domain: string): boolean {
  const ext = cert.getExtension(NAME_CONSTRAINTS_OID);
  return !!ext && ext.critical && Buffer.from(ext.value).equals(nameConstraintsDer(domain));
}

/**
 * Takes the CA key out of use. Renamed aside first, so of two processes retiring at once only one
 * removes it; if the file moved is not the key we read (another process has made a new one
 * meanwhile), it is put back.
 */
async function retireKey(keyFile: string, keyPem: string): Promise<void> {
  const aside = `${keyFile}.retired-${process.pid}-${Math.random().toString(36).slice(2)}`;
  try {
    await fs.rename(keyFile, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if ((await fs.readFile(aside, 'utf8')) !== keyPem) await fs.link(aside, keyFile).catch(() => undefined);
  await fs.rm(aside, { force: true });
}

/**
 * Loads the service CA, creating it on first use: `ca-key.pem` (mode 0600) and `ca.pem`.
 *
 * The CA is name-constrained to `<domain>` (critical), so a client that trusts ca.pem accepts
 * nothing it signs for any other name. A CA on disk without that constraint (made before it
 * existed, or for another domain) is retired: its key is removed and a new CA is made, so its
 * key can sign nothing more (the edge re-issues its certificate from the new one).
 *
 * The key is created with an exclusive open, so two processes starting on the same data folder
 * end up with one key; the certificate is derived from the key and re-made if it is missing
 * (for instance after a crash between the two writes).
 */
export async function loadOrCreateServiceCa(dataDir: string, domainName: string): Promise<ServiceCa> {
  const domain = domainName.toLowerCase();
  const dir = caDir(dataDir);
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  const keyFile = path.join(dir, CA_KEY_FILE);
  const certFile = path.join(dir, CA_FILE);

  let keyPem = await readIfExists(keyFile);
  if (keyPem === null || keyPem.trim() === '') {
    const keys = await generateKeys();
    const pem = await privateKeyPem(keys.privateKey);
    try {
      const fh = await fs.open(keyFile, 'wx', 0o600);
      try {
        await fh.writeFile(pem);
      } finally {
        await fh.close();
      }
      keyPem = pem;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      keyPem = await waitForContent(keyFile); // another process is creating it right now
    }
  }
  const key = await importPrivateKey(keyPem);

  const certPem = await readIfExists(certFile);
  if (certPem !== null && certPem.includes('BEGIN CERTIFICATE')) {
    const cert = new x509.X509Certificate(certPem);
    if (await sameKey(cert, keyPem)) {
      if (constrainedTo(cert, domain)) return { cert, certPem, key };
      await retireKey(keyFile, keyPem);
      return { ...(await loadOrCreateServiceCa(dataDir, domain)), retired: true };
    }
  }

  const cert = await createCaCert(key, keyPem, domain);
  const pem = cert.toString('pem') + '\n';
  await writeFileAtomic(certFile, pem, 0o644);
  return { cert, certPem: pem, key };
}

async function waitForContent(file: string): Promise<string> {
  for (let i = 0; i < 100; i++) {
    const text = await readIfExists(file);
    if (text && text.includes('-----END')) return text;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${file} exists but stays empty; remove it to let the service create a new CA`);
}

async function publicKeyOf(keyPem: string): Promise<x509.PublicKey> {
  const { createPublicKey } = await import('node:crypto');
  const der = createPublicKey(keyPem).export({ format: 'der', type: 'spki' });
  return new x509.PublicKey(der);
}

/** True when the certificate carries the public half of this private key. */
export async function sameKey(cert: x509.X509Certificate, keyPem: string): Promise<boolean> {
  const pub = await publicKeyOf(keyPem);
  return Buffer.from(pub.rawData).equals(Buffer.from(cert.publicKey.rawData));
}

async function createCaCert(key: CryptoKey, keyPem: string, domain: string): Promise<x509.X509Certificate> {
  const publicKey = await publicKeyOf(keyPem);
  const now = Date.now();
  const name = `CN=svc sandbox CA (${domain.replace(/[,+="\\<>;#]/g, '')}), O=svc`;
  return x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: name,
    issuer: name,
    notBefore: new Date(now - 3_600_000),
    notAfter: new Date(now + 10 * 365 * DAY_MS),
    signingAlgorithm: ALG,
    publicKey,
    signingKey: key,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(publicKey),
      new x509.Extension(NAME_CONSTRAINTS_OID, true, new Uint8Array(nameConstraintsDer(domain))),
    ],
  });
}

/** A server certificate signed by the service CA for the given DNS names (first one is the CN). */
export async function issueServerCert(
  ca: ServiceCa,
  names: string[],
  opts: { keys?: CryptoKeyPair; days?: number } = {},
): Promise<{ certPem: string; keyPem: string; cert: x509.X509Certificate }> {
  const keys = opts.keys ?? (await generateKeys());
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: `CN=${names[0]}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - 3_600_000),
    notAfter: new Date(now + (opts.days ?? 365) * DAY_MS),
    signingAlgorithm: ALG,
    publicKey: keys.publicKey,
    signingKey: ca.key,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value }))),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  return { cert, certPem: cert.toString('pem') + '\n', keyPem: await privateKeyPem(keys.privateKey) };
}
