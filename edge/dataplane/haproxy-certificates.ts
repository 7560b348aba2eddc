import fs from 'node:fs/promises';
import type { Logger } from '../../core/logger.ts';
import type { EdgeCertificates } from '../certs/edge-certificates.ts';
import type { DataPlaneFiles } from './haproxy-config.ts';
import type { RuntimeApi } from './runtime-api.ts';
import type { RuntimeWrites } from './runtime-writes.ts';

/**
 * How often the certificates HAProxy serves are compared with the edge's: as often as the edge
 * itself looks at the operator's files and its renewals (edge/certs/edge-certificates.ts).
 */
export const CERT_REFRESH_MS = 60_000;

/**
 * The certificates HAProxy serves, kept the edge's: the default one (its file, read at each start
 * of HAProxy, and the loaded copy), and with per-name certificates each name's before a route to
 * it is written (the default one covers every name otherwise).
 */
export class HaproxyCertificates {
  /** Per-name certificates loaded into HAProxy: host → the PEM it has. */
  private readonly loaded = new Map<string, string>();
  /** The default certificate's PEM as HAProxy has it (and as its file holds it for a restart). */
  private defaultPem: string | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly writes: RuntimeWrites,
    private readonly opts: {
      files: DataPlaneFiles;
      certificates: EdgeCertificates;
      logger: Logger;
      /** Names HAProxy ends TLS for whatever the routes (the registry): their certificates are loaded at each start. */
      fixedNames?: string[];
    },
  ) {
    this.timer = setInterval(() => void this.refreshNow(), CERT_REFRESH_MS).unref();
  }

  /** Compares now (in turn with the route writes), rather than at the next CERT_REFRESH_MS. */
  refreshNow(): Promise<void> {
    return this.writes.enqueue((api) => this.refresh(api));
  }

  /** A (re)started HAProxy has only the default certificate: the fixed names' go in again, the others with their routes. */
  async attach(): Promise<void> {
    this.loaded.clear();
    for (const name of this.opts.fixedNames ?? []) await this.load(name);
  }

  /** Writes the default certificate's file, which HAProxy reads at each (re)start. */
  async writeDefault(): Promise<void> {
    const pem = await this.opts.certificates.pemFor(null);
    if (!pem) throw new Error('data plane: the edge has no default certificate');
    await fs.writeFile(this.opts.files.defaultCert, pem, { mode: 0o600 });
    this.defaultPem = pem;
  }

  /** Loads a per-name certificate into HAProxy (the default one covers every name otherwise); false when there is none. */
  async load(host: string): Promise<boolean> {
    if (this.opts.certificates.mode !== 'per-name' || this.loaded.has(host)) return true;
    const pem = await this.opts.certificates.pemFor(host);
    if (!pem) return false;
    await this.writes.api!.addCertificate(`/${host}.pem`, pem, this.opts.files.crtList, host);
    this.loaded.set(host, pem);
    return true;
  }

  /**
   * Certificates the edge replaced since HAProxy loaded them (the operator's files changed, the
   * domain certificate renewed, a per-name one reissued after 7 days) are swapped in HAProxy too.
   */
  private async refresh(api: RuntimeApi): Promise<void> {
    const pem = await this.opts.certificates.pemFor(null);
    if (pem && pem !== this.defaultPem) {
      await this.writeDefault();
      await api.replaceCertificate(this.opts.files.defaultCert, pem);
      this.opts.logger.info('data plane: HAProxy serves the renewed default certificate');
    }
    for (const [host, had] of [...this.loaded]) {
      const now = await this.opts.certificates.pemFor(host);
      if (!now || now === had) continue; // none now (issue refused): the one loaded stays until it can be renewed
      await api.replaceCertificate(`/${host}.pem`, now);
      this.loaded.set(host, now);
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
