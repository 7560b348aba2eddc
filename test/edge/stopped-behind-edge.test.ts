import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER } from '../../edge/index.ts';
import { resourceNames } from '../../lifecycle/names.ts';
import { EngineCli } from '../../harness/engine-cli.ts';
import { sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);

let t: TestService;
let cli: EngineCli;
let dir: string;

before(async () => {
  // the waiting page's path: no hold (test/edge/wake-hold-sandbox.test.ts holds)
  t = await startTestService({ wakeHoldMs: 0 });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-edge-stopped-'));
});
after(async () => {
  cli?.dispose();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  await t?.close();
});

/**
 * The edge's backend trusts a "running" state for a second, and reaching a stopped container's
 * old address can take seconds more (EHOSTUNREACH): a request that came in just after the
 * sandbox stopped must still get the waiting page and wake it, not a 502 (it did, under load).
 */
test('an app request just after the sandbox container stopped behind the edge gets the waiting page and wakes it', async () => {
  const port = t.config.httpsPort;
  const alice = await t.user('alice');
  const ca = path.join(dir, 'ca.pem');
  fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
  const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `stopped-${t.config.redisPrefix}`, idle_timeout: '1h' });
  assert.equal(res.status, 201, answerOf(res));
  const name: string = res.body.name;
  cli = new EngineCli(res.body.engine_access.host, '127.0.0.1', port, res.body);
  await cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
  await cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && exec httpd -f -p 8080 -h /www']);
  const host = `${name}-web.${t.config.domain}`;
  const curl = async () => {
    const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '30', '--cacert', ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
    return { head: stdout.split('\r\n\r\n')[0]!.toLowerCase(), body: stdout };
  };
  const appAnswers = async () => ((await curl()).body.includes('hello-app') ? true : null);

  // Whether a request meets the remembered state and a dead address (rather than a refusal or a
  // fresh state) depends on timing: on the old code 3 of 6 such requests here answered 502.
  for (let round = 0; round < 4; round++) {
    await eventually(appAnswers, `the app (round ${round})`, 120_000, 500);
    // stopped as by the OOM killer or an operator: nothing tells the edge
    await sandboxDocker().getContainer(resourceNames(name).container).stop({ t: 0 });
    const r = await curl();
    assert.match(r.head, /^http\/1.1 200/, `round ${round}: ${r.head}`);
    assert.match(r.head, new RegExp(`^${WAITING_HEADER}: 1`, 'm'), `round ${round}: the waiting page`);
  }
  // the last request woke it
  await eventually(appAnswers, 'the app after the wake', 120_000, 500);
});
