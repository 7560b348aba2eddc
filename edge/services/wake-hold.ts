import net from 'node:net';
import type { AppRoute, EdgeBackend } from '../backend.ts';

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

/** One look-out per app address, shared by the requests held for it. */
interface Lookout {
  waiting: number;
  /** Resolves once no request waits any more (each gave up after its hold). */
  deserted: Promise<void>;
  desert(): void;
  ready: Promise<AppRoute | null>;
}

/**
 * Holds app requests while their sandbox wakes: a wake of about a second is answered by the app
 * itself, and nobody sees the waiting page. All requests for one address share one look-out. It
 * asks nothing while the sandbox wakes: the wake says when the sandbox runs (`running`, from the
 * backend's requestWake), then the app's address is looked up once (from the backend's memory,
 * which the wake filled) and tried with a TCP connect every TRY_EVERY_MS until the app accepts. The
 * look-out ends then, when the address disappears, or when no request waits any more; each request
 * gives up after `holdMs` of its own and gets the waiting page (spec 7) instead.
 */
export class WakeHold {
  private readonly lookouts = new Map<string, Lookout>();

  constructor(
    private readonly backend: Pick<EdgeBackend, 'resolveApp'>,
    readonly holdMs: number,
  ) {}

  /**
   * The app's route once it accepts connections, or null after `holdMs` (or when it has none).
   * `running`: the wake under way, which settles once the sandbox runs; without one the sandbox runs
   * already and its app is starting (its address is then looked up afresh).
   */
  async hold(label: string, running?: Promise<unknown>): Promise<AppRoute | null> {
    if (this.holdMs <= 0) return null;
    let lookout = this.lookouts.get(label);
    if (!lookout) {
      let desert = () => undefined as void;
      const deserted = new Promise<void>((resolve) => { desert = resolve; });
      const fresh: Lookout = { waiting: 0, deserted, desert, ready: Promise.resolve(null) };
      fresh.ready = this.lookOut(label, fresh, running).finally(() => this.lookouts.delete(label));
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
      if (--lookout.waiting === 0) lookout.desert();
    }
  }

  private async lookOut(label: string, lookout: Lookout, running: Promise<unknown> | undefined): Promise<AppRoute | null> {
    if (running) {
      const ran = await Promise.race([running.then(() => true, () => false), lookout.deserted.then(() => false)]);
      if (!ran && lookout.waiting === 0) return null;
    }
    // after the wake, what it told the backend; without a wake, the sandbox's state as its engine has it now
    const app = await this.backend.resolveApp(label, { fresh: !running }).catch(() => undefined);
    const target = app?.status === 'running' && app.target && !app.target.loopbackOnly ? app.target : undefined;
    if (!target) return null;
    let connected: AppRoute | undefined;
    let onConnect: () => void = () => undefined;
    const won = new Promise<void>((resolve) => { onConnect = resolve; });
    while (lookout.waiting > 0) {
      // not awaited: at most PROBE_TIMEOUT_MS / TRY_EVERY_MS attempts are in flight per address
      void accepts(target).then((ok) => { if (ok && !connected) { connected = target; onConnect(); } });
      await Promise.race([won, lookout.deserted, new Promise((r) => setTimeout(r, TRY_EVERY_MS))]);
      if (connected) return connected;
    }
    return null;
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
