import type { AppRoute, EdgeBackend, ResolvedApp, ResolvedSandbox } from '../backend.ts';
import type { EngineProofs } from './engine-proofs.ts';
import type { HaproxyCertificates } from './haproxy-certificates.ts';
import type { DataPlaneFiles } from './haproxy-config.ts';
import type { RuntimeApi } from './runtime-api.ts';
import type { RuntimeWrites } from './runtime-writes.ts';

/**
 * A sandbox going to sleep stays off the maps this long: its container is still stopping, and
 * Node (which asks the backend per request and again when an address refuses) serves it meanwhile.
 */
export const SLEEP_DRAIN_MS = 15_000;
/** A route without traffic for this long leaves the maps (its next connection goes through Node, which puts it back). */
export const UNUSED_ROUTE_MS = 5 * 60_000;

/** An app whose `tunnel.visibility` is not public: never in HAProxy's maps. */
function isPrivate(r: ResolvedApp): boolean {
  const v = r.visibility ?? r.target?.visibility;
  return v !== undefined && v !== 'public';
}

interface Mirrored {
  /** The map value now in HAProxy (or being written). */
  value: string;
  sandbox: string;
  lastUsed: number;
}

/** A shell (`<sb>-shell-tcp`) or TCP twin (`<label>-tcp`) name whose TLS HAProxy ends, then raw TCP to the sandbox. */
interface MirroredTunnel {
  kind: 'shell' | 'tcp';
  /** The sandbox (shell) or the app label (tcp) it is resolved by. */
  name: string;
}

/**
 * The routes in HAProxy's maps (apps, engines, shells and TCP twins), as Node's edge resolved them:
 * each answer the backend gives is compared with the map's entry and the map follows (`set`/`add`,
 * or `del`: HAProxy then sends the name to Node again). Only values Node resolved are written
 * (`set-dst` takes nothing from the client); an app whose certificate HAProxy does not have stays on
 * Node. An app route is written once its app answered a request through Node at that address
 * (appAnswered): while a sandbox wakes, its app's port may accept and drop connections before the
 * app listens, and Node holds and retries those requests where HAProxy would answer 502.
 */
export class RouteMaps {
  private readonly apps = new Map<string, Mirrored & { label: string }>();
  private readonly engines = new Map<string, Mirrored>();
  /** Apps that answered through Node: host → the map value (address) they answered at. */
  private readonly answered = new Map<string, string>();
  /** Shell and TCP twin names: SNI → route (`<sandbox>|<address>|<port>|<kind>`). */
  private readonly tunnels = new Map<string, Mirrored & MirroredTunnel>();
  /** Sandboxes going to sleep → until when their routes stay off the maps. */
  private readonly draining = new Map<string, number>();
  /** Sandboxes to resolve again (`all`: every one), while a pass runs. */
  private pending: Set<string> | 'all' | null = null;
  private checking = false;

  constructor(
    private readonly backend: Pick<EdgeBackend, 'resolveApp' | 'resolveSandbox'>,
    private readonly writes: RuntimeWrites,
    private readonly certificates: HaproxyCertificates,
    private readonly engineProofs: EngineProofs,
    private readonly opts: { domain: string; files: DataPlaneFiles },
  ) {}

  /** The sandbox is going to sleep: its routes leave the maps now and stay off them for SLEEP_DRAIN_MS. */
  sleeping(sandbox: string): void {
    this.draining.set(sandbox, Date.now() + SLEEP_DRAIN_MS);
    for (const m of [...this.apps.values()]) if (m.sandbox === sandbox) this.app(m.label, null);
    for (const m of [...this.engines.values()]) if (m.sandbox === sandbox) this.engine(sandbox, null);
    for (const [sni, m] of [...this.tunnels]) if (m.sandbox === sandbox) this.tunnel(sni, m, null);
  }

  private isDraining(sandbox: string): boolean {
    const until = this.draining.get(sandbox);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.draining.delete(sandbox);
    return false;
  }

