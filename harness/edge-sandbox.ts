import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { EngineCli } from './engine-cli.ts';
import type { Config } from '../core/config.ts';
import { answerOf, eventually, type TestService } from './service.ts';

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

/**
 * The operator's change at a sandbox's next re-creation: the sandbox sinks into deep sleep (container
 * gone, volumes kept), the service restarts with `change` applied to its configuration, and a start
 * re-creates the sandbox under it. Leaves it running with idle 1h and deep sleep off.
 */
export async function recreateAfterDeepSleep(t: TestService, sb: EdgeSandbox, change: Partial<Config>): Promise<void> {
  const settings = (body: object) => t.api('PATCH', `/api/sandboxes/${sb.name}`, sb.user.token, body);
  await settings({ idle_timeout: '3s', deep_sleep_after: '2s' });
  await eventually(async () => (await sb.record()).status === 'deep_sleep', 'deep sleep', 90_000, 500);
  Object.assign(t.config, change);
  await t.restart();
  await settings({ idle_timeout: '1h', deep_sleep_after: 'off' });
  const started = await t.api('POST', `/api/sandboxes/${sb.name}/start`, sb.user.token);
  assert.ok(started.status < 300, answerOf(started));
  await eventually(async () => (await sb.record()).status === 'running', 'wake from deep sleep', 180_000, 500);
}
