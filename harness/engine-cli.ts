import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface EngineCertsPem {
  ca_cert?: string;
  client_cert?: string;
  client_key?: string;
}

/**
 * Runs the real docker CLI against a sandbox engine with the record's three PEMs, as a user
 * would (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH). The engine host name is resolved to `address` in a
 * private mount namespace with its own /etc/hosts, so the machine's resolver is never touched.
 */
export class EngineCli {
  readonly certDir: string;
  private readonly hostsFile: string;

  constructor(private readonly host: string, address: string, private readonly port: number, certs: EngineCertsPem) {
    this.certDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-engine-cli-'));
    fs.writeFileSync(path.join(this.certDir, 'ca.pem'), certs.ca_cert ?? '');
    fs.writeFileSync(path.join(this.certDir, 'cert.pem'), certs.client_cert ?? '');
    fs.writeFileSync(path.join(this.certDir, 'key.pem'), certs.client_key ?? '', { mode: 0o600 });
    this.hostsFile = path.join(this.certDir, 'hosts');
    this.setAddress(address);
  }

  /** The sandbox's address changes when deep sleep recreates its container. */
  setAddress(address: string): void {
    fs.writeFileSync(this.hostsFile, `127.0.0.1 localhost\n${address} ${this.host}\n`);
  }

  /** The docker CLI with the legacy builder (`docker build` alike on every engine version). */
  async docker(args: string[], opts: { timeoutMs?: number } = {}): Promise<{ stdout: string; stderr: string }> {
    return this.cli(args, { DOCKER_BUILDKIT: '0' }, opts);
  }

  /**
   * `docker compose` (the v2 CLI plugin) run in `cwd`, as a user runs it: BuildKit builds through the
   * engine address, like every compose v2 user gets by default.
   */
  async compose(cwd: string, args: string[], opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<{ stdout: string; stderr: string }> {
    return this.cli(['compose', ...args], opts.env ?? {}, { timeoutMs: opts.timeoutMs, cwd });
  }

  private async cli(args: string[], env: NodeJS.ProcessEnv, opts: { timeoutMs?: number; cwd?: string }): Promise<{ stdout: string; stderr: string }> {
    const script = 'mount --bind "$HOSTS" /etc/hosts && exec docker "$@"';
    return run('unshare', ['-m', 'sh', '-c', script, 'sh', ...args], {
      env: {
        ...process.env,
        HOSTS: this.hostsFile,
        DOCKER_HOST: `tcp://${this.host}:${this.port}`,
        DOCKER_TLS_VERIFY: '1',
        DOCKER_CERT_PATH: this.certDir,
        DOCKER_CONFIG: path.join(this.certDir, 'config'),
        ...env,
      },
      cwd: opts.cwd,
      timeout: opts.timeoutMs ?? 120_000,
      maxBuffer: 64 * 1024 * 1024,
    });
  }

  dispose(): void {
    fs.rmSync(this.certDir, { recursive: true, force: true });
  }
}
