import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { buildApi } from './api/app.ts';
import { SignInGuard } from './api/sign-in-guard.ts';
import { AuditOnce } from './api/audit-once.ts';
import { Admission, AppPasses, AuditLog, OidcSignIn, ownerSecretHashes, quotaDefaults, WebSessions } from './accounts/index.ts';
import { addressesOf } from './core/addresses.ts';
import type { Config } from './core/config.ts';
import type { Logger } from './core/logger.ts';
import type { SandboxCounts, ServiceMetrics } from './core/metrics.ts';
import {
  AppDirectory, IdleSessions, Lifecycle, LifecycleEdgeBackend, LifecycleNews, managerAccess, openSandboxRuntime, Peers, SandboxUsage, SshKeyMarks, procNetTcp,
  startLifecycleWorker, WakeLimits, type SandboxRuntime,
} from './lifecycle/index.ts';
import { createRedis, LifecycleQueue } from './queue/index.ts';
import { SandboxFiles, TransferPipes } from './files/index.ts';
import { deliveringSecrets, SandboxCommands, SecretDelivery } from './exec/index.ts';
import { RedisLeases } from './core/redis-lease.ts';
import { requireHaproxy, serviceCaPem, startEdge, type Edge } from './edge/index.ts';
import { openStore, type Store } from './store/index.ts';
import { startRegistry, type Registry } from './registry/index.ts';
import { countingStoreErrors, PromMetrics, readiness, serviceChecks } from './monitoring/index.ts';
import { loadRulesFile, startScanning, type Scanning } from './scanner/index.ts';

export interface Service {
  config: Config;
  store: Store;
  lifecycle: Lifecycle;
  api: FastifyInstance;
  edge: Edge;
  runtime: SandboxRuntime;
  registry: Registry;
  /** Absent with SVC_METRICS=off. */
  metrics?: ServiceMetrics;
  scanning: Scanning;
  close(): Promise<void>;
}

/**
 * The composition root: builds every part from the configuration and wires them together.
 * `npm start` and the integration tests both start the service through here.
 */
