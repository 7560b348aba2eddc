import net from 'node:net';
import type Docker from 'dockerode';
import type { Redis } from 'ioredis';
import { errors } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { RedisLeases, type HeldLease } from '../../core/redis-lease.ts';
import { appEntries, labelBuilders, type AppContainer, type AppEntry, type PublishedPort } from './app-labels.ts';
import { listenState } from './listeners.ts';

const REFRESH_DEBOUNCE_MS = 150;
/** A second look after a burst of events: apps bind their port a moment after their container starts. */
const SETTLE_MS = 3_000;
const RESUBSCRIBE_MS = 1_000;
/**
 * Every process reads the whole table again this often: pub/sub is best-effort (a message sent
 * while a subscriber reconnects is lost), so this bounds how long a missed change stays unseen.
 */
export const RELOAD_EVERY_MS = 10_000;
/**
 * A field of the table's hash that no label can be: written once with the table, so a hash without
 * it is a table Redis lost (flushed, or restarted without persistence), not a table of no apps.
 */
const TABLE_MARK = '#table';

/** What one process tells the others on `<prefix>:apps:events`. */
interface AppEvent {
  /** `changed`: the sandbox's addresses changed in Redis; `unwatch`: it sleeps, stop following it. */
  op: 'changed' | 'unwatch';
  sandbox: string;
}

/**
 * Tells every service process to stop following a sandbox's engine (it went down outside them: a move
 * by `svc hosts evacuate`), as AppDirectory.unwatch does from inside one.
 */
export async function publishUnwatch(redis: Redis, prefix: string, sandbox: string): Promise<void> {
  await redis.publish(`${prefix}:apps:events`, JSON.stringify({ op: 'unwatch', sandbox } satisfies AppEvent));
}

/**
 * The app table: which host label goes to which sandbox and port. A provider in Traefik's sense:
 * it discovers apps from each running sandbox's own engine (its event stream, not polling) and
 * keeps the table in memory for the edge's hot path and in Redis so a sleeping sandbox's addresses
 * still resolve — that is what lets a request to an asleep app wake it. A label only ever goes to
 * the sandbox it belongs to (labelBuilders), whichever sandbox or container came first.
 *
 * With several service processes (issue 19), Redis is the table and each process's map a copy:
 * a change is published on `<prefix>:apps:events` and every process reloads, and each reloads the
 * whole table every RELOAD_EVERY_MS anyway. The edge's lookups never touch Redis. One process
 * follows a sandbox's engine: the watcher holds the lease `<prefix>:watch:<sandbox>`; a sleep
 * tells every process to stop following it; a holder that dies leaves its lease to expire, and the
 * next reconcile pass, in whichever process, takes the sandbox over.
 */
export class AppDirectory {
  private byLabel = new Map<string, AppEntry>();
  /** The JSON of each entry as last read from Redis: a reload checks ownership only of what changed. */
  private raws = new Map<string, string>();
  private readonly watchers = new Map<string, { stop(): void }>();
  private readonly key: string;
  private readonly channel: string;
  private readonly leases: RedisLeases;
  private subscriber: Redis | undefined;
  private reloadTimer: NodeJS.Timeout | undefined;
  private reloading: Promise<void> | undefined;
  private reloadAgain = false;
  /** Set by close(): work that was in flight then (a wake, a reconcile pass) starts no watcher after it. */
  private closed = false;
  private readonly sleepListeners = new Set<(sandbox: string) => void>();
  private readonly changeListeners = new Set<(sandbox: string) => void>();

  /**
   * @param readProcNet the /proc/<pid>/net/tcp and tcp6 of a process in a sandbox (pid as the
   * sandbox sees it), to tell loopback-only apps apart
   * @param nameTaken whether a sandbox of that name exists, archived ones included
   */
  constructor(
    private readonly redis: Redis,
    prefix: string,
    private readonly log: Logger,
    private readonly readProcNet: (sandbox: string, pid: number) => Promise<string>,
    private readonly nameTaken: (name: string) => Promise<boolean>,
  ) {
    this.key = `${prefix}:apps`;
    this.channel = `${prefix}:apps:events`;
    this.leases = new RedisLeases(redis, `${prefix}:watch`);
  }

