import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { serviceCaPem } from '../../edge/index.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';
import { PrivateRedis } from '../helpers/private-redis.ts';

const run = promisify(execFile);

let redis: PrivateRedis;
let t: TestService;
let dir: string;

before(async () => {
  redis = await PrivateRedis.start();
  t = await startTestService({ redisUrl: redis.url });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-ops-health-'));
  fs.writeFileSync(path.join(dir, 'ca.pem'), (await serviceCaPem(t.config, t.service.store.serviceKeys))!);
});
after(async () => {
  await redis?.up(); // the service closes cleanly only with its Redis there
  await t?.close();
  await redis?.down();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** GET through the public port with curl, as a load balancer outside the machine would. */
async function viaEdge(route: string, token?: string): Promise<{ status: number; body: string }> {
  const port = t.service.edge.httpsPort;
  const host = t.config.domain;
  const { stdout } = await run('curl', ['-sS', '--max-time', '20', '--cacert', path.join(dir, 'ca.pem'), '--resolve', `${host}:${port}:127.0.0.1`,
    ...(token ? ['-H', `Authorization: Bearer ${token}`] : []), '-w', '\n%{http_code}', `https://${host}:${port}${route}`]);
  const cut = stdout.lastIndexOf('\n');
  return { status: Number(stdout.slice(cut + 1)), body: stdout.slice(0, cut) };
}

test('/healthz and /readyz answer on the operator port and through the public port', async () => {
  for (const get of [(r: string) => t.api('GET', r, undefined), async (r: string) => {
    const res = await viaEdge(r);
    return { status: res.status, body: JSON.parse(res.body) };
  }]) {
    assert.deepEqual(await get('/healthz'), { status: 200, body: { ok: true } });
    assert.deepEqual(await get('/readyz'), {
      status: 200,
      body: { ready: true, checks: { redis: 'ok', store: 'ok', sandbox_engine: 'ok', registry_upstream: 'ok', data_plane: 'ok' } },
    });
  }
});

test('/readyz turns not-ready naming Redis when its Redis stops, and ready again when it is back', async () => {
  await redis.down();
  const down = await eventually(async () => {
    const res = await t.api('GET', '/readyz', undefined);
    return res.status === 503 ? res : null;
  }, '/readyz to answer 503', 20_000, 200);
  assert.equal(down.body.ready, false);
  assert.notEqual(down.body.checks.redis, 'ok');
  assert.match(down.body.checks.redis, /not connected|no answer|ECONNREFUSED/);
  assert.deepEqual({ ...down.body.checks, redis: 'ok' }, { redis: 'ok', store: 'ok', sandbox_engine: 'ok', registry_upstream: 'ok', data_plane: 'ok' }, 'only Redis is named');
  // alive all the while: a supervisor must not restart the process for its Redis
  assert.equal((await t.api('GET', '/healthz', undefined)).status, 200);
  assert.equal((await viaEdge('/readyz')).status, 503);

  await redis.up();
  const back = await eventually(async () => {
    const res = await t.api('GET', '/readyz', undefined);
    return res.status === 200 ? res : null;
  }, '/readyz to answer 200 again', 30_000, 200);
  assert.equal(back.body.ready, true);
});

test('/readyz turns not-ready naming the data plane while HAProxy does not answer, and ready again when it does', async () => {
  const dataPlane = t.service.edge.dataPlane;
  if (!dataPlane) {
    // SVC_DATA_PLANE=node: this process owns the public port, and answering is its check
    assert.equal((await t.api('GET', '/readyz', undefined)).body.checks.data_plane, 'ok');
    return;
  }
  // stopped, not killed: the supervisor restarts a dead HAProxy, but only readiness sees a hung one
  const pid = dataPlane.pid!;
  process.kill(pid, 'SIGSTOP');
  try {
    const down = await t.api('GET', '/readyz', undefined);
    assert.equal(down.status, 503);
    assert.deepEqual({ ...down.body.checks, data_plane: 'ok' }, { redis: 'ok', store: 'ok', sandbox_engine: 'ok', registry_upstream: 'ok', data_plane: 'ok' }, 'only the data plane is named');
    assert.match(down.body.checks.data_plane, /no answer within/);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  assert.equal((await t.api('GET', '/readyz', undefined)).status, 200);
  assert.equal(dataPlane.pid, pid, 'the same HAProxy');
});

test('/metrics: open on the operator port; through the public port only with an admin token not limited to a sandbox', async () => {
  const local = await fetch(`${t.url}/metrics`);
  assert.equal(local.status, 200);
  assert.match(local.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  assert.match(await local.text(), /^svc_edge_connections_total\{route="api"\} \d+$/m);

  assert.equal((await viaEdge('/metrics')).status, 401);
  const user = await t.user('plain');
  const denied = await viaEdge('/metrics', user.token);
  assert.equal(denied.status, 403);
  assert.equal(JSON.parse(denied.body).error.code, 'SVC_FORBIDDEN');
  const admin = await t.user('boss', { admin: true });
  const scrape = await viaEdge('/metrics', admin.token);
  assert.equal(scrape.status, 200);
  assert.match(scrape.body, /^svc_api_requests_total\{method="GET",route="\/metrics",status="403"\} 1$/m);
});
