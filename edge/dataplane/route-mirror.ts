import fs from 'node:fs/promises';
import type { Logger } from '../../core/logger.ts';
import type { AppRoute, EdgeBackend, ResolvedApp, ResolvedSandbox, WakeUnderWay } from '../backend.ts';
import type { EdgeCertificates } from '../certs/edge-certificates.ts';
import { ENGINE_CLIENTS, ENGINE_TABLE, SANDBOX_TUNNELS, type DataPlaneFiles } from './haproxy-config.ts';
import type { RuntimeApi } from './runtime-api.ts';

/** How often every mirrored route is looked up again: a route change reaches HAProxy within this. */
export const REVALIDATE_MS = 100;
/**
 * A sandbox going to sleep stays off the maps this long: its container is still stopping, and
 * Node (which asks the backend per request and again when an address refuses) serves it meanwhile.
 */
export const SLEEP_DRAIN_MS = 15_000;
/** A route without traffic for this long leaves the maps (its next connection goes through Node, which puts it back). */
export const UNUSED_ROUTE_MS = 5 * 60_000;
/**
 * How often the certificates HAProxy serves are compared with the edge's: as often as the edge
 * itself looks at the operator's files and its renewals (edge/certs/edge-certificates.ts).
 */
export const CERT_REFRESH_MS = 60_000;

/** An app whose `tunnel.visibility` is not public: never in HAProxy's maps. */
function isPrivate(r: ResolvedApp): boolean {
  const v = r.visibility ?? r.target?.visibility;
  return v !== undefined && v !== 'public';
}

/** A shell (`<sb>-shell-tcp`) or TCP twin (`<label>-tcp`) name whose TLS HAProxy ends, then raw TCP to the sandbox. */
interface MirroredTunnel {
  kind: 'shell' | 'tcp';
  /** The sandbox (shell) or the app label (tcp) it is resolved by. */
  name: string;
}

interface Mirrored {
  /** The map value now in HAProxy (or being written). */
  value: string;
  lastUsed: number;
}

/**
 * The control plane of the data plane's routes. It wraps the edge's backend: whenever Node's edge
 * resolves a name to a running app or engine (the first connection to it goes through Node), the
 * route is written into HAProxy's maps, so the next connections go straight from HAProxy to the
 * sandbox. Every REVALIDATE_MS each mirrored route is resolved again from the backend's memory and
 * the maps follow (a sleep removes it; HAProxy then sends the name to Node: waiting page, wake,
 * reset). Routes of sandboxes without traffic are dropped after UNUSED_ROUTE_MS, so the backend is
 * not asked about sandboxes nobody uses.
 *
 * Only values Node resolved are ever written (`set-dst` takes nothing from the client), and an
 * app whose certificate HAProxy does not have stays on Node. An app route is written once its app
 * answered a request through Node at that address (appAnswered): while a sandbox wakes, its app's
 * port may accept and drop connections before the app listens, and Node holds and retries those
 * requests where HAProxy would answer 502.
 */
export class RouteMirror implements EdgeBackend {
  private readonly apps = new Map<string, Mirrored & { label: string; sandbox: string }>();
  private readonly engines = new Map<string, Mirrored & { sandbox: string }>();
  /** Apps that answered through Node: host → the map value (address) they answered at. */
  private readonly answered = new Map<string, string>();
  /** Shell and TCP twin names: SNI → route (`<sandbox>|<address>|<port>|<kind>`). */
  private readonly tunnels = new Map<string, Mirrored & MirroredTunnel & { sandbox: string }>();
  /** Carried tunnels Node holds, per sandbox (HAProxy adds them to its count). */
  private readonly nodeTunnels = new Map<string, number>();
  /** Of those, shells and TCP twins (their share of the sandbox's places). */
  private readonly nodeShells = new Map<string, number>();
  /** Per-name certificates loaded into HAProxy: host → the PEM it has. */
  private readonly certsLoaded = new Map<string, string>();
  /** The default certificate's PEM as HAProxy has it (and as its file holds it for a restart). */
  private defaultPem: string | null = null;
  /** Per sandbox, what its dockerd sends before it accepted a client (measured by Node's TlsProof). */
  private readonly engineFlights = new Map<string, number>();
  private api: RuntimeApi | null = null;
  private readonly timer: NodeJS.Timeout;
  private readonly certTimer: NodeJS.Timeout;
  private revalidating = false;
  /** Sandboxes going to sleep → until when their routes stay off the maps. */
  private readonly draining = new Map<string, number>();
  private readonly unsubscribe: (() => void) | undefined;
  private writes: Promise<void> = Promise.resolve();

