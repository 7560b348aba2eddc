import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { WAITING_HEADER } from '../../edge/index.ts';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);

let t: TestService;
let sb: EdgeSandbox;

before(async () => {
  // a generous hold: this checks that a request is held and answered by the app, not how fast a wake is (bench:wake)
  t = await startTestService({ wakeHoldMs: 60_000 });
  sb = await openEdgeSandbox(t, 'hold');
  await sb.cli.docker(['build', '-q', '-t', 'busybox-app', path.resolve('fixtures/busybox')]);
  await sb.cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
    'mkdir -p /www && echo hello-app > /www/index.html && exec httpd -f -p 8080 -h /www']);
  await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('hello-app'), 'the app', 120_000, 500);
});
after(async () => {
  sb?.close();
  await t?.close();
});

/** One request through the edge: its response head (lower case) and body. */
async function request(): Promise<{ head: string; body: string }> {
  const host = `${sb.name}-web.${t.config.domain}`;
  const port = t.config.httpsPort;
  const { stdout } = await run('curl', ['-sS', '-i', '--max-time', '120', '--cacert', sb.ca, '--resolve', `${host}:${port}:127.0.0.1`, `https://${host}:${port}/`]);
  const [head, ...body] = stdout.split('\r\n\r\n');
  return { head: head!.toLowerCase(), body: body.join('\r\n\r\n') };
}

const status = async () => (await sb.record()).status as string;

test('an app request to an asleep sandbox is held while it wakes and answered by the app', async () => {
  await t.service.lifecycle.sleep(sb.name, 'test');
  assert.equal(await status(), 'exited');
  const r = await request();
  assert.match(r.head, /^http\/1.1 200/);
  assert.doesNotMatch(r.head, new RegExp(`^${WAITING_HEADER}:`, 'm'), 'not the waiting page');
  assert.equal(r.body, 'hello-app\n');
  assert.equal(await status(), 'running');
});

test('from deep sleep (container re-created) too', async () => {
  const patch = await t.api('PATCH', `/api/sandboxes/${sb.name}`, sb.user.token, { deep_sleep_after: '1s' });
  assert.equal(patch.status, 200, answerOf(patch));
  await t.service.lifecycle.sleep(sb.name, 'test');
  await eventually(async () => (await status()) === 'deep_sleep', 'deep sleep', 60_000, 250);
  await t.api('PATCH', `/api/sandboxes/${sb.name}`, sb.user.token, { deep_sleep_after: 'off' });
  const r = await request();
  assert.match(r.head, /^http\/1.1 200/);
  assert.doesNotMatch(r.head, new RegExp(`^${WAITING_HEADER}:`, 'm'), 'not the waiting page');
  assert.equal(r.body, 'hello-app\n');
});
