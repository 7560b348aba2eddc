import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { EngineCli } from './engine-cli.ts';
import { answerOf, type TestService } from './service.ts';

const run = promisify(execFile);

/**
 * A user's sandbox reached as users reach it: through the edge's TLS port, with the service CA, the
 * docker CLI holding the record's certificates, and curl for app addresses. One per test file.
 */
export interface EdgeSandbox {
  name: string;
  user: { id: string; token: string };
  cli: EngineCli;
  /** a folder of the test's own (removed by close), holding the service CA as ca.pem */
  dir: string;
  ca: string;
  /** the sandbox record as GET /api/sandboxes/:name answers it */
  record(): Promise<any>;
  /** the body of GET https://<label>.<domain>/ through the edge */
  curl(label: string): Promise<string>;
  close(): void;
}

export async function openEdgeSandbox(t: TestService, prefix: string): Promise<EdgeSandbox> {
  const user = await t.user('alice');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `svc-${prefix}-`));
  const ca = path.join(dir, 'ca.pem');
  fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
  const res = await t.api('POST', '/api/sandboxes', user.token, { name: `${prefix}-${t.config.redisPrefix}`, idle_timeout: '1h' });
  assert.equal(res.status, 201, answerOf(res));
  const name: string = res.body.name;
  const port = t.config.httpsPort;
  const cli = new EngineCli(res.body.engine_access.host, '127.0.0.1', port, res.body);
  return {
    name,
    user,
    cli,
    dir,
    ca,
    record: async () => (await t.api('GET', `/api/sandboxes/${name}`, user.token)).body,
    async curl(label) {
      const host = `${label}.${t.config.domain}`;
      const { stdout } = await run('curl', ['-sS', '--max-time', '20', '--cacert', ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
      return stdout;
    },
    close() {
      cli.dispose();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