  /** What the backend answered for an app label (null: unknown). */
  app(label: string, r: ResolvedApp | null): void {
    const host = `${label}.${this.opts.domain}`;
    // a private app (tunnel.visibility) stays on Node, which checks every request's user
    const t = r?.status === 'running' && !isPrivate(r) ? r.target : undefined;
    const answeredAt = t ? `${t.sandbox}|${t.host}|${t.port}` : null;
    const value = t && !t.loopbackOnly && !this.isDraining(t.sandbox) && this.answered.get(host) === answeredAt ? answeredAt : null;
    // an address the app no longer has (asleep, moved) must answer through Node again before HAProxy takes it
    if (!t) this.answered.delete(host);
    const had = this.apps.get(host);
    if (value === (had?.value ?? null)) return;
    if (value) this.apps.set(host, { value, label, sandbox: t!.sandbox, lastUsed: had?.lastUsed ?? Date.now() });
    else this.apps.delete(host);
    void this.writes.enqueue((api) => (value ? this.writeApp(api, host, value) : api.deleteMapEntry(this.opts.files.appsMap, host)));
  }

  /** Node got an answer from the app at `target`: from now on HAProxy may serve it there. */
  appAnswered(label: string, target: AppRoute): void {
    const host = `${label}.${this.opts.domain}`;
    const value = `${target.sandbox}|${target.host}|${target.port}`;
    if (this.answered.get(host) === value) return;
    this.answered.set(host, value);
    this.app(label, { sandbox: target.sandbox, status: 'running', target });
  }

  /** What the backend answered for a sandbox's engine (null: unknown). */
  engine(sandbox: string, r: ResolvedSandbox | null): void {
    const sni = `${sandbox}-engine.${this.opts.domain}`;
    // only after a client was proven through Node: the flight it measured is HAProxy's proof
    const value = r?.status === 'running' && r.address && !this.isDraining(sandbox) && this.engineProofs.has(sandbox) ? r.address : null;
    const had = this.engines.get(sni);
    if (value === (had?.value ?? null)) return;
    if (value) this.engines.set(sni, { value, sandbox, lastUsed: had?.lastUsed ?? Date.now() });
    else this.engines.delete(sni);
    const map = this.opts.files.engineMap;
    void this.writes.enqueue((api) => (value ? api.putMapEntry(map, sni, value) : api.deleteMapEntry(map, sni)));
  }

  /** A shell name resolved (`sandbox` running at `address`, or not running: null). */
  shellResolved(sandbox: string, address: string | null, shellPort: number): void {
    const sni = `${sandbox}-shell-tcp.${this.opts.domain}`;
    const value = address && !this.isDraining(sandbox) ? `${sandbox}|${address}|${shellPort}|shell` : null;
    this.tunnel(sni, { kind: 'shell', name: sandbox, sandbox }, value);
  }

  /** A TCP twin name `<label>-tcp` resolved (null: unknown). */
  tcpResolved(label: string, r: ResolvedApp | null): void {
    const sni = `${label}-tcp.${this.opts.domain}`;
    const t = r?.status === 'running' && !isPrivate(r) ? r.target : undefined;
    const value = t && !t.loopbackOnly && !this.isDraining(t.sandbox) ? `${t.sandbox}|${t.host}|${t.port}|tcp` : null;
    this.tunnel(sni, { kind: 'tcp', name: label, sandbox: r?.sandbox ?? '' }, value);
  }

  private tunnel(sni: string, t: MirroredTunnel & { sandbox: string }, value: string | null): void {
    const had = this.tunnels.get(sni);
    if (value === (had?.value ?? null)) return;
    if (value) this.tunnels.set(sni, { ...t, value, lastUsed: had?.lastUsed ?? Date.now() });
    else this.tunnels.delete(sni);
    void this.writes.enqueue((api) => (value ? this.writeTunnel(api, sni, value) : api.deleteMapEntry(this.opts.files.tunnelsMap, sni)));
  }

  /** Traffic HAProxy carried keeps a sandbox's routes in the maps. */
  used(sandbox: string): void {
    const now = Date.now();
    for (const m of this.apps.values()) if (m.sandbox === sandbox) m.lastUsed = now;
    for (const m of this.engines.values()) if (m.sandbox === sandbox) m.lastUsed = now;
    for (const m of this.tunnels.values()) if (m.sandbox === sandbox) m.lastUsed = now;
  }