  constructor(
    private readonly inner: EdgeBackend,
    private readonly opts: {
      domain: string;
      files: DataPlaneFiles;
      certificates: EdgeCertificates;
      logger: Logger;
      /** Names HAProxy ends TLS for whatever the routes (the registry): their certificates are loaded at each start. */
      fixedNames?: string[];
    },
  ) {
    this.timer = setInterval(() => void this.revalidate(), REVALIDATE_MS).unref();
    this.certTimer = setInterval(() => this.enqueue(() => this.refreshCertificates()), CERT_REFRESH_MS).unref();
    this.unsubscribe = inner.onSleeping?.((sandbox) => this.sleeping(sandbox));
  }

  /** The backend says the sandbox is going to sleep: its routes leave the maps now, not at the next check. */
  private sleeping(sandbox: string): void {
    this.draining.set(sandbox, Date.now() + SLEEP_DRAIN_MS);
    for (const m of [...this.apps.values()]) if (m.sandbox === sandbox) this.observeApp(m.label, null);
    for (const m of [...this.engines.values()]) if (m.sandbox === sandbox) this.observeEngine(sandbox, null);
    for (const [sni, m] of [...this.tunnels]) if (m.sandbox === sandbox) this.observeTunnel(sni, m, null);
  }

  private isDraining(sandbox: string): boolean {
    const until = this.draining.get(sandbox);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.draining.delete(sandbox);
    return false;
  }

  async resolveApp(label: string, o?: { fresh?: boolean }): Promise<ResolvedApp | null> {
    const r = await this.inner.resolveApp(label, o);
    this.observeApp(label, r);
    return r;
  }

  async resolveSandbox(name: string): Promise<ResolvedSandbox | null> {
    const r = await this.inner.resolveSandbox(name);
    this.observeEngine(name, r);
    return r;
  }

  requestWake(sandbox: string): Promise<WakeUnderWay> {
    return this.inner.requestWake(sandbox);
  }

  recordActivity(sandbox: string): void {
    this.inner.recordActivity(sandbox);
  }

  /** Traffic seen by the activity poller keeps a sandbox's routes in the maps. */
  used(sandbox: string): void {
    const now = Date.now();
    for (const m of this.apps.values()) if (m.sandbox === sandbox) m.lastUsed = now;
    for (const m of this.engines.values()) if (m.sandbox === sandbox) m.lastUsed = now;
    for (const m of this.tunnels.values()) if (m.sandbox === sandbox) m.lastUsed = now;
  }

  /** Node got an answer from the app at `target`: from now on HAProxy may serve it there. */
  appAnswered(label: string, target: AppRoute): void {
    const host = `${label}.${this.opts.domain}`;
    const value = `${target.sandbox}|${target.host}|${target.port}`;
    if (this.answered.get(host) === value) return;
    this.answered.set(host, value);
    this.observeApp(label, { sandbox: target.sandbox, status: 'running', target });
  }

  /**
   * Node resolved a shell name (`sandbox` running at `address`, or not running: null): the next
   * connections go through HAProxy while it runs there.
   */
  shellResolved(sandbox: string, address: string | null, shellPort: number): void {
    const sni = `${sandbox}-shell-tcp.${this.opts.domain}`;
    const value = address && !this.isDraining(sandbox) ? `${sandbox}|${address}|${shellPort}|shell` : null;
    this.observeTunnel(sni, { kind: 'shell', name: sandbox, sandbox }, value);
  }

  /** Node resolved a TCP twin name `<label>-tcp` (null: unknown). */
  tcpResolved(label: string, r: ResolvedApp | null): void {
    const sni = `${label}-tcp.${this.opts.domain}`;
    const t = r?.status === 'running' && !isPrivate(r) ? r.target : undefined;
    const value = t && !t.loopbackOnly && !this.isDraining(t.sandbox) ? `${t.sandbox}|${t.host}|${t.port}|tcp` : null;
    this.observeTunnel(sni, { kind: 'tcp', name: label, sandbox: r?.sandbox ?? '' }, value);
  }

