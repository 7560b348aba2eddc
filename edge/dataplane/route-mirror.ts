import type { Logger } from '../../core/logger.ts';
import type { EdgeBackend, ResolvedApp, ResolvedSandbox, WakeUnderWay } from '../backend.ts';
import type { EdgeCertificates } from '../certs/edge-certificates.ts';
import { EngineProofs } from './engine-proofs.ts';
import { HaproxyCertificates } from './haproxy-certificates.ts';
import type { DataPlaneFiles } from './haproxy-config.ts';
import { NodeTunnels } from './node-tunnels.ts';
import { RouteMaps } from './route-maps.ts';
import type { RuntimeApi } from './runtime-api.ts';
import { RuntimeWrites } from './runtime-writes.ts';

/**
 * The control plane of the data plane's routes, in Traefik's terms the configuration watcher: it
 * wraps the edge's backend, and whenever Node's edge resolves a name to a running app or engine
 * (the first connection to it goes through Node) the route goes into HAProxy's maps (RouteMaps), so
 * the next connections go straight from HAProxy to the sandbox. The backend's notices move the maps:
 * a sleep (onSleeping) takes the sandbox's routes out at once, a change (onChanged) has them resolved
 * again. A slow pass (`recheckMs`, every 1 s by default) resolves every route again, for what nobody
 * tells: a sandbox stopped behind the service's back, which only the runtime's engine events see
 * and the backend learns when its memory of a running state ends (after 1 s,
 * lifecycle/edge-backend.ts: a pass more often would read the same answers again); a notice lost
 * on its way between processes; and routes left unused (UNUSED_ROUTE_MS). Its parts: the maps, the certificates
 * HAProxy serves (HaproxyCertificates), Node's tunnels in HAProxy's caps (NodeTunnels) and the
 * engines' proofs (EngineProofs), all written through one queue of Runtime API calls (RuntimeWrites).
 */
export class RouteMirror implements EdgeBackend {
  readonly certificates: HaproxyCertificates;
  readonly tunnels: NodeTunnels;
  readonly engineProofs: EngineProofs;
  /** Node's edge tells these what it resolved besides its backend's answers (an app answered, a shell or TCP twin name). */
  readonly maps: RouteMaps;
  private readonly writes: RuntimeWrites;
  private readonly timer: NodeJS.Timeout;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(
    private readonly inner: EdgeBackend,
    opts: {
      domain: string;
      files: DataPlaneFiles;
      certificates: EdgeCertificates;
      logger: Logger;
      /** Names HAProxy ends TLS for whatever the routes (the registry): their certificates are loaded at each start. */
      fixedNames?: string[];
      /** How often every route is resolved again without a notice (EdgeTimeouts.routeRecheckMs). */
      recheckMs: number;
    },
  ) {
    this.writes = new RuntimeWrites(opts.logger);
    this.certificates = new HaproxyCertificates(this.writes, opts);
    this.tunnels = new NodeTunnels(this.writes);
    this.engineProofs = new EngineProofs(this.writes);
    this.maps = new RouteMaps(inner, this.writes, this.certificates, this.engineProofs, opts);
    this.timer = setInterval(() => void this.maps.recheck(), opts.recheckMs).unref();
    const sleeping = inner.onSleeping?.((sandbox) => this.maps.sleeping(sandbox));
    const changed = inner.onChanged?.((sandbox) => void this.maps.recheck(sandbox));
    for (const off of [sleeping, changed]) if (off) this.unsubscribe.push(off);
  }

  async resolveApp(label: string, o?: { fresh?: boolean }): Promise<ResolvedApp | null> {
    const r = await this.inner.resolveApp(label, o);
    this.maps.app(label, r);
    return r;
  }

  async resolveSandbox(name: string): Promise<ResolvedSandbox | null> {
    const r = await this.inner.resolveSandbox(name);
    this.maps.engine(name, r);
    return r;
  }

  requestWake(sandbox: string): Promise<WakeUnderWay> {
    return this.inner.requestWake(sandbox);
  }

  recordActivity(sandbox: string): void {
    this.inner.recordActivity(sandbox);
  }

  /**
   * Node proved a client of this sandbox's engine (TlsProof) after `flightBytes` from dockerd:
   * that client's engine connections may go through HAProxy, and with the sandbox's first proof its
   * engine route goes into the map.
   */
  engineProven(sandbox: string, flightBytes: number, client: string): void {
    if (this.engineProofs.proven(sandbox, flightBytes, client)) void this.resolveSandbox(sandbox).catch(() => undefined);
  }

  /** A (re)started HAProxy: every mirrored route, certificate and count is written again. */
  async attach(api: RuntimeApi): Promise<void> {
    this.writes.api = api;
    await this.certificates.attach();
    await this.maps.attach(api);
    await this.tunnels.attach(api);
  }

  close(): void {
    clearInterval(this.timer);
    this.certificates.close();
    for (const off of this.unsubscribe) off();
  }
}
