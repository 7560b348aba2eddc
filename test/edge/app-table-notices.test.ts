import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { RuntimeApi } from '../../edge/dataplane/runtime-api.ts';
import { curl, startApp, startTestEdge, type TestEdge } from '../../harness/edge.ts';
import { eventually } from '../../harness/service.ts';
import { AppDirectory } from '../../lifecycle/apps/app-directory.ts';
import type { AppEntry } from '../../lifecycle/apps/app-labels.ts';
import type { Lifecycle } from '../../lifecycle/controller.ts';
import { LifecycleEdgeBackend } from '../../lifecycle/edge-backend.ts';
import type { WakeLimits } from '../../lifecycle/wake-limits.ts';

/**
 * The notice path end to end, on the real app table (Redis) and the real HAProxy: another service
 * process changes a sandbox's app addresses in Redis and says so on `<prefix>:apps:events`; this
 * process's table reads the change, its edge backend tells the route mirror, and HAProxy's map
 * follows. The pass over the routes is set to an hour here, so only the notice can move the map.
 * The lifecycle is a stand-in that says the sandbox runs at 127.0.0.1 (no engine involved).
 */
describe('a change of the app table reaches HAProxy\'s map through the notices', () => {
  const log = pino({ level: 'silent' });
  const prefix = `svct-notices-${process.pid}`;
  const table = `${prefix}:apps`;
  let redis: Redis;
  let apps: AppDirectory;
  let edge: TestEdge;
  let api: RuntimeApi;
  let one: Awaited<ReturnType<typeof startApp>>;
  let two: Awaited<ReturnType<typeof startApp>>;
  const entry = (hostPort: number): AppEntry => ({ label: 'svc-nx-web', sandbox: 'svc-nx', container: 'web', containerPort: 80, hostPort });
  /** What another process does (AppDirectory.replace there): the table in Redis, then the event. */
  const otherProcessWrites = async (write: () => Promise<unknown>) => {
    await write();
    await redis.publish(`${prefix}:apps:events`, JSON.stringify({ op: 'changed', sandbox: 'svc-nx' }));
  };

  before(async () => {
    one = await startApp((_req, res) => res.end('one\n'));
    two = await startApp((_req, res) => res.end('two\n'));
    redis = new Redis(loadConfig().redisUrl);
    await redis.hset(table, { '#table': '1', 'svc-nx-web': JSON.stringify(entry(one.port)) });
    apps = new AppDirectory(redis, prefix, log, async () => '', async () => false);
    await apps.start();
    const lifecycle = { observe: async () => ({ status: 'running', address: '127.0.0.1' }) } as unknown as Lifecycle;
    const backend = new LifecycleEdgeBackend(lifecycle, apps, {} as WakeLimits, log);
    edge = await startTestEdge(backend, { dataPlane: 'haproxy', timeouts: { routeRecheckMs: 3_600_000 } });
    api = new RuntimeApi(edge.edge.dataPlane!.files.adminSocket);
  });
  after(async () => {
    await edge?.close();
    await apps?.close();
    await redis?.del(table);
    redis?.disconnect();
    await one?.close();
    await two?.close();
  });

  const route = async () => (await api.send(`show map ${edge.edge.dataPlane!.files.appsMap}`)).split('\n').find((l) => l.includes(' svc-nx-web.localhost '))?.split(' ').at(-1);

  it('an app that moved to another port: the old route leaves, the new one is served once the app answered there', async () => {
    assert.equal((await curl(edge.port, 'svc-nx-web.localhost', '/', edge.caFile)).stdout, 'one\n');
    await eventually(async () => (await route()) === `svc-nx|127.0.0.1|${one.port}`, 'the route in the map', 2_000, 10);
    await otherProcessWrites(() => redis.hset(table, 'svc-nx-web', JSON.stringify(entry(two.port))));
    await eventually(async () => (await route()) === undefined, 'the old route gone on the notice', 5_000, 5);
    assert.equal((await curl(edge.port, 'svc-nx-web.localhost', '/', edge.caFile)).stdout, 'two\n');
    await eventually(async () => (await route()) === `svc-nx|127.0.0.1|${two.port}`, 'the new route in the map', 2_000, 10);
  });

  it('an app removed from the table: its route leaves, and its address answers 404', async () => {
    await otherProcessWrites(() => redis.hdel(table, 'svc-nx-web'));
    await eventually(async () => (await route()) === undefined, 'the route gone on the notice', 5_000, 5);
    assert.equal((await curl(edge.port, 'svc-nx-web.localhost', '/', edge.caFile)).status, 404);
  });
});