  /**
   * A tunnel Node carries from now on (its TLS ended, or dockerd accepted its client): its place is
   * taken in HAProxy's count of the sandbox's tunnels (gpc0 of its entry, which HAProxy adds to the
   * tunnels it carries itself; a shell's or TCP twin's (`shell`) in gpc1 too, for their share), so
   * the caps hold for both processes together.
   * Returns the release, or null when the sandbox already has its tunnels (or shells) at the cap.
   */
  async admitNodeTunnel(sandbox: string, shell: boolean, caps: { tunnelsPerSandbox: number; shellTunnelsPerSandbox: number }): Promise<(() => void) | null> {
    // taken before HAProxy is asked: two connections admitted at once both see each other
    const add = (counts: Map<string, number>, n: number) => {
      const left = (counts.get(sandbox) ?? 0) + n;
      if (left > 0) counts.set(sandbox, left);
      else counts.delete(sandbox);
    };
    add(this.nodeTunnels, 1);
    if (shell) add(this.nodeShells, 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      add(this.nodeTunnels, -1);
      if (shell) add(this.nodeShells, -1);
      this.enqueue(() => this.writeNodeTunnels(sandbox));
    };
    const carried = async (table: string) => (await this.api?.tableEntry(table, sandbox).catch(() => undefined))?.conn_cur ?? 0;
    const shells = await carried(SANDBOX_TUNNELS);
    const all = shells + (await carried(ENGINE_TABLE)) + (this.nodeTunnels.get(sandbox) ?? 0);
    if (all > caps.tunnelsPerSandbox || (shell && shells + (this.nodeShells.get(sandbox) ?? 0) > caps.shellTunnelsPerSandbox)) {
      release();
      return null;
    }
    // in HAProxy's count before the tunnel carries a byte: else a connection HAProxy takes meanwhile
    // (the name just put in its map) would not see this one, and the cap let one more through
    await this.enqueue(() => this.writeNodeTunnels(sandbox));
    return release;
  }

  private async writeNodeTunnels(sandbox: string): Promise<void> {
    await this.api!.setTableData(SANDBOX_TUNNELS, sandbox, 'gpc0', this.nodeTunnels.get(sandbox) ?? 0);
    await this.api!.setTableData(SANDBOX_TUNNELS, sandbox, 'gpc1', this.nodeShells.get(sandbox) ?? 0);
  }

  /**
   * Node proved a client of this sandbox's engine (TlsProof) after `flightBytes` from dockerd:
   * from now on that client address's engine connections may go through HAProxy (carried from
   * the start), whose bytes count past that flight. A restarted HAProxy has forgotten the
   * addresses: each one's next connection goes through Node again.
   */
  engineProven(sandbox: string, flightBytes: number, client: string): void {
    this.enqueue(() => this.api!.setTableData(ENGINE_CLIENTS, `${client}|${sandbox}`, 'gpt0', 1));
    if (this.engineFlights.has(sandbox)) return;
    this.engineFlights.set(sandbox, flightBytes);
    void this.resolveSandbox(sandbox).catch(() => undefined);
  }

