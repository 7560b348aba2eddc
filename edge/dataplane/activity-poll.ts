import { execFile } from 'node:child_process';
import type { Logger } from '../../core/logger.ts';
import type { EdgeBackend } from '../backend.ts';
import { APP_TABLE, ENGINE_TABLE } from './haproxy-config.ts';
import type { RouteMirror } from './route-mirror.ts';
import type { RuntimeApi } from './runtime-api.ts';

/** Activity is read from HAProxy once per this interval (the granularity docs/data-plane.md states). */
export const ACTIVITY_POLL_MS = 1_000;

/**
 * Turns what HAProxy moved into `recordActivity` calls, once per ACTIVITY_POLL_MS:
 * - apps: the per-sandbox stick table of the app backend (requests and bytes, `show table`);
 *   a sandbox whose counters moved had traffic.
 * - engines: bytes from dockerd count only past its handshake flight (as Node measured it on the
 *   first proven connection, RouteMirror.engineProofBytes): the proof that dockerd accepted the
 *   client certificate, which HAProxy cannot see (TLS is passed through). Live connections are read
 *   from the kernel's per-socket counters of HAProxy's sockets to dockerd (`ss -ti`), those that
 *   ended since the last poll from the engine stick table (endedConnectionsProven).
 */
export class DataPlaneActivity {
  private readonly appCounters = new Map<string, number>();
  private readonly engineReceived = new Map<string, number>();
  private readonly engineTotals = new Map<string, { started: number; open: number; sent: number }>();
  private readonly timer: NodeJS.Timeout;
  private polling = false;

  constructor(
    private readonly opts: {
      api: () => RuntimeApi | null;
      pid: () => number | undefined;
      mirror: RouteMirror;
      backend: EdgeBackend;
      domain: string;
      enginePort: number;
      logger: Logger;
    },
  ) {
    this.timer = setInterval(() => void this.poll(), ACTIVITY_POLL_MS).unref();
  }

  close(): void {
    clearInterval(this.timer);
  }

  async poll(): Promise<void> {
    const api = this.opts.api();
    if (!api || this.polling) return;
    this.polling = true;
    try {
      for (const [sandbox, c] of await api.table(APP_TABLE)) {
        const total = (c.http_req_cnt ?? 0) + (c.bytes_in_cnt ?? 0) + (c.bytes_out_cnt ?? 0);
        if (this.appCounters.get(sandbox) === total) continue;
        this.appCounters.set(sandbox, total);
        this.touch(sandbox);
      }
      const suffix = `-engine.${this.opts.domain}`;
      let tunnels = 0;
      for (const [sni, c] of await api.table(ENGINE_TABLE)) {
        if (!sni.endsWith(suffix)) continue;
        const sandbox = sni.slice(0, -suffix.length);
        if (this.endedConnectionsProven(sni, sandbox, c)) this.touch(sandbox);
        if (!c.conn_cur) continue;
        tunnels += c.conn_cur;
        this.opts.mirror.used(sandbox);
      }
      if (tunnels > 0) await this.pollEngineSockets();
      else this.engineReceived.clear();
    } catch (err) {
      this.opts.logger.debug({ err }, 'data plane: activity poll failed');
    } finally {
      this.polling = false;
    }
  }

  /**
   * Connections shorter than a poll (a `docker ps`) are gone before `ss` sees them: HAProxy adds
   * their bytes from dockerd to the table when they end. If the connections that ended since the
   * last poll got more than each one's proof threshold together, at least one of them got more
   * than its own: a proven client (refused ones each stay under it, however many there are).
   */
  private endedConnectionsProven(sni: string, sandbox: string, c: Record<string, number>): boolean {
    const now = { started: c.conn_cnt ?? 0, open: c.conn_cur ?? 0, sent: c.bytes_out_cnt ?? 0 };
    const before = this.engineTotals.get(sni);
    this.engineTotals.set(sni, now);
    if (!before) return false;
    const ended = now.started - before.started - (now.open - before.open);
    return ended > 0 && now.sent - before.sent > ended * this.opts.mirror.engineProofBytes(sandbox);
  }

  private touch(sandbox: string): void {
    this.opts.mirror.used(sandbox);
    this.opts.backend.recordActivity(sandbox);
  }

  private async pollEngineSockets(): Promise<void> {
    const pid = this.opts.pid();
    if (!pid) return;
    const out = await new Promise<string>((resolve, reject) =>
      execFile('ss', ['-tinpH', 'state', 'established', `( dport = :${this.opts.enginePort} )`], { maxBuffer: 16 * 1024 * 1024 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
    );
    const seen = new Map<string, number>();
    for (const s of parseSs(out)) {
      if (s.pid !== pid) continue;
      const sandbox = this.opts.mirror.engineSandboxAt(s.peerAddress);
      if (!sandbox || s.bytesReceived <= this.opts.mirror.engineProofBytes(sandbox)) continue;
      seen.set(s.key, s.bytesReceived);
      if (this.engineReceived.get(s.key) !== s.bytesReceived) this.touch(sandbox);
    }
    this.engineReceived.clear();
    for (const [k, v] of seen) this.engineReceived.set(k, v);
  }
}

export interface SocketCounters {
  key: string;
  peerAddress: string;
  pid: number | undefined;
  bytesReceived: number;
}

/** Parses `ss -tinpH` output: one socket per line, its tcp_info on the indented line after it. */
export function parseSs(out: string): SocketCounters[] {
  const sockets: SocketCounters[] = [];
  let current: SocketCounters | null = null;
  for (const line of out.split('\n')) {
    if (!line.trim()) continue;
    if (!/^\s/.test(line)) {
      // Recv-Q Send-Q Local:Port Peer:Port users:(("haproxy",pid=1,fd=2))
      const cols = line.trim().split(/\s+/);
      const peer = cols[3] ?? '';
      current = {
        key: `${cols[2]} ${peer}`,
        peerAddress: peer.replace(/:\d+$/, '').replace(/^\[|\]$/g, '').replace(/^::ffff:/, ''),
        pid: Number(/pid=(\d+)/.exec(line)?.[1]) || undefined,
        bytesReceived: 0,
      };
      sockets.push(current);
    }
    const received = /\bbytes_received:(\d+)/.exec(line);
    if (current && received) current.bytesReceived = Number(received[1]);
  }
  return sockets;
}
