import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { loadConfig } from '../../core/config.ts';
import { freePort } from '../../harness/ports.ts';
import { eventually, removeInstance } from '../../harness/service.ts';

const run = promisify(execFile);

let dir: string;
let units: string;
const prefix = `svct${randomBytes(3).toString('hex')}`;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ops-unit-'));
  await run('bash', ['scripts/install-service.sh', '--dest', dir]);
  units = path.join(dir, 'etc', 'systemd', 'system');
});
after(async () => {
  await removeInstance(prefix);
  fs.rmSync(dir, { recursive: true, force: true });
});

/** `Key=value` of a unit's [Service] section. */
function directive(unit: string, key: string): string {
  const m = new RegExp(`^${key}=(.*)$`, 'm').exec(fs.readFileSync(path.join(units, unit), 'utf8'));
  assert.ok(m, `${unit} has ${key}=`);
  return m[1]!;
}

test('the installed units pass systemd-analyze verify; the environment file is 0600', async () => {
  // no systemd runs on this machine: verify loads the units offline (a bad directive or command fails it)
  const { stdout, stderr } = await run('systemd-analyze', ['verify', '--man=no', path.join(units, 'svc.service'), path.join(units, 'svc-sandbox-engine.service')]);
  assert.equal(`${stdout}${stderr}`.trim(), '');
  assert.equal(fs.statSync(path.join(dir, 'etc', 'svc', 'svc.env')).mode & 0o777, 0o600);
  assert.equal(directive('svc.service', 'Restart'), 'on-failure');
  assert.equal(directive('svc-sandbox-engine.service', 'Restart'), 'on-failure');
  assert.equal(directive('svc.service', 'StandardOutput'), 'journal');
  assert.equal(directive('svc.service', 'EnvironmentFile'), '/etc/svc/svc.env');
});

test('started as the unit starts it, the service comes back cleanly after SIGKILL, and ends by itself on SIGTERM', async () => {
  const apiPort = await freePort();
  const httpsPort = await freePort();
  // what the unit gives the process: its EnvironmentFile (here one for this test) and PATH, nothing else
  const envFile = path.join(dir, 'test.env');
  const { SVC_SANDBOX_RUNTIME, SVC_SANDBOX_DOCKER_HOST } = process.env;
  fs.writeFileSync(envFile, [
    `SVC_DATA_DIR=${path.join(dir, 'data')}`, `SVC_SECRET_KEY_FILE=${path.join(dir, 'secret.key')}`, `SVC_REDIS_PREFIX=${prefix}`,
    `REDIS_URL=${loadConfig().redisUrl}`, `SVC_API_PORT=${apiPort}`, `SVC_HTTPS_PORT=${httpsPort}`, 'SVC_HTTP_PORT=0', 'LOG_LEVEL=warn',
    ...(SVC_SANDBOX_RUNTIME ? [`SVC_SANDBOX_RUNTIME=${SVC_SANDBOX_RUNTIME}`] : []), ...(SVC_SANDBOX_DOCKER_HOST ? [`SVC_SANDBOX_DOCKER_HOST=${SVC_SANDBOX_DOCKER_HOST}`] : []),
  ].join('\n'), { mode: 0o600 });
  const env = Object.fromEntries(fs.readFileSync(envFile, 'utf8').split('\n').filter(Boolean).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const [command, ...args] = directive('svc.service', 'ExecStart').split(' ');
  const cwd = directive('svc.service', 'WorkingDirectory');
  const start = (): ChildProcess => spawn(command!, args, { cwd, env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  const api = `http://127.0.0.1:${apiPort}`;
  const ready = () => eventually(async () => (await fetch(`${api}/readyz`)).status === 200, '/readyz 200', 90_000, 250);

  let service = start();
  try {
    await ready();
    const ca = await (await fetch(`${api}/ca.pem`)).text();
    // the doctor tells this service's ports from another program's
    const doctor = await run('npx', ['svc', 'doctor'], { env: { ...process.env, ...env } }).catch((err: { stdout: string }) => err);
    assert.match(doctor.stdout, new RegExp(`^ok +https port +\\*:${httpsPort} is held by this service \\(pid ${service.pid}\\)`, 'm'));
    assert.match(doctor.stdout, new RegExp(`^ok +api port +127\\.0\\.0\\.1:${apiPort} is held by this service`, 'm'));

    const killed = once(service, 'exit');
    service.kill('SIGKILL');
    assert.deepEqual(await killed, [null, 'SIGKILL']);
    // what systemd's Restart=on-failure does: the same command again
    service = start();
    let stderr = '';
    service.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    await ready();
    assert.equal(await (await fetch(`${api}/ca.pem`)).text(), ca, 'the same CA after the restart');
    assert.deepEqual(await (await fetch(`${api}/healthz`)).json(), { ok: true });
    assert.doesNotMatch(stderr, /"level":(50|60)/, 'no error at the restart');

    const exited = once(service, 'exit');
    const stopAsked = Date.now();
    service.kill('SIGTERM');
    assert.deepEqual(await exited, [0, null]);
    assert.ok(Date.now() - stopAsked < 25_000, 'within the unit\'s stop timeout');
  } finally {
    if (service.exitCode === null && service.signalCode === null) service.kill('SIGKILL');
  }
});