  /**
   * Bytes from dockerd past which an engine connection through HAProxy counts: its handshake
   * flight plus 1 KiB (a refused client gets the flight, maybe a HelloRetryRequest, and an alert;
   * a flight of the other TLS version differs by a few hundred bytes).
   */
  engineProofBytes(sandbox: string): number {
    return (this.engineFlights.get(sandbox) ?? Infinity) + 1024; // never without a measured flight
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

  /** A (re)started HAProxy: every mirrored route and certificate is written again. */
  async attach(api: RuntimeApi): Promise<void> {
    this.api = api;
    this.certsLoaded.clear();
    for (const name of this.opts.fixedNames ?? []) await this.loadCertificate(name);
    for (const [host, m] of this.apps) await this.writeApp(host, m.value);
    for (const [sni, m] of this.engines) await api.putMapEntry(this.opts.files.engineMap, sni, m.value);
    for (const [sni, m] of this.tunnels) await this.writeTunnel(sni, m.value);
    for (const sandbox of this.nodeTunnels.keys()) await this.writeNodeTunnels(sandbox);
  }

  /** Writes the default certificate's file, which HAProxy reads at each (re)start. */
  async writeDefaultCertificate(): Promise<void> {
    const pem = await this.opts.certificates.pemFor(null);
    if (!pem) throw new Error('data plane: the edge has no default certificate');
    await fs.writeFile(this.opts.files.defaultCert, pem, { mode: 0o600 });
    this.defaultPem = pem;
  }

  /**
   * Certificates the edge replaced since HAProxy loaded them (the operator's files changed, the
   * domain certificate renewed, a per-name one reissued after 7 days) are swapped in HAProxy too.
   */
  async refreshCertificates(): Promise<void> {
    const api = this.api;
    if (!api) return;
    const pem = await this.opts.certificates.pemFor(null);
    if (pem && pem !== this.defaultPem) {
      await this.writeDefaultCertificate();
      await api.replaceCertificate(this.opts.files.defaultCert, pem);
      this.opts.logger.info('data plane: HAProxy serves the renewed default certificate');
    }
    for (const [host, had] of [...this.certsLoaded]) {
      const now = await this.opts.certificates.pemFor(host);
      if (!now || now === had) continue; // none now (issue refused): the one loaded stays until it can be renewed
      await api.replaceCertificate(`/${host}.pem`, now);
      this.certsLoaded.set(host, now);
    }
  }

  close(): void {
    clearInterval(this.timer);
    clearInterval(this.certTimer);
    this.unsubscribe?.();
  }

  private observeApp(label: string, r: ResolvedApp | null): void {
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
    this.enqueue(() => (value ? this.writeApp(host, value) : this.api!.deleteMapEntry(this.opts.files.appsMap, host)));
  }

  private observeEngine(sandbox: string, r: ResolvedSandbox | null): void {
    const sni = `${sandbox}-engine.${this.opts.domain}`;
    // only after a client was proven through Node: the flight it measured is HAProxy's proof
    const value = r?.status === 'running' && r.address && !this.isDraining(sandbox) && this.engineFlights.has(sandbox) ? r.address : null;
    const had = this.engines.get(sni);
    if (value === (had?.value ?? null)) return;
    if (value) this.engines.set(sni, { value, sandbox, lastUsed: had?.lastUsed ?? Date.now() });
    else this.engines.delete(sni);
    const map = this.opts.files.engineMap;
    this.enqueue(() => (value ? this.api!.putMapEntry(map, sni, value) : this.api!.deleteMapEntry(map, sni)));
  }

  private observeTunnel(sni: string, t: MirroredTunnel & { sandbox: string }, value: string | null): void {
    const had = this.tunnels.get(sni);
    if (value === (had?.value ?? null)) return;
    if (value) this.tunnels.set(sni, { ...t, value, lastUsed: had?.lastUsed ?? Date.now() });
    else this.tunnels.delete(sni);
    this.enqueue(() => (value ? this.writeTunnel(sni, value) : this.api!.deleteMapEntry(this.opts.files.tunnelsMap, sni)));
  }

  private async writeTunnel(sni: string, value: string): Promise<void> {
    if (!(await this.loadCertificate(sni))) {
      if (this.tunnels.get(sni)?.value === value) this.tunnels.delete(sni); // Node ends its TLS meanwhile
      return;
    }
    if (this.tunnels.get(sni)?.value === value) await this.api!.putMapEntry(this.opts.files.tunnelsMap, sni, value);
  }

  /** Loads a per-name certificate into HAProxy (the default one covers every name otherwise); false when there is none. */
  private async loadCertificate(host: string): Promise<boolean> {
    if (this.opts.certificates.mode !== 'per-name' || this.certsLoaded.has(host)) return true;
    const pem = await this.opts.certificates.pemFor(host);
    if (!pem) return false;
    await this.api!.addCertificate(`/${host}.pem`, pem, this.opts.files.crtList, host);
    this.certsLoaded.set(host, pem);
    return true;
  }

  private async writeApp(host: string, value: string): Promise<void> {
    if (!(await this.loadCertificate(host))) {
      // no certificate of its own (issuing refused or failed): Node serves it and asks again
      if (this.apps.get(host)?.value === value) this.apps.delete(host);
      return;
    }
    // the route may have gone while the certificate loaded
    if (this.apps.get(host)?.value === value) await this.api!.putMapEntry(this.opts.files.appsMap, host, value);
  }

  /** Map writes in order (a remove never overtakes the add before it); resolves once `write` ran (a failure is logged). */
  private enqueue(write: () => Promise<void>): Promise<void> {
    if (!this.api) return Promise.resolve(); // attach() writes everything
    this.writes = this.writes.then(write).catch((err) => this.opts.logger.warn({ err }, 'data plane: a route write failed'));
    return this.writes;
  }

  private async revalidate(): Promise<void> {
    if (this.revalidating) return;
    this.revalidating = true;
    try {
      const stale = Date.now() - UNUSED_ROUTE_MS;
      for (const m of [...this.apps.values()]) {
        if (m.lastUsed < stale) this.observeApp(m.label, null);
        else this.observeApp(m.label, await this.inner.resolveApp(m.label).catch(() => null));
      }
      for (const m of [...this.engines.values()]) {
        if (m.lastUsed < stale) this.observeEngine(m.sandbox, null);
        else this.observeEngine(m.sandbox, await this.inner.resolveSandbox(m.sandbox).catch(() => null));
      }
      for (const [sni, m] of [...this.tunnels]) {
        if (m.lastUsed < stale) this.observeTunnel(sni, m, null);
        else if (m.kind === 'tcp') this.tcpResolved(m.name, await this.inner.resolveApp(m.name).catch(() => null));
        else {
          const sb = await this.inner.resolveSandbox(m.name).catch(() => null);
          this.shellResolved(m.name, sb?.status === 'running' && sb.address ? sb.address : null, Number(m.value.split('|')[2]));
        }
      }
    } finally {
      this.revalidating = false;
    }
  }
}

/** A socket's peer as `ss` filters (`dst`) and prints it: `[address]:port` for IPv6. */
export function socketTarget(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}
