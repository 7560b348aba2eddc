import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { freePort } from '../../harness/ports.ts';
import { PrivateRedis } from '../helpers/private-redis.ts';

let dir: string;

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ops-doctor-'));
});
after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** `npx svc doctor` as an operator runs it, with `env` on top of this process's environment. */
function doctor(env: Record<string, string>): Promise<{ code: number; lines: string[] }> {
  return new Promise((resolve) => {
    execFile('npx', ['svc', 'doctor'], { env: { ...process.env, ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, lines: `${stdout}${stderr}`.split('\n').filter(Boolean) });
    });
  });
}

const line = (lines: string[], check: string) => lines.find((l) => new RegExp(`^\\S+\\s+${check}\\s{2}`).test(l)) ?? `(no line for ${check})`;

test('on this machine, as set up: every needed check passes and the exit code is 0', async () => {
  const { code, lines } = await doctor({ SVC_DATA_DIR: path.join(dir, 'data'), SVC_DATA_PLANE: '' }); // the default data plane, whatever this run's is
  assert.equal(lines.filter((l) => l.startsWith('FAIL')).join('\n'), '');
  assert.equal(code, 0);
  for (const check of ['sandbox engine', 'user namespaces', 'remap range', 'cgroups', 'https port', 'api port', 'domain', 'wildcard domain', 'data plane', 'certificate', 'redis', 'store', 'disk', 'clock']) {
    assert.match(line(lines, check), /^ok /, check);
  }
});

test('a stopped Redis, a taken port and a domain that does not resolve: each named with what to do, exit code 1', async () => {
  const redis = await PrivateRedis.start();
  await redis.down();
  const taken = net.createServer().listen(0);
  await new Promise((resolve) => taken.once('listening', resolve));
  try {
    const { code, lines } = await doctor({
      SVC_DATA_DIR: path.join(dir, 'data'),
      REDIS_URL: redis.url,
      SVC_HTTPS_PORT: String((taken.address() as net.AddressInfo).port),
      SVC_HTTP_PORT: '0',
      SVC_API_PORT: String(await freePort()),
      SVC_DOMAIN: 'svc-doctor-test.invalid',
    });
    assert.equal(code, 1);
    assert.match(line(lines, 'redis'), new RegExp(`^FAIL  redis .*127\\.0\\.0\\.1:${redis.port}.* does not answer.*-> start Redis`));
    assert.match(line(lines, 'https port'), new RegExp(`^FAIL  https port .*:${(taken.address() as net.AddressInfo).port} is taken by node \\(pid ${process.pid}\\) -> stop it, or give the service another port`));
    assert.match(line(lines, 'domain'), /^FAIL  domain .*SVC_DOMAIN=svc-doctor-test\.invalid does not resolve .*-> point an A\/AAAA record/);
    assert.match(line(lines, 'wildcard domain'), /^FAIL  wildcard domain .*\*\.svc-doctor-test\.invalid does not resolve .*-> add a wildcard record/);
    assert.equal(lines.filter((l) => l.startsWith('FAIL')).length, 4, 'nothing else fails');
    assert.match(line(lines, 'http port'), /^\(no line/, 'port 80 off: not checked');
  } finally {
    taken.close();
  }
});

test('a machine without HAProxy: the doctor and the service both say what to run, and the service starts nothing', async () => {
  // /usr/sbin hidden under an empty tmpfs in a mount namespace of the command's own: no haproxy there
  const withoutSbin = (command: string[], env: Record<string, string>) => new Promise<{ code: number; out: string }>((resolve) => {
    execFile('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', 'mount -t tmpfs none /usr/sbin && exec "$@"', 'sh', ...command],
      { env: { ...process.env, ...env }, timeout: 120_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` });
      });
  });
  const dataDir = path.join(dir, 'no-haproxy');
  const env = { SVC_DATA_DIR: dataDir, SVC_HTTPS_PORT: String(await freePort()), SVC_HTTP_PORT: '0', SVC_API_PORT: String(await freePort()) };
  const missing = /HAProxy, the data plane, is not installed \(\/usr\/sbin\/haproxy missing\)/;

  const checked = await withoutSbin(['npx', 'svc', 'doctor'], env);
  assert.equal(checked.code, 1);
  assert.match(line(checked.out.split('\n'), 'data plane'), new RegExp(`^FAIL  data plane +${missing.source} -> run "npm run setup"`));

  const started = await withoutSbin([process.execPath, '--import', 'tsx', 'main.ts'], env);
  assert.notEqual(started.code, 0);
  assert.match(started.out, new RegExp(`${missing.source}: run "npm run setup"`));
  assert.ok(!fs.existsSync(dataDir), 'no data folder made');

  const reference = await doctor({ ...env, SVC_DATA_PLANE: 'node' });
  assert.match(line(reference.lines, 'data plane'), /^warn  data plane +SVC_DATA_PLANE=node: the Node edge alone .* the reference .*-> unset SVC_DATA_PLANE/);
});
