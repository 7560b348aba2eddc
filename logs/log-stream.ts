import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type Docker from 'dockerode';
import { FrameReader } from '../core/engine-frames.ts';
import { onJsonLines } from '../core/json-lines.ts';
import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../core/compose-labels.ts';

/** Lines are held this long and released in timestamp order, so event ids only grow. */
const DEFAULT_HOLD_MS = 250;
const FLUSH_EVERY_MS = 100;
const NS_PER_MS = 1_000_000n;
const CONTAINER_ID = /^[0-9a-f]{64}$/;
/** The latest time a Date can show, in ns. */
const MAX_TIME_NS = 8.64e21;

/** A container event of the engine's stream, as parsed: nothing in it is trusted. */
type EngineEvent = { id?: unknown; Action?: unknown; status?: unknown; timeNano?: number; Actor?: { Attributes?: Record<string, unknown> } };
/** Longest log line kept; a container's output is the sandbox's to choose. */
export const MAX_LINE = 64 * 1024;

/** One log line of one app container (the `log` event of GET logs/stream). */
export interface LogEvent {
  /** `<unix ns>-<container id, 12>-<n>`: ordered; send it back as Last-Event-ID to resume. */
  id: string;
  container: string;
  container_id: string;
  service: string | null;
  project: string | null;
  stream: 'stdout' | 'stderr';
  /** RFC 3339 with nanoseconds, as the engine stamped the line. */
  time: string;
  line: string;
}

/** A container started or stopped (the `container` event). */
export interface ContainerEvent {
  container: string;
  container_id: string;
  service: string | null;
  project: string | null;
  action: 'start' | 'stop';
  time: string;
}

/** Where a resumed stream starts: after this event id, or at this time. */
export interface Cursor {
  ns: bigint;
  container: string;
  n: number;
}

export interface LogStreamHandlers {
  log(event: LogEvent): void;
  container(event: ContainerEvent): void;
  /** The sandbox's engine went away (the sandbox stopped); no more events will come. */
  gone(): void;
}

interface Meta {
  id: string;
  name: string;
  service: string | null;
  project: string | null;
  tty: boolean;
}

type Key = { ns: bigint; container: string; n: number };

/** One follow of one container: lines before `minNs` are skipped; per stream, the last timestamp and its count. */
interface Session {
  minNs: bigint;
  stdout: { ns: bigint; n: number };
  stderr: { ns: bigint; n: number };
}

export function parseEventId(id: string): Cursor | null {
  const m = /^(\d{1,25})-([0-9a-f]{12})-(\d{1,9})$/.exec(id);
  return m ? { ns: BigInt(m[1]!), container: m[2]!, n: Number(m[3]) } : null;
}

/** RFC 3339 (with optional fraction) or unix seconds (with optional fraction) to nanoseconds. */
export function parseTime(value: string): bigint | null {
  const unix = /^(\d{1,12})(?:\.(\d{1,9}))?$/.exec(value);
  if (unix) return BigInt(unix[1]!) * 1_000_000_000n + BigInt((unix[2] ?? '').padEnd(9, '0'));
  const iso = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(value);
  if (!iso) return null;
  const ms = Date.parse(iso[1]! + iso[3]!);
  if (Number.isNaN(ms)) return null;
  return BigInt(ms) * NS_PER_MS + BigInt((iso[2] ?? '').padEnd(9, '0'));
}

function compare(a: Key, b: Key): number {
  if (a.ns !== b.ns) return a.ns < b.ns ? -1 : 1;
  if (a.container !== b.container) return a.container < b.container ? -1 : 1;
  return a.n - b.n;
}

function unixSince(ns: bigint): string {
  return `${ns / 1_000_000_000n}.${String(ns % 1_000_000_000n).padStart(9, '0')}`;
}

/**
 * Follows the logs of every container of one sandbox engine: the ones there at the start and
 * every one that starts later (engine events). Lines of all containers are merged in timestamp
 * order (held back a moment for that) and carry ids that resume the stream without gaps.
 */
export class SandboxLogStream {
  private readonly following = new Map<string, Readable>();
  /** The last line seen, by `<container>/<stream>`. */
  private readonly last = new Map<string, { ns: bigint; n: number }>();
  private pending: LogEvent[] = [];
  private keys = new WeakMap<LogEvent, Key>();
  private events: Readable | undefined;
  private flusher: NodeJS.Timeout | undefined;
  private stopped = false;
  private emitted: Key | undefined;
  /** Followers being set up, with the earliest time they may still deliver: nothing newer is released meanwhile. */
  private readonly attaching = new Map<string, bigint>();