export async function startService(config: Config, logger: Logger): Promise<Service> {
  // An operator's scan rules file and the data plane are checked first: either missing stops the start before anything runs.
  const scanRules = config.scanRulesFile ? loadRulesFile(config.scanRulesFile) : undefined;
  if (config.dataPlane === 'haproxy') requireHaproxy();
  const transferRoot = path.join(config.dataDir, 'transfer');
  const opening = await openSandboxRuntime(config, logger, transferRoot);
  // The data folder holds the store, the CA key, archives and the registry: the service's alone,
  // whatever mode an operator pre-created it with.
  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(config.dataDir, 0o700);
  const metrics = config.metrics ? new PromMetrics() : undefined;
  const redis: Redis = createRedis(config.redisUrl);
  const workerRedis: Redis = createRedis(config.redisUrl);
  for (const connection of [redis, workerRedis]) connection.on('error', () => metrics?.redisError());
  // before the store is opened: a process in a shape that cannot work with the others refuses to start
  const peers = new Peers(redis, config.redisPrefix, config);
  let store: Store;
  try {
    for (const warning of await peers.join()) logger.warn(warning);
    const opened = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
    store = metrics ? countingStoreErrors(opened, () => metrics.storeError()) : opened;
  } catch (err) {
    void peers.leave().catch(() => undefined); // its heartbeat stops at once; the entry goes if Redis answers
    redis.disconnect();
    workerRedis.disconnect();
    throw err;
  }
  const runtime = await opening.withStore(store);
  const sealed = await store.sandboxes.sealPlainRecords();
  if (sealed > 0) logger.info({ sealed }, 'store: sealed the engine keys of records written before sealing');
  const queue = new LifecycleQueue(redis, config.redisPrefix);
  const apps = new AppDirectory(
    redis,
    config.redisPrefix,
    logger.child({ part: 'apps' }),
    (sandbox, pid) => procNetTcp(runtime.exec, sandbox, pid),
    async (name) => (await store.sandboxes.get(name)) !== undefined,
  );
  await apps.start();
  const sessions = new IdleSessions(redis, config.redisPrefix);
  const leases = new RedisLeases(redis, `${config.redisPrefix}:lease`);
  const audit = new AuditLog(store, logger.child({ part: 'audit' }), config.auditRetentionDays);
  const stopPruningAudit = audit.startRetention();
  const admission = new Admission({
    store, redis, leases, prefix: config.redisPrefix,
    defaults: quotaDefaults(config),
    // an Incus cluster's members that answer, added up (Incus's scheduler spreads the load); else this machine
    host: async () => ({
      ...(await runtime.capacity?.() ?? { memoryMb: Math.floor(os.totalmem() / 1024 / 1024), cpus: os.availableParallelism(), hosts: 1 }),
      overcommitMemory: config.overcommitMemory, overcommitCpus: config.overcommitCpus,
    }),
    stopsAt: async (sandbox) => (await sessions.get(sandbox))?.expiresAt,
    onRefusal: (owner, sandbox, err) => void audit.record('quota.refused', undefined, { sandbox, target: owner.name, outcome: 'refused', detail: err.message }),
  });
  const wakeLimits = new WakeLimits(redis, config.redisPrefix, (owner) => admission.quotasOf(owner).wakes_per_hour, metrics);
  const sshKeyMarks = new SshKeyMarks(redis, config.redisPrefix);
  const news = new LifecycleNews(redis, config.redisPrefix, logger);
  // users' secrets go into a sandbox through its exec: after each start the lifecycle makes, at each change, before sessions
  const secrets: SecretDelivery = new SecretDelivery({ store, exec: runtime.exec, lifecycle: { status: (name) => lifecycle.status(name) }, logger });
  const lifecycle: Lifecycle = new Lifecycle({ config, store, runtime: deliveringSecrets(runtime, secrets, logger), sessions, sshKeyMarks, leases, queue, apps, logger, admission, metrics });
  await news.listen({
    ownerDisabled: (owner) => void lifecycle.sleepOwner(owner),
    // `svc hosts move` and `evacuate` run in the operator's process: the runtime learns where the sandbox went
    sandboxMoved: (sandbox, host) => runtime.movedTo?.(sandbox, host),
  });
  const worker: Worker = startLifecycleWorker(lifecycle, workerRedis, config.redisPrefix, logger);
  const stopWatchingStarts = runtime.watchStarts();
  await queue.startReconciling();
  await lifecycle.reconcile();
  const rearm = rearmReconciling(queue, lifecycle, logger);
  const files = new SandboxFiles(runtime.exec, lifecycle, await TransferPipes.open(transferRoot), config.filesMaxUpload);
  const registry: Registry = await startRegistry({ config, store, logger, metrics });
  const scanning = startScanning({ config, store, versions: registry.catalog, blobs: registry.upstream, ownerSecrets: ownerSecretHashes(store), logger, metrics, ...(scanRules ? { rules: scanRules } : {}) });
  metrics?.observe({
    sandboxes: () => sandboxCounts(store, runtime),
    scanQueue: () => registry.queue.queue.getJobCounts('waiting', 'active', 'delayed', 'failed'),
  });
  const appPasses = await AppPasses.open(store, addressesOf(config).site);
  const api = await buildApi({
    config, store, lifecycle, files, logger, appPasses,
    commands: new SandboxCommands(runtime.exec, lifecycle, secrets),
    secrets,
    usage: new SandboxUsage(runtime),
    sessions: new WebSessions(redis, config.redisPrefix),
    signInGuard: new SignInGuard(redis, config.redisPrefix),
    auditOnce: new AuditOnce(redis, config.redisPrefix),
    caPem: () => serviceCaPem(config, store.serviceKeys),
    managerAccess: (record) => managerAccess({ apps, state: (name) => lifecycle.status(name), appUrl: (label) => lifecycle.views.appUrl(label) }, record),
    admission,
    wakeLimits,
    audit,
    oidc: config.oidc && new OidcSignIn(config.oidc, `${addressesOf(config).site}/api/auth/oidc/callback`, store, redis, config.redisPrefix),
    passwordSignIn: config.passwordSignIn,
    sseHeartbeatMs: config.sseHeartbeatMs,
    ops: {
      readiness: () => readiness(serviceChecks({ redis, store, sandboxEngine: runtime, registryUpstream: registry.upstream, dataPlane: () => edge?.dataPlane })),
      metrics,
    },
  });
  await api.ready();
  // sandboxes reach the service's public port (registry pushes from inside), and nothing else of the host
  const closePort = await opening.openServicePort(config.httpsPort);
  // /readyz answers from here on (the operator port), but is not ready before the public port is open
  let edge: Edge | undefined;
  edge = await startEdge({
    config,
    backend: new LifecycleEdgeBackend(lifecycle, apps, wakeLimits, logger),
    api: api.server,
    registry: registry.front.app.server,
    appAccess: appPasses,
    // the spawned upstream's socket: HAProxy sends it the blob bytes the front allows (an operator's upstream gets them from the front)
    registryBypass: registry.upstream.socketPath ? { upstreamSocket: registry.upstream.socketPath, mayBypass: registry.front.mayBypass } : undefined,
    logger,
    caKeys: store.serviceKeys,
    timeouts: { heldRequestMs: config.wakeHoldMs },
    metrics,
    dataPlane: config.dataPlane,
  });

  return {
    config,
    store,
    lifecycle,
    api,
    edge,
    runtime,
    registry,
    metrics,
    scanning,
    async close() {
      clearInterval(rearm);
      stopPruningAudit();
      // Each step is bounded: one that hangs (BullMQ's Worker.close() waits forever on a
      // connection that is reconnecting to a Redis that is gone) is logged and left behind.
      const step = (what: string, work: () => Promise<unknown> | unknown) => bounded(what, work, logger);
      await step('edge', () => edge.close());
      await step('sandbox port', () => closePort());
      stopWatchingStarts();
      await step('api', () => api.close());
      // The worker before the parts its jobs use: a reconcile pass or wake in flight finishes against them.
      await step('lifecycle worker', () => worker.close());
      await step('files', () => files.close());
      // The scan workers before the registry: a scan in flight finishes against its upstream.
      await step('scan workers', () => scanning.close());
      await step('registry', () => registry.close());
      await step('apps', () => apps.close());
      await step('lifecycle news', () => news.close());
      await step('lifecycle queue', () => queue.close());
      await step('peers', () => peers.leave());
      await step('sandbox runtime', () => runtime.close?.());
      redis.disconnect();
      workerRedis.disconnect();
      await step('store', () => store.close());
    },
  };
}