  /** Loads the table and follows the other processes' changes: their events, and a reload every RELOAD_EVERY_MS. */
  async start(): Promise<void> {
    const subscriber = this.redis.duplicate();
    this.subscriber = subscriber;
    subscriber.on('error', () => undefined); // ioredis reconnects by itself
    subscriber.on('message', (_channel: string, message: string) => this.onEvent(message));
    // back after a reconnect: what was published meanwhile is lost, so read it all
    subscriber.on('ready', () => { if (!this.closed) void this.reload().catch(() => undefined); });
    await subscriber.subscribe(this.channel);
    await this.reload();
    this.reloadTimer = setInterval(() => {
      void this.reload().catch((err) => this.log.warn({ err: (err as Error).message }, 'app table reload failed'));
    }, RELOAD_EVERY_MS);
  }

  private onEvent(message: string): void {
    if (this.closed) return;
    let event: AppEvent;
    try {
      event = JSON.parse(message) as AppEvent;
    } catch {
      return;
    }
    if (event.op === 'unwatch') {
      this.stopFollowing(event.sandbox);
      this.toldSleeping(event.sandbox);
    } else void this.reload().catch((err) => this.log.warn({ err: (err as Error).message }, 'app table reload failed'));
  }

  /** Reads the whole table from Redis; concurrent calls share one read, and one more after it. */
  reload(): Promise<void> {
    if (this.reloading) {
      this.reloadAgain = true;
      return this.reloading;
    }
    this.reloading = (async () => {
      do {
        this.reloadAgain = false;
        const raws = await this.redis.hgetall(this.key);
        if (raws[TABLE_MARK] === undefined) {
          await this.restore(raws);
          this.reloadAgain = true;
          continue;
        }
        delete raws[TABLE_MARK];
        const table = new Map<string, AppEntry>();
        for (const [label, raw] of Object.entries(raws)) {
          const entry = JSON.parse(raw) as AppEntry;
          const known = this.raws.get(label) === raw && this.byLabel.get(label);
          if (known || (await this.owns(entry.sandbox, entry.label))) table.set(label, known || entry);
          else delete raws[label];
        }
        this.swap(table, new Map(Object.entries(raws)));
      } while (this.reloadAgain && !this.closed);
    })().finally(() => { this.reloading = undefined; });
    return this.reloading;
  }

  /**
   * Redis lost the table: what this process knows goes back (each process adds what it knows; an
   * address written since, by a watcher's refresh, is newer and stays), so apps keep answering
   * until the reconcile pass has every watcher refresh its sandbox.
   */
  private async restore(raws: Record<string, string>): Promise<void> {
    if (this.raws.size > 0) this.log.warn({ addresses: this.raws.size }, 'the app table was gone from Redis (Redis restarted?): putting back what this process knows');
    const tx = this.redis.multi();
    for (const [label, raw] of this.raws) if (raws[label] === undefined) tx.hsetnx(this.key, label, raw);
    tx.hset(this.key, TABLE_MARK, '1');
    await tx.exec();
  }

  /** Whether `label` belongs to `sandbox`: no existing name is a more specific builder of it. */
  private async owns(sandbox: string, label: string): Promise<boolean> {
    for (const name of labelBuilders(label)) {
      if (name === sandbox) return true;
      if (await this.nameTaken(name)) return false;
    }
    return false;
  }

  /**
   * Refuses a new sandbox name that would own an address another sandbox serves: whoever uses
   * that address would reach the newcomer's app, under the edge's valid certificate.
   */
  checkNewName(name: string): void {
    for (const { label, sandbox } of this.byLabel.values()) {
      const builders = labelBuilders(label);
      const at = builders.indexOf(name);
      if (at >= 0 && at < builders.indexOf(sandbox)) {
        throw new errors.Conflict(`the name "${name}" would take over the app address "${label}" of another sandbox; choose another name`);
      }
    }
  }

  resolve(label: string): AppEntry | undefined {
    return this.byLabel.get(label);
  }

  appsOf(sandbox: string): AppEntry[] {
    return [...this.byLabel.values()].filter((e) => e.sandbox === sandbox).sort((a, b) => a.label.localeCompare(b.label));
  }

  isWatching(sandbox: string): boolean {
    return this.watchers.has(sandbox);
  }