  constructor(
    private readonly engine: Docker,
    private readonly handlers: LogStreamHandlers,
    private readonly opts: { since?: bigint; after?: Cursor; tail?: number; holdMs?: number } = {},
  ) {
    this.emitted = opts.after;
  }

  async start(): Promise<void> {
    const from = this.opts.after?.ns ?? this.opts.since;
    const replaying = from !== undefined;
    const startNs = from ?? BigInt(Date.now()) * NS_PER_MS;
    this.events = (await this.engine.getEvents({ filters: { type: ['container'], event: ['start', 'die'] } })) as unknown as Readable;
    // the sandbox's engine writes these: a line that is not an event is skipped, never thrown
    onJsonLines(this.events, (e) => { if (e && typeof e === 'object') this.onEngineEvent(e as EngineEvent); });
    const gone = () => { if (!this.stopped) { this.flush(true); this.stop(); this.handlers.gone(); } };
    this.events.on('end', gone);
    this.events.on('close', gone);
    this.events.on('error', gone);
    this.flusher = setInterval(() => this.flush(false), FLUSH_EVERY_MS);

    const containers = await this.engine.listContainers({ all: replaying });
    for (const c of containers) {
      void this.follow(c.Id, replaying || !this.opts.tail ? { since: startNs } : { tail: this.opts.tail }, startNs);
    }
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.flusher);
    (this.events as { destroy?(): void } | undefined)?.destroy?.();
    for (const s of this.following.values()) s.destroy();
    this.following.clear();
  }

  /** An event as the sandbox's engine wrote it: each field is checked before it is used. */
  private onEngineEvent(e: EngineEvent): void {
    const id = e.id;
    if (typeof id !== 'string' || !CONTAINER_ID.test(id)) return;
    const action = e.Action ?? e.status;
    const attr = (key: string) => { const v = e.Actor?.Attributes?.[key]; return typeof v === 'string' ? v : undefined; };
    const timeNano = Number.isInteger(e.timeNano) && e.timeNano! > 0 && e.timeNano! < MAX_TIME_NS ? e.timeNano : undefined;
    const time = new Date(Math.floor((timeNano ?? Date.now() * 1e6) / 1e6)).toISOString();
    const base = { container: attr('name') ?? id.slice(0, 12), container_id: id, service: attr(COMPOSE_SERVICE) ?? null, project: attr(COMPOSE_PROJECT) ?? null, time };
    if (action === 'start') {
      this.handlers.container({ ...base, action: 'start' });
      const seen = [this.last.get(`${id.slice(0, 12)}/stdout`), this.last.get(`${id.slice(0, 12)}/stderr`)].filter((l) => l !== undefined);
      // from the older of its streams' last lines: the other's repeats are recognised and skipped
      const since = seen.length ? seen.reduce((a, b) => (a.ns < b.ns ? a : b)).ns : timeNano ? BigInt(timeNano) - 1_000_000_000n : BigInt(Date.now() - 1000) * NS_PER_MS;
      void this.follow(id, { since }, since);
    } else if (action === 'die') {
      this.handlers.container({ ...base, action: 'stop' });
    }
  }

  /**
   * Follows one container's log. Until its first lines have had time to arrive, lines of the
   * others newer than `barrier` stay held: a container that starts while others log must not
   * have its first lines released after later lines of theirs.
   */
  private async follow(id: string, from: { since?: bigint; tail?: number }, barrier: bigint): Promise<void> {
    if (this.stopped || this.following.has(id)) return;
    this.attaching.set(id, barrier);
    try {
      await this.attach(id, from);
    } finally {
      // the follower's backlog comes right after its stream opens; the usual hold-back covers the rest
      setTimeout(() => this.attaching.delete(id), this.opts.holdMs ?? DEFAULT_HOLD_MS).unref();
    }
  }

  private async attach(id: string, from: { since?: bigint; tail?: number }): Promise<void> {
    const container = this.engine.getContainer(id);
    let meta: Meta;
    let stream: Readable;
    try {
      const info = await container.inspect();
      meta = {
        id: info.Id.slice(0, 12),
        name: info.Name.replace(/^\//, ''),
        service: info.Config.Labels?.[COMPOSE_SERVICE] ?? null,
        project: info.Config.Labels?.[COMPOSE_PROJECT] ?? null,
        tty: info.Config.Tty,
      };
      if (this.stopped || this.following.has(id)) return;
      stream = (await container.logs({
        follow: true, stdout: true, stderr: true, timestamps: true,
        ...(from.since !== undefined ? { since: unixSince(from.since) as unknown as number } : { tail: from.tail }),
      })) as unknown as Readable;
    } catch {
      return; // removed meanwhile
    }
    if (this.stopped || this.following.has(id)) return void stream.destroy();
    this.following.set(id, stream);
    const session: Session = { minNs: from.since ?? 0n, stdout: { ns: -1n, n: 0 }, stderr: { ns: -1n, n: 0 } };
    // Lines are cut at MAX_LINE: the first MAX_LINE characters go out at once, the rest of the line is dropped.
    const partial = { stdout: '', stderr: '' };
    const cut = { stdout: false, stderr: false };
    const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
    const onText = (kind: 'stdout' | 'stderr', bytes: Buffer) => {
      partial[kind] += decoders[kind].write(bytes);
      let nl: number;
      while ((nl = partial[kind].indexOf('\n')) >= 0) {
        if (!cut[kind]) this.onLine(meta, kind, partial[kind].slice(0, nl), session);
        cut[kind] = false;
        partial[kind] = partial[kind].slice(nl + 1);
      }
      if (partial[kind].length > MAX_LINE) {
        if (!cut[kind]) this.onLine(meta, kind, partial[kind].slice(0, MAX_LINE), session);
        cut[kind] = true;
        partial[kind] = '';
      }
    };
    // without a TTY the engine multiplexes both streams in frames, read as they come
    const frames = new FrameReader((kind, payload) => onText(kind === 2 ? 'stderr' : 'stdout', payload));
    stream.on('data', (chunk: Buffer) => (meta.tty ? onText('stdout', chunk) : frames.push(chunk)));
    const done = () => { if (this.following.get(id) === stream) this.following.delete(id); };
    stream.on('end', done);
    stream.on('close', done);
    stream.on('error', done);
  }

  /**
   * `n` counts the lines of one stream with the same timestamp within one follow session (twice
   * that, plus one for stderr); a session started at or before that timestamp counts them the
   * same way, so replayed lines are recognised and skipped. Each stream is in time order, but
   * the engine may write a line of one after a newer line of the other: the two are tracked
   * apart, or that line would pass for a repeat and be lost.
   */
  private onLine(meta: Meta, kind: 'stdout' | 'stderr', raw: string, session: Session): void {
    const sp = raw.indexOf(' ');
    const time = sp > 0 ? raw.slice(0, sp) : raw;
    const ns = parseTime(time);
    if (ns === null || ns < session.minNs) return;
    const counter = session[kind];
    counter.n = counter.ns === ns ? counter.n + 1 : 0;
    counter.ns = ns;
    const n = counter.n * 2 + (kind === 'stderr' ? 1 : 0);
    const key = { ns, container: meta.id, n };
    const prev = this.last.get(`${meta.id}/${kind}`);
    if (prev && compare(key, { ...prev, container: meta.id }) <= 0) return; // replayed after a restart: already seen
    if (this.opts.after && compare(key, this.opts.after) <= 0) return;
    this.last.set(`${meta.id}/${kind}`, { ns, n });
    const event: LogEvent = {
      id: `${ns}-${meta.id}-${n}`,
      container: meta.name,
      container_id: meta.id,
      service: meta.service,
      project: meta.project,
      stream: kind,
      time,
      line: sp > 0 ? raw.slice(sp + 1) : '',
    };
    this.keys.set(event, key);
    this.pending.push(event);
  }

  /** Releases held lines older than the hold-back (all of them with `all`), in timestamp order. */
  private flush(all: boolean): void {
    if (!this.pending.length) return;
    let cutoff = BigInt(Date.now() - (this.opts.holdMs ?? DEFAULT_HOLD_MS)) * NS_PER_MS;
    for (const barrier of this.attaching.values()) if (barrier - 1n < cutoff) cutoff = barrier - 1n;
    const ready: LogEvent[] = [];
    const held: LogEvent[] = [];
    for (const e of this.pending) (all || this.keys.get(e)!.ns <= cutoff ? ready : held).push(e);
    this.pending = held;
    ready.sort((a, b) => compare(this.keys.get(a)!, this.keys.get(b)!));
    for (const e of ready) {
      const key = this.keys.get(e)!;
      if (!this.emitted || compare(key, this.emitted) > 0) this.emitted = key;
      this.handlers.log(e);
    }
  }
}