/** Sandboxes by status for the metrics: the store's records against the engine's containers. */
async function sandboxCounts(store: Store, runtime: SandboxRuntime): Promise<SandboxCounts> {
  const [records, containers] = await Promise.all([store.sandboxes.listAll({ secrets: false }), runtime.list()]);
  const running = new Map(containers.map((c) => [c.name, c.running]));
  const counts: SandboxCounts = { running: 0, asleep: 0, deep_sleep: 0, archived: 0 };
  for (const r of records) {
    const state = running.get(r.name);
    counts[r.archived_at ? 'archived' : state === undefined ? 'deep_sleep' : state ? 'running' : 'asleep'] += 1;
  }
  return counts;
}

/** How often each process checks that the reconcile schedule is still in Redis. */
const REARM_EVERY_MS = 10_000;
const CLOSE_STEP_MS = 5_000;

/** Every process puts the reconcile schedule back when Redis lost it, and reconciles at once. */
function rearmReconciling(queue: LifecycleQueue, lifecycle: Lifecycle, logger: Logger): NodeJS.Timeout {
  let busy = false; // a Redis that is away holds the check; never stack them
  return setInterval(() => {
    if (busy) return;
    busy = true;
    void (async () => {
      if (await queue.ensureReconciling()) {
        logger.warn('the reconcile schedule was gone from Redis (Redis restarted?): put back; reconciling now');
        await lifecycle.reconcile();
      }
    })()
      .catch((err) => logger.warn({ err }, 'could not check the reconcile schedule'))
      .finally(() => { busy = false; });
  }, REARM_EVERY_MS).unref();
}

async function bounded(what: string, work: () => Promise<unknown> | unknown, logger: Logger): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => { timer = setTimeout(() => resolve('late'), CLOSE_STEP_MS); });
  try {
    const outcome = await Promise.race([Promise.resolve().then(work), late]);
    if (outcome === 'late') logger.warn({ step: what }, `shutdown: ${what} did not close within ${CLOSE_STEP_MS} ms; left behind`);
  } catch (err) {
    logger.warn({ step: what, err }, `shutdown: ${what} failed to close`);
  } finally {
    clearTimeout(timer);
  }
}