  /**
   * Follows a running sandbox's engine: refreshes its apps now and on every container event, if
   * no other process follows it already (its lease). Resolves once the lease is decided, so a
   * caller holding the sandbox's transition lease knows a sleep after it will find the watcher.
   */
  async watch(sandbox: string, engine: Docker): Promise<void> {
    this.stopFollowing(sandbox);
    if (this.closed) return;
    let stopped = false;
    let lease: HeldLease | undefined;
    let timer: NodeJS.Timeout | undefined;
    let settle: NodeJS.Timeout | undefined;
    let again: NodeJS.Timeout | undefined;
    let stream: NodeJS.ReadableStream | undefined;
    const run = () => void this.refresh(sandbox, engine).catch((err) => { if (!stopped) this.log.warn({ sandbox, err: err.message }, 'app discovery failed'); });
    const refresh = () => {
      clearTimeout(timer);
      clearTimeout(settle);
      timer = setTimeout(run, REFRESH_DEBOUNCE_MS);
      settle = setTimeout(run, SETTLE_MS);
    };
    const subscribe = async () => {
      if (stopped) return;
      try {
        stream = await engine.getEvents({ filters: { type: ['container'], event: ['create', 'start', 'die', 'destroy', 'rename'] } });
        if (stopped) return (stream as unknown as { destroy(): void }).destroy();
        stream.on('data', refresh);
        stream.on('error', () => undefined);
        // 'close', not 'end': a reset stream (seen when another sandbox's network went) never ends.
        stream.once('close', () => { if (!stopped) again = setTimeout(subscribe, RESUBSCRIBE_MS); });
        refresh();
      } catch {
        if (!stopped) again = setTimeout(subscribe, RESUBSCRIBE_MS);
      }
    };
    const watcher = {
      stop() {
        stopped = true;
        clearTimeout(timer);
        clearTimeout(settle);
        clearTimeout(again);
        (stream as unknown as { destroy?(): void } | undefined)?.destroy?.();
        void lease?.release();
      },
    };
    this.watchers.set(sandbox, watcher);
    const lost = () => {
      this.log.warn({ sandbox }, 'lost the lease on following this sandbox\'s engine; the next reconcile pass gives it to one process');
      if (this.watchers.get(sandbox) === watcher) this.stopFollowing(sandbox);
    };
    await this.leases.tryTake(sandbox, lost).then(
      (taken) => {
        lease = taken;
        if (stopped) return void taken?.release();
        if (taken) return void subscribe();
        // another process follows it; a reconcile pass here tries again (that one may have died)
        if (this.watchers.get(sandbox) === watcher) this.watchers.delete(sandbox);
      },
      (err: Error) => {
        if (this.watchers.get(sandbox) === watcher) this.watchers.delete(sandbox);
        this.log.warn({ sandbox, err: err.message }, 'could not take the lease on following this sandbox\'s engine');
      },
    );
  }

  /** This process stops following the sandbox's engine (and gives its lease back). */
  private stopFollowing(sandbox: string): void {
    this.watchers.get(sandbox)?.stop();
    this.watchers.delete(sandbox);
  }

  /**
   * Stops following the sandbox in every process (it sleeps, or is going); its addresses stay so
   * that a request can wake it. The others are told only while one of them holds the lease.
   */
  unwatch(sandbox: string): void {
    this.stopFollowing(sandbox);
    if (this.closed) return;
    this.toldSleeping(sandbox);
    void (async () => {
      if (await this.redis.exists(`${this.leases.namespace}:${sandbox}`)) await this.publish({ op: 'unwatch', sandbox });
    })().catch((err) => this.log.warn({ sandbox, err: (err as Error).message }, 'could not tell the other processes to stop following this sandbox'));
  }

  /**
   * Calls `listener` when a sandbox starts going to sleep (here or, through Redis, in another
   * process), before its container stops: the data plane drops its routes then. Returns the unsubscribe.
   */
  onSleeping(listener: (sandbox: string) => void): () => void {
    this.sleepListeners.add(listener);
    return () => this.sleepListeners.delete(listener);
  }

  private toldSleeping(sandbox: string): void {
    for (const listener of this.sleepListeners) listener(sandbox);
  }

  /** Calls `listener` with each sandbox whose addresses changed in this process's table (the data plane's routes follow). */
  onChanged(listener: (sandbox: string) => void): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  /** Swapped whole (the edge's lookups see the old table or the new one, never half of each); the change listeners hear whose entries differ. */
  private swap(table: Map<string, AppEntry>, raws: Map<string, string>): void {
    const before = { table: this.byLabel, raws: this.raws };
    this.byLabel = table;
    this.raws = raws;
    const changed = new Set<string | undefined>();
    for (const [label, raw] of before.raws) if (raws.get(label) !== raw) changed.add(before.table.get(label)?.sandbox);
    for (const [label, raw] of raws) if (before.raws.get(label) !== raw) changed.add(table.get(label)?.sandbox);
    for (const sandbox of changed) for (const listener of this.changeListeners) if (sandbox) listener(sandbox);
  }

