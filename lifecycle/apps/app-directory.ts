import net from 'node:net';
import type Docker from 'dockerode';
import type { Redis } from 'ioredis';
import { errors } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { appEntries, labelBuilders, type AppContainer, type AppEntry, type PublishedPort } from './app-labels.ts';
import { listenState } from './listeners.ts';

const REFRESH_DEBOUNCE_MS = 150;
/** A second look after a burst of events: apps bind their port a moment after their container starts. */
const SETTLE_MS = 3_000;
const RESUBSCRIBE_MS = 1_000;

/**
 * The app table: which host label goes to which sandbox and port. A provider in Traefik's sense:
 * it discovers apps from each running sandbox's own engine (its event stream, not polling) and
 * keeps the table in memory for the edge's hot path and in Redis so a sleeping sandbox's addresses
 * still resolve — that is what lets a request to an asleep app wake it. A label only ever goes to
 * the sandbox it belongs to (labelBuilders), whichever sandbox or container came first.
 */
export class AppDirectory {
  private readonly byLabel = new Map<string, AppEntry>();
  private readonly watchers = new Map<string, { stop(): void }>();
  private readonly key: string;
  /** Set by close(): work that was in flight then (a wake, a reconcile pass) starts no watcher after it. */
  private closed = false;

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
  }

  async load(): Promise<void> {
    for (const raw of Object.values(await this.redis.hgetall(this.key))) {
      const entry = JSON.parse(raw) as AppEntry;
      if (await this.owns(entry.sandbox, entry.label)) this.byLabel.set(entry.label, entry);
    }
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

  /** Follows a running sandbox's engine: refreshes its apps now and on every container event. */
  watch(sandbox: string, engine: Docker): void {
    this.unwatch(sandbox);
    if (this.closed) return;
    let stopped = false;
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
    void subscribe();
    this.watchers.set(sandbox, {
      stop() {
        stopped = true;
        clearTimeout(timer);
        clearTimeout(settle);
        clearTimeout(again);
        (stream as unknown as { destroy?(): void } | undefined)?.destroy?.();
      },
    });
  }

  /** Stops following (the sandbox sleeps); its addresses stay so that a request can wake it. */
  unwatch(sandbox: string): void {
    this.watchers.get(sandbox)?.stop();
    this.watchers.delete(sandbox);
  }

  /** Stops every watcher for good (service shutdown); the table stays in Redis. */
  close(): void {
    this.closed = true;
    for (const sandbox of [...this.watchers.keys()]) this.unwatch(sandbox);
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

  private async replace(sandbox: string, entries: AppEntry[]): Promise<void> {
    const fresh = new Map(entries.map((e) => [e.label, e]));
    const gone = this.appsOf(sandbox).filter((e) => !fresh.has(e.label)).map((e) => e.label);
    for (const label of gone) this.byLabel.delete(label);
    for (const [label, entry] of fresh) this.byLabel.set(label, entry);
    const tx = this.redis.multi();
    if (gone.length) tx.hdel(this.key, ...gone);
    if (fresh.size) tx.hset(this.key, Object.fromEntries([...fresh].map(([l, e]) => [l, JSON.stringify(e)])));
    await tx.exec();
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
