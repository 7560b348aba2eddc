import fs from 'node:fs/promises';
import path from 'node:path';
import { ALG, DAY_MS, generateKeys, importPrivateKey, privateKeyPem, randomSerial, x509 } from '../../core/x509.ts';

/**
 * The service's own certificate authority (design.md: SVC_TLS_CERT unset). A service keeps it sealed
 * in the store, so every process on one store presents the same CA; an edge on its own (tests,
 * benches) keeps it in `<dataDir>/ca/`.
 */
export interface ServiceCa {
  cert: x509.X509Certificate;
  certPem: string;
  key: CryptoKey;
  /** True when this load retired a CA without the domain's name constraints (clients need the new ca.pem). */
  retired?: boolean;
}

const NAME_CONSTRAINTS_OID = '2.5.29.30';

/**
 * Where a service keeps the CA: sealed keys in its store (store/service-keys.ts). `claim` keeps the
 * first value offered and answers the one kept; `replace` is a compare-and-set.
 */
export interface SealedKeys {
  get(name: 'service-ca'): Promise<string | undefined>;
  claim(name: 'service-ca', value: string): Promise<string>;
  replace(name: 'service-ca', previous: string, value: string): Promise<string>;
}

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
 * Loads the service CA, creating it on first use, from `keys` (the store) when given, else from the
 * data folder. In the store it is one sealed value `{ keyPem, certPem }`. A store without one takes
 * the data folder's CA (the CA of a service from before the store kept it: its clients keep trusting
 * it), once; the folder then keeps only `ca.pem`, for operators, and never the key.
 *
 * The CA is name-constrained to `<domain>` (critical), so a client that trusts ca.pem accepts
 * nothing it signs for any other name. A CA without that constraint (made before it existed, or
 * for another domain) is retired: its key is dropped and a new CA is made, so its key can sign
 * nothing more (the edge re-issues its certificate from the new one).
 */
export async function loadOrCreateServiceCa(dataDir: string, domainName: string, keys?: SealedKeys): Promise<ServiceCa> {
  return keys ? storeCa(keys, dataDir, domainName.toLowerCase()) : folderCa(dataDir, domainName.toLowerCase());
}

interface CaPair {
  keyPem: string;
  certPem: string;
}

async function storeCa(keys: SealedKeys, dataDir: string, domain: string): Promise<ServiceCa> {
  let raw = await keys.get('service-ca');
  if (raw === undefined) {
    const imported = await folderPair(dataDir, domain);
    raw = await keys.claim('service-ca', JSON.stringify(imported ?? (await newPair(domain))));
  }
  let pair = JSON.parse(raw) as CaPair;
  let cert = new x509.X509Certificate(pair.certPem);
  let retired = false;
  if (!constrainedTo(cert, domain) || !(await sameKey(cert, pair.keyPem))) {
    // of several processes retiring at once, the first one's new CA is kept by all
    pair = JSON.parse(await keys.replace('service-ca', raw, JSON.stringify(await newPair(domain)))) as CaPair;
    cert = new x509.X509Certificate(pair.certPem);
    retired = true;
  }
  const dir = caDir(dataDir);
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.rm(path.join(dir, CA_KEY_FILE), { force: true }); // the key lives sealed in the store
  if ((await readIfExists(path.join(dir, CA_FILE))) !== pair.certPem) await writeFileAtomic(path.join(dir, CA_FILE), pair.certPem, 0o644);
  return { cert, certPem: pair.certPem, key: await importPrivateKey(pair.keyPem), ...(retired ? { retired } : {}) };
}

/** The data folder's CA, if it has a key: its certificate, or one made again from the key. */
async function folderPair(dataDir: string, domain: string): Promise<CaPair | undefined> {
  const keyPem = await readIfExists(path.join(caDir(dataDir), CA_KEY_FILE));
  if (!keyPem?.includes('-----END')) return undefined;
  const certPem = await readIfExists(path.join(caDir(dataDir), CA_FILE));
  if (certPem?.includes('BEGIN CERTIFICATE') && (await sameKey(new x509.X509Certificate(certPem), keyPem))) return { keyPem, certPem };
  const cert = await createCaCert(await importPrivateKey(keyPem), keyPem, domain);
  return { keyPem, certPem: cert.toString('pem') + '\n' };
}

async function newPair(domain: string): Promise<CaPair> {
  const keys = await generateKeys();
  const keyPem = await privateKeyPem(keys.privateKey);
  const cert = await createCaCert(keys.privateKey, keyPem, domain);
  return { keyPem, certPem: cert.toString('pem') + '\n' };
}

/**
 * The CA in the data folder: `ca-key.pem` (mode 0600) and `ca.pem`. The key is created with an
 * exclusive open, so two processes starting on the same data folder end up with one key; the
 * certificate is derived from the key and re-made if it is missing (for instance after a crash
 * between the two writes).
 */
async function folderCa(dataDir: string, domain: string): Promise<ServiceCa> {
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
      return { ...(await folderCa(dataDir, domain)), retired: true };
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
  const { cert, certPem } = await issueCert(ca, names, keys.publicKey, { days: opts.days });
  return { cert, certPem, keyPem: await privateKeyPem(keys.privateKey) };
}

/** A server certificate (`serverAuth`) signed by the service CA, for DNS names inside its domain (its name constraints allow no other). */
async function issueCert(
  ca: ServiceCa,
  names: string[],
  publicKey: CryptoKey,
  opts: { days?: number },
): Promise<{ certPem: string; cert: x509.X509Certificate }> {
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: `CN=${names[0]}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - 3_600_000),
    notAfter: new Date(now + (opts.days ?? 365) * DAY_MS),
    signingAlgorithm: ALG,
    publicKey,
    signingKey: ca.key,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value }))),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  return { cert, certPem: cert.toString('pem') + '\n' };
}