  /** Stops every watcher and the reloads for good (service shutdown); the table stays in Redis. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.reloadTimer);
    for (const sandbox of [...this.watchers.keys()]) this.stopFollowing(sandbox);
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    if (subscriber) await subscriber.quit().catch(() => subscriber.disconnect());
  }

  private async publish(event: AppEvent): Promise<void> {
    await this.redis.publish(this.channel, JSON.stringify(event));
  }

  /** The sandbox is archived: its addresses go. */
  async forget(sandbox: string): Promise<void> {
    this.unwatch(sandbox);
    await this.replace(sandbox, []);
  }

  async refresh(sandbox: string, engine: Docker): Promise<void> {
    const containers = await Promise.all(
      (await engine.listContainers({ all: true })).map(async (c): Promise<AppContainer & { pid: number }> => {
        const info = await engine.getContainer(c.Id).inspect();
        return { name: info.Name.replace(/^\//, ''), labels: info.Config.Labels ?? {}, running: info.State.Running, ports: publishedPorts(info), pid: info.State.Pid };
      }),
    );
    const entries = await Promise.all(
      containers.map(async (c) => {
        const found = appEntries(sandbox, c);
        if (!c.running || !c.pid || found.length === 0) return found;
        const procNet = await this.readProcNet(sandbox, c.pid).catch(() => '');
        return found.map((e) => ({ ...e, loopbackOnly: listenState(procNet, e.containerPort) === 'loopback-only' }));
      }),
    );
    const owned: AppEntry[] = [];
    for (const entry of entries.flat()) {
      if (await this.owns(sandbox, entry.label)) owned.push(entry);
      else this.log.info({ sandbox, label: entry.label }, 'app address belongs to a more specific sandbox name; skipped');
    }
    await this.replace(sandbox, owned);
  }

  /** Puts the sandbox's addresses in Redis (the labels it lost there go too) and tells every process. */
  private async replace(sandbox: string, entries: AppEntry[]): Promise<void> {
    const fresh = new Map(entries.map((e) => [e.label, e]));
    const held = Object.entries(await this.redis.hgetall(this.key)).filter(([label, raw]) => label !== TABLE_MARK && (JSON.parse(raw) as AppEntry).sandbox === sandbox);
    const gone = held.map(([label]) => label).filter((label) => !fresh.has(label));
    const tx = this.redis.multi();
    if (gone.length) tx.hdel(this.key, ...gone);
    if (fresh.size) tx.hset(this.key, Object.fromEntries([...fresh].map(([l, e]) => [l, JSON.stringify(e)])));
    await tx.exec();
    // this process sees its own change at once; the others on the event (or their next reload)
    const table = new Map(this.byLabel);
    const raws = new Map(this.raws);
    for (const [label, entry] of table) if (entry.sandbox === sandbox && !fresh.has(label)) { table.delete(label); raws.delete(label); }
    for (const [label, entry] of fresh) { table.set(label, entry); raws.set(label, JSON.stringify(entry)); }
    this.swap(table, raws);
    await this.publish({ op: 'changed', sandbox });
  }
}

/** Published TCP ports: as bound while running, as configured while stopped. */
function publishedPorts(info: Docker.ContainerInspectInfo): PublishedPort[] {
  const bindings = (info.State.Running ? info.NetworkSettings.Ports : info.HostConfig.PortBindings) as
    | Record<string, Array<{ HostIp: string; HostPort: string }> | null>
    | undefined;
  return Object.entries(bindings ?? {}).flatMap(([spec, binds]) => {
    const [port, proto] = spec.split('/');
    if (proto !== 'tcp' || !binds) return [];
    return binds
      .filter((b) => /^\d+$/.test(b.HostPort))
      .map((b) => ({ containerPort: Number(port), hostPort: Number(b.HostPort), hostIp: b.HostIp ?? '' }));
  });
}

/**
 * Whether an app answers: it sends bytes back to a minimal request within the time. A bare TCP
 * connect is not enough: the engine's port proxy accepts even when nothing listens behind it.
 */
export function probe(host: string, port: number, timeoutMs = 800): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (answers: boolean) => { socket.destroy(); resolve(answers); };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => socket.write('HEAD / HTTP/1.0\r\n\r\n'));
    socket.once('data', () => done(true));
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
  });
}
