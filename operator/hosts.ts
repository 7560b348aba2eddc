// `svc hosts …`: the hosts of the service's runtime as the operator lists, drains, evacuates and removes
// them (docs/scale-out.md): an Incus cluster's members, or the one machine of the Docker runtime.
import { pino } from 'pino';
import type { Config } from '../core/config.ts';
import { KeyedLock } from '../core/keyed-lock.ts';
import { RedisLeases } from '../core/redis-lease.ts';
import { IdleSessions, mover, operatorHosts, publishUnwatch, tellNewsOnce, type HostOperations, type Mover, type MoveProgress } from '../lifecycle/index.ts';
import { createRedis } from '../queue/index.ts';
import type { Store } from '../store/index.ts';

/** The CLI's warnings go to stderr. */
const cliLogger = () => pino({ level: 'warn' }, pino.destination(2));

/** The hosts as the runtime has them (HostOperations): list, drain, evacuate, move and remove go through it. */
export function openHosts(store: Store, config: Config): HostOperations {
  return operatorHosts(store, config, cliLogger());
}

export interface HostRow {
  name: string;
  address: string;
  state: 'ready' | 'drained' | 'away';
  /** Why the host is away (the connect error, or a runner host of an earlier release): for the operator, on the command line only. */
  reason?: string;
  /** Sandboxes it holds (running, asleep or in deep sleep). */
  sandboxes: number;
  running?: number;
  memory?: { committed_bytes: number; total_bytes: number };
  cpus?: { committed: number; total: number };
  networks?: number;
}

/**
 * What `svc hosts evacuate` and `move` need to move sandboxes from the command line (HostOperations.move):
 * the hosts, and the service's Redis for each sandbox's transition lease (a wake under way finishes
 * before its sandbox is taken down), its idle session and app watchers.
 */
export function openMoves(store: Store, config: Config): { hosts: HostOperations; mover: Mover; told(p: MoveProgress): Promise<void>; close(): Promise<void> } {
  const logger = cliLogger();
  const redis = createRedis(config.redisUrl);
  const lock = new KeyedLock(new RedisLeases(redis, `${config.redisPrefix}:lease`));
  const sessions = new IdleSessions(redis, config.redisPrefix);
  return {
    hosts: operatorHosts(store, config, logger),
    mover: mover({
      store,
      exclusive: (name, work) => lock.run(name, work),
      goingDown: async (name) => {
        await sessions.close(name);
        await publishUnwatch(redis, config.redisPrefix, name);
      },
      logger,
    }, config),
    /**
     * A move done, told to the running service processes (the lifecycle news): their runtime knows the
     * sandbox's new host before its old one may be lost. Best-effort: one that missed it reads it again.
     */
    told: async (p) => {
      await tellNewsOnce(config.redisUrl, config.redisPrefix, { op: 'sandbox-moved', sandbox: p.sandbox, host: p.to })
        .catch((err: unknown) => logger.warn({ sandbox: p.sandbox, err: (err as Error).message }, 'the service was not told of the move'));
    },
    close: async () => { await redis.quit().catch(() => redis.disconnect()); },
  };
}

/** A move done, as `svc hosts evacuate` and `svc hosts move` print it. */
export function progressLine(p: MoveProgress): string {
  return `${p.sandbox}: moved ${p.from} → ${p.to} (${(p.bytes / 1e6).toFixed(1)} MB in ${(p.ms / 1000).toFixed(1)} s)`;
}

/**
 * Every host with its state and figures, the service's own machine first; then the runner hosts of an
 * earlier release that still hold sandboxes (shown unavailable until moved: docs/scale-out.md,
 * "Upgrading from runner hosts").
 */
export async function listHosts(store: Store, config: Config): Promise<HostRow[]> {
  const hosts = operatorHosts(store, config, pino({ level: 'silent' }));
  const { stranded } = await store.runnerLeftovers.read();
  const here = (await store.sandboxes.listAll({ secrets: false })).filter((s) => !s.archived_at && !stranded.has(s.name)).length;
  const rows = (await hosts.readings()).map(({ name, address, port, drained, figures: load, error }): HostRow => ({
    name,
    address: address ? `${address}:${port}` : '(this machine)',
    state: !load ? 'away' : drained ? 'drained' : 'ready',
    ...(error ? { reason: error } : {}),
    // on Incus the members say what they hold; the one machine holds every sandbox
    sandboxes: config.runtime === 'incus' ? load?.sandboxes ?? 0 : here,
    ...(load ? {
      running: load.running,
      memory: { committed_bytes: load.committedMemoryBytes, total_bytes: load.memoryBytes },
      cpus: { committed: load.committedCpus, total: load.cpus },
      networks: load.networks,
    } : {}),
  }));
  for (const runner of [...new Set(stranded.values())].sort()) {
    rows.push({
      name: runner, address: '(a runner host of an earlier release)', state: 'away',
      reason: 'this release no longer runs runner hosts: its sandboxes are unavailable until the previous release moves them here (docs/scale-out.md, "Upgrading from runner hosts")',
      sandboxes: [...stranded.values()].filter((h) => h === runner).length,
    });
  }
  return rows;
}
