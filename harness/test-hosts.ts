import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Config } from '../core/config.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SCRIPT = path.join(ROOT, 'scripts', 'test-hosts.sh');
const run = promisify(execFile);

/** Where test host i's sandboxes take their addresses (scripts/test-hosts.sh). */
export function testHostPool(i: number): string {
  return `10.${216 + i}.`;
}

/** The address of test host i's engine, on its veth (scripts/test-hosts.sh). */
export function testHostAddress(i: number): string {
  return `10.216.${i}.2`;
}

/**
 * `scripts/test-hosts.sh up N`: N runner hosts on this machine (test-1 … test-N), registered in the
 * store of `config` as `svc hosts add` would register them.
 */
export async function testHostsUp(n: number, config: Pick<Config, 'dataDir' | 'secretKeyFile' | 'storeUrl' | 'storeTable' | 'domain' | 'sandboxImage'>): Promise<void> {
  await run('bash', [SCRIPT, 'up', String(n)], {
    cwd: ROOT,
    env: {
      ...process.env, SVC_DATA_DIR: config.dataDir, SVC_SECRET_KEY_FILE: config.secretKeyFile, SVC_STORE_URL: config.storeUrl,
      SVC_STORE_TABLE: config.storeTable, SVC_DOMAIN: config.domain, SVC_SANDBOX_IMAGE: config.sandboxImage,
    },
    maxBuffer: 1 << 22,
  });
}

/** `scripts/test-hosts.sh down`: every test host gone, with its engine and sandboxes. */
export async function testHostsDown(): Promise<void> {
  await run('bash', [SCRIPT, 'down'], { cwd: ROOT, maxBuffer: 1 << 22 });
}
