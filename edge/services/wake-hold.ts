import net from 'node:net';
import type { AppRoute, EdgeBackend } from '../backend.ts';

/** How often a held request's sandbox is looked up afresh while it wakes (an engine inspect). */
const LOOK_EVERY_MS = 100;
/**
 * How often its app is tried (a TCP connect) once its address is known: a try costs a SYN, not an
 * inspect, and a held request is answered on average half this after the app accepts.
 */
const TRY_EVERY_MS = 25;
/**
 * A connection attempt to the app while it may still be starting. While the inner engine brings the
 * app's container up, its port rule can already send a SYN to a container that is not there yet:
 * nothing answers and the SYN is sent again only after a second. So a try never waits for the one
 * before it: a new attempt goes out every TRY_EVERY_MS, and the first that connects wins.
 */
const PROBE_TIMEOUT_MS = 1_000;

/**
 * Holds app requests while their sandbox wakes: a wake of about a second is answered by the app
 * itself, and nobody sees the waiting page. All requests for one address share one look-out (a
 * fresh state every LOOK_EVERY_MS, a TCP connect to the app every TRY_EVERY_MS), which ends once the
 * app accepts a connection, the address disappears, or no request waits any more; each request gives
 * up after `holdMs` of its own and gets the waiting page (spec 7) instead.
 */
export class WakeHold {
  private readonly lookouts = new Map<string, { waiting: number; ready: Promise<AppRoute | null> }>();

  constructor(
    private readonly backend: Pick<EdgeBackend, 'resolveApp'>,
    readonly holdMs: number,
  ) {}

  /** The app's route once it accepts connections, or null after `holdMs` (or when it has none). */
  async hold(label: string): Promise<AppRoute | null> {
    if (this.holdMs <= 0) return null;
    let lookout = this.lookouts.get(label);
    if (!lookout) {
      const fresh = { waiting: 0, ready: Promise.resolve<AppRoute | null>(null) };
      fresh.ready = this.lookOut(label, fresh).finally(() => this.lookouts.delete(label));
      this.lookouts.set(label, fresh);
      lookout = fresh;
    }
    lookout.waiting++;
    let timer: NodeJS.Timeout | undefined;
    const givenUp = new Promise<null>((resolve) => { timer = setTimeout(() => resolve(null), this.holdMs); });
    try {
      return await Promise.race([lookout.ready, givenUp]);
    } finally {
      clearTimeout(timer);
      lookout.waiting--;
    }
  }

  private async lookOut(label: string, lookout: { waiting: number }): Promise<AppRoute | null> {
    let connected: AppRoute | undefined;
    let onConnect: () => void = () => undefined;
    const won = new Promise<void>((resolve) => { onConnect = resolve; });
    let target: AppRoute | undefined;
    let lookedAt = 0;
    for (;;) {
      if (Date.now() - lookedAt >= LOOK_EVERY_MS) {
        lookedAt = Date.now();
        const app = await this.backend.resolveApp(label, { fresh: true }).catch(() => undefined);
        if (connected) return connected;
        if (app === null) return null;
        target = app?.status === 'running' && app.target && !app.target.loopbackOnly ? app.target : undefined;
      }
      // not awaited: at most PROBE_TIMEOUT_MS / TRY_EVERY_MS attempts are in flight per address
      const tried = target;
      if (tried) void accepts(tried).then((ok) => { if (ok && !connected) { connected = tried; onConnect(); } });
      await Promise.race([won, new Promise((r) => setTimeout(r, TRY_EVERY_MS))]);
      if (connected) return connected;
      if (lookout.waiting === 0) return null;
    }
  }
}

/** Whether the app accepts a TCP connection now. */
function accepts(target: AppRoute): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: target.host, port: target.port, timeout: PROBE_TIMEOUT_MS });
    const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}
