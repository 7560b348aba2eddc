import fs from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';

/** Where the CLI talks to, as `svc.env` of an export folder or the environment says. */
export interface Settings {
  /** `https://<domain>[:port]/api` */
  url: URL;
  token: string | undefined;
  sandbox: string | undefined;
  /** `tcp://<sandbox>-engine.<domain>:<port>` */
  dockerHost: string | undefined;
  /** The export folder (where svc.env is): docker/ certificates, service-ca.pem. */
  folder: string | undefined;
  /** CAs to trust: the system's plus the service's own when the folder has it. */
  ca: string[] | undefined;
}

export class UsageError extends Error {}

/** `KEY=value` lines; `#` comments and blank lines skipped; no shell expansion (svc.env has none). */
export function parseEnvFile(text: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!m || line.trimStart().startsWith('#')) continue;
    values[m[1]!] = m[2]!.trim().replace(/^(['"])(.*)\1$/, '$2');
  }
  return values;
}

/**
 * The environment wins over the file, as with docker's and compose's variables: `--env FILE`, else
 * `svc.env` in the current folder when there is one.
 */
export function loadSettings(envFile: string | undefined, env: NodeJS.ProcessEnv = process.env): Settings {
  const file = envFile ?? (fs.existsSync('svc.env') ? 'svc.env' : undefined);
  let values: Record<string, string> = {};
  if (file) {
    try {
      values = parseEnvFile(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      throw new UsageError(`cannot read ${file}: ${(err as Error).message}`);
    }
  }
  const pick = (key: string) => env[key] || values[key] || undefined;
  const raw = pick('SVC_URL');
  if (!raw) throw new UsageError('no service address: set SVC_URL (https://<domain>/api), or run in an export folder (svc.env), or pass --env FILE');
  let url: URL;
  try {
    url = new URL(raw.endsWith('/') ? raw : `${raw}/`);
  } catch {
    throw new UsageError(`SVC_URL "${raw}" is not a URL: use https://<domain>/api`);
  }
  const folder = file ? path.dirname(path.resolve(file)) : undefined;
  const caFile = folder && path.join(folder, 'service-ca.pem');
  const ca = caFile && fs.existsSync(caFile) ? [...tls.rootCertificates, fs.readFileSync(caFile, 'utf8')] : undefined;
  return { url, token: pick('SVC_TOKEN'), sandbox: pick('SVC_SANDBOX'), dockerHost: pick('SVC_DOCKER_HOST'), folder, ca };
}
