import fs from 'node:fs/promises';
import path from 'node:path';
import tls from 'node:tls';
import type { Config } from '../../core/config.ts';
import type { Logger } from '../../core/logger.ts';
import { SingleFlight } from '../../core/keyed-lock.ts';
import { caDir, issueServerCert, loadOrCreateServiceCa, sameKey, writeFileAtomic, type SealedKeys, type ServiceCa } from './service-ca.ts';
import { DAY_MS, generateKeys, x509 } from '../../core/x509.ts';

/**
 * Where the edge gets the certificate for a name it terminates.
 *
 * Three modes:
 * - `files`: the operator's certificate (SVC_TLS_CERT / SVC_TLS_KEY), used for every name and
 *   re-read when the files change (e.g. after a renewal).
 * - `wildcard`: our CA issues one certificate for `<domain>` and `*.<domain>`, kept beside the CA.
 * - `per-name`: as wildcard, plus a certificate per host name issued on demand. Used when the
 *   domain has a single label (`localhost`): OpenSSL (curl) and Node refuse a wildcard with fewer
 *   than two labels after the `*`, so `*.localhost` never matches `svc-x-web.localhost`.
 *   Measured: about 6 ms to issue one (shared key), cached afterwards.
 */
export type CertificateMode = 'files' | 'wildcard' | 'per-name';

export interface EdgeCertificates {
  readonly mode: CertificateMode;
  /** PEM of the service CA (served by the API at `/ca.pem`); null with operator certificates. */
  readonly caPem: string | null;
  /** TLS context for a host name the edge terminates (lowercase), or null when the client sent no SNI. */
  contextFor(servername: string | null): tls.SecureContext | Promise<tls.SecureContext>;
  /**
   * The same certificate as one PEM (chain, then key), as HAProxy loads it (edge/dataplane/):
   * `null` for a name the certificate served would not match (per-name issue refused or failed).
   */
  pemFor(servername: string | null): Promise<string | null>;
  /** Stops the renewal timer. */
  close(): void;
}

export const EDGE_CERT_FILE = 'edge.pem';
export const EDGE_KEY_FILE = 'edge-key.pem';

const LEAF_DAYS = 365;
const RENEW_BEFORE_MS = 30 * DAY_MS;
const PER_NAME_DAYS = 30;
const PER_NAME_REISSUE_AFTER_MS = 7 * DAY_MS;
const PER_NAME_CACHE = 2048;
/** New per-name certificates per second; past it the default context is served (a flood of random names must not eat the CPU). */
const PER_NAME_RATE = 50;
const CHECK_INTERVAL_MS = 60_000;

function joinPem(...parts: string[]): string {
  return parts.map((p) => `${p.trim()}\n`).join('');
}

function secureContext(certPem: string, keyPem: string): tls.SecureContext {
  return tls.createSecureContext({ cert: certPem, key: keyPem, minVersion: 'TLSv1.2' });
}

/** True when `*.<domain>` is a wildcard TLS clients accept (at least two labels after the `*`). */
export function wildcardAccepted(domain: string): boolean {
  return domain.split('.').filter(Boolean).length >= 2;
}

/**
 * The PEM of the service CA, creating the CA on first use; null when the operator supplied a
 * certificate. `keys`: the store's sealed keys, where a service keeps its CA.
 */
export async function serviceCaPem(config: Pick<Config, 'dataDir' | 'domain' | 'tlsCertFile' | 'tlsKeyFile'>, keys?: SealedKeys): Promise<string | null> {
  if (config.tlsCertFile && config.tlsKeyFile) return null;
  return (await loadOrCreateServiceCa(config.dataDir, config.domain, keys)).certPem;
}

export async function loadEdgeCertificates(
  config: Pick<Config, 'dataDir' | 'domain' | 'tlsCertFile' | 'tlsKeyFile'>,
  logger?: Logger,
  keys?: SealedKeys,
): Promise<EdgeCertificates> {
  if (config.tlsCertFile || config.tlsKeyFile) {
    if (!config.tlsCertFile || !config.tlsKeyFile) throw new Error('SVC_TLS_CERT and SVC_TLS_KEY must be set together');
    return fileCertificates(config.tlsCertFile, config.tlsKeyFile, logger);
  }
  return caCertificates(config.dataDir, config.domain.toLowerCase(), logger, keys);
}

async function fileCertificates(certFile: string, keyFile: string, logger?: Logger): Promise<EdgeCertificates> {
  const load = async () => {
    const [cert, key] = await Promise.all([fs.readFile(certFile, 'utf8'), fs.readFile(keyFile, 'utf8')]);
    return { ctx: secureContext(cert, key), pem: joinPem(cert, key) };
  };
  const stamp = async () => {
    const [a, b] = await Promise.all([fs.stat(certFile), fs.stat(keyFile)]);
    return `${a.mtimeMs}:${b.mtimeMs}`;
  };
  let loaded = await load();
  let seen = await stamp();
  const timer = setInterval(async () => {
    try {
      const now = await stamp();
      if (now === seen) return;
      loaded = await load();
      seen = now;
      logger?.info({ certFile }, 'edge: reloaded TLS certificate');
    } catch (err) {
      logger?.warn({ err, certFile }, 'edge: could not reload TLS certificate; keeping the old one');
    }
  }, CHECK_INTERVAL_MS).unref();
  return { mode: 'files', caPem: null, contextFor: () => loaded.ctx, pemFor: async () => loaded.pem, close: () => clearInterval(timer) };
}