  /**
   * Where HAProxy sends engines, shells and TCP twins now, keyed by `socketTarget(address, port)`:
   * one index per activity reading (a Map lookup per socket, not a scan of the routes).
   */
  socketTargets(enginePort: number): Map<string, { sandbox: string; kind: 'engine' | 'shell' | 'tcp' }> {
    const targets = new Map<string, { sandbox: string; kind: 'engine' | 'shell' | 'tcp' }>();
    for (const m of this.tunnels.values()) {
      const [, address, port] = m.value.split('|');
      targets.set(socketTarget(address!, Number(port)), { sandbox: m.sandbox, kind: m.kind });
    }
    for (const m of this.engines.values()) targets.set(socketTarget(m.value, enginePort), { sandbox: m.sandbox, kind: 'engine' });
    return targets;
  }

  /** A (re)started HAProxy has empty maps: every route is written again. */
  async attach(api: RuntimeApi): Promise<void> {
    for (const [host, m] of this.apps) await this.writeApp(api, host, m.value);
    for (const [sni, m] of this.engines) await api.putMapEntry(this.opts.files.engineMap, sni, m.value);
    for (const [sni, m] of this.tunnels) await this.writeTunnel(api, sni, m.value);
  }

  /**
   * Resolves the routes of `sandbox` (of every sandbox without one) again from the backend, and the
   * maps follow; routes without traffic for UNUSED_ROUTE_MS leave. Passes run one at a time (an
   * older answer never lands after a newer one); asked during a pass, the sandbox's turn comes after it.
   */
  recheck(sandbox?: string): Promise<void> {
    if (sandbox === undefined) this.pending = 'all';
    else if (this.pending !== 'all') {
      this.pending ??= new Set();
      this.pending.add(sandbox);
    }
    if (this.checking) return Promise.resolve();
    this.checking = true;
    return (async () => {
      try {
        while (this.pending) {
          const only = this.pending === 'all' ? undefined : this.pending;
          this.pending = null;
          await this.pass(only);
        }
      } finally {
        this.checking = false;
      }
    })();
  }

  private async pass(only: Set<string> | undefined): Promise<void> {
    const stale = Date.now() - UNUSED_ROUTE_MS;
    const of = (m: Mirrored) => !only || only.has(m.sandbox);
    for (const m of [...this.apps.values()].filter(of)) {
      if (m.lastUsed < stale) this.app(m.label, null);
      else this.app(m.label, await this.backend.resolveApp(m.label).catch(() => null));
    }
    for (const m of [...this.engines.values()].filter(of)) {
      if (m.lastUsed < stale) this.engine(m.sandbox, null);
      else this.engine(m.sandbox, await this.backend.resolveSandbox(m.sandbox).catch(() => null));
    }
    for (const [sni, m] of [...this.tunnels].filter(([, t]) => of(t))) {
      if (m.lastUsed < stale) this.tunnel(sni, m, null);
      else if (m.kind === 'tcp') this.tcpResolved(m.name, await this.backend.resolveApp(m.name).catch(() => null));
      else {
        const sb = await this.backend.resolveSandbox(m.name).catch(() => null);
        this.shellResolved(m.name, sb?.status === 'running' && sb.address ? sb.address : null, Number(m.value.split('|')[2]));
      }
    }
  }

  private async writeTunnel(api: RuntimeApi, sni: string, value: string): Promise<void> {
    if (!(await this.certificates.load(sni))) {
      if (this.tunnels.get(sni)?.value === value) this.tunnels.delete(sni); // Node ends its TLS meanwhile
      return;
    }
    if (this.tunnels.get(sni)?.value === value) await api.putMapEntry(this.opts.files.tunnelsMap, sni, value);
  }

  private async writeApp(api: RuntimeApi, host: string, value: string): Promise<void> {
    if (!(await this.certificates.load(host))) {
      // no certificate of its own (issuing refused or failed): Node serves it and asks again
      if (this.apps.get(host)?.value === value) this.apps.delete(host);
      return;
    }
    // the route may have gone while the certificate loaded
    if (this.apps.get(host)?.value === value) await api.putMapEntry(this.opts.files.appsMap, host, value);
  }
}

/** A socket's peer as `ss` filters (`dst`) and prints it: `[address]:port` for IPv6. */
export function socketTarget(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}