interface Leaf {
  ctx: tls.SecureContext;
  pem: string;
  notAfter: number;
}

async function loadOrIssueDomainLeaf(ca: ServiceCa, dataDir: string, domain: string): Promise<Leaf> {
  const dir = caDir(dataDir);
  const certFile = path.join(dir, EDGE_CERT_FILE);
  const keyFile = path.join(dir, EDGE_KEY_FILE);
  const names = [domain, `*.${domain}`];
  try {
    const [certPem, keyPem] = await Promise.all([fs.readFile(certFile, 'utf8'), fs.readFile(keyFile, 'utf8')]);
    const cert = new x509.X509Certificate(certPem);
    const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
    const dns = new Set((san?.names.items ?? []).filter((n) => n.type === 'dns').map((n) => n.value.toLowerCase()));
    const fresh = cert.notAfter.getTime() - Date.now() > RENEW_BEFORE_MS;
    const ours = cert.issuer === ca.cert.subject && (await cert.verify({ publicKey: ca.cert.publicKey, signatureOnly: true }));
    if (fresh && ours && names.every((n) => dns.has(n)) && (await sameKey(cert, keyPem))) {
      return { ctx: secureContext(certPem + ca.certPem, keyPem), pem: joinPem(certPem, ca.certPem, keyPem), notAfter: cert.notAfter.getTime() };
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const leaf = await issueServerCert(ca, names, { days: LEAF_DAYS });
  await writeFileAtomic(keyFile, leaf.keyPem, 0o600);
  await writeFileAtomic(certFile, leaf.certPem, 0o644);
  return { ctx: secureContext(leaf.certPem + ca.certPem, leaf.keyPem), pem: joinPem(leaf.certPem, ca.certPem, leaf.keyPem), notAfter: leaf.cert.notAfter.getTime() };
}

interface Issued {
  ctx: tls.SecureContext;
  pem: string;
  issuedAt: number;
}

async function caCertificates(dataDir: string, domain: string, logger?: Logger, caKeys?: SealedKeys): Promise<EdgeCertificates> {
  const ca = await loadOrCreateServiceCa(dataDir, domain, caKeys);
  if (ca.retired) logger?.warn({ domain }, 'edge: retired a service CA that was not name-constrained to the domain; clients must download the new ca.pem');
  let leaf = await loadOrIssueDomainLeaf(ca, dataDir, domain);
  const perName = !wildcardAccepted(domain);
  const timer = setInterval(async () => {
    if (leaf.notAfter - Date.now() > RENEW_BEFORE_MS) return;
    try {
      leaf = await loadOrIssueDomainLeaf(ca, dataDir, domain);
      logger?.info({ domain }, 'edge: renewed the domain certificate');
    } catch (err) {
      logger?.warn({ err }, 'edge: could not renew the domain certificate');
    }
  }, CHECK_INTERVAL_MS).unref();

  if (!perName) {
    return { mode: 'wildcard', caPem: ca.certPem, contextFor: () => leaf.ctx, pemFor: async () => leaf.pem, close: () => clearInterval(timer) };
  }

  // Per-name certificates: one key for all of them (issuing then costs one signature), an LRU
  // of contexts (Map keeps insertion order), and in-flight issues shared by concurrent handshakes.
  const keys = await generateKeys();
  const cache = new Map<string, Issued>();
  const issuing = new SingleFlight<Issued | null>();
  let windowStart = 0;
  let issuedInWindow = 0;
  const suffix = `.${domain}`;

  /** The name's own certificate; null: serve the domain's (not a name we route, or over the rate). */
  const issuedFor = (servername: string | null): Issued | null | Promise<Issued | null> => {
    if (!servername || servername === domain || !servername.endsWith(suffix)) return null;
    const label = servername.slice(0, -suffix.length);
    if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(label)) return null; // not a name we route
    const hit = cache.get(servername);
    if (hit && Date.now() - hit.issuedAt < PER_NAME_REISSUE_AFTER_MS) {
      cache.delete(servername);
      cache.set(servername, hit); // most recently used goes last
      return hit;
    }
    const inflight = issuing.running(servername);
    if (inflight) return inflight;
    const now = Date.now();
    if (now - windowStart >= 1000) {
      windowStart = now;
      issuedInWindow = 0;
    }
    if (++issuedInWindow > PER_NAME_RATE) return null;
    return issuing.do(servername, () => issueServerCert(ca, [servername], { keys, days: PER_NAME_DAYS })
      .then((c) => {
        const issued = { ctx: secureContext(c.certPem + ca.certPem, c.keyPem), pem: joinPem(c.certPem, ca.certPem, c.keyPem), issuedAt: Date.now() };
        cache.set(servername, issued);
        while (cache.size > PER_NAME_CACHE) cache.delete(cache.keys().next().value as string);
        return issued;
      })
      .catch((err) => {
        logger?.warn({ err, servername }, 'edge: could not issue a certificate; serving the domain certificate');
        return null;
      }));
  };
  const contextFor = (servername: string | null): tls.SecureContext | Promise<tls.SecureContext> => {
    const issued = issuedFor(servername);
    if (issued instanceof Promise) return issued.then((i) => i?.ctx ?? leaf.ctx);
    return issued?.ctx ?? leaf.ctx;
  };
  const pemFor = async (servername: string | null): Promise<string | null> => {
    if (!servername || servername === domain) return leaf.pem;
    return (await issuedFor(servername))?.pem ?? null;
  };

  return { mode: 'per-name', caPem: ca.certPem, contextFor, pemFor, close: () => clearInterval(timer) };
}
