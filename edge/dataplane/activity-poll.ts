import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import type { Logger } from '../../core/logger.ts';
import type { EdgeBackend } from '../backend.ts';
import { APP_TABLE, ENGINE_TABLE, SANDBOX_TUNNELS, TCP_TABLE } from './haproxy-config.ts';
import type { EngineProofs } from './engine-proofs.ts';
import { socketTarget, type RouteMaps } from './route-maps.ts';
import type { RuntimeApi } from './runtime-api.ts';

/** Activity is read from HAProxy once per this interval (the granularity docs/data-plane.md states). */
export const ACTIVITY_POLL_MS = 1_000;

/**
 * Turns what HAProxy moved into `recordActivity` calls, once per ACTIVITY_POLL_MS:
 * - apps: the per-sandbox stick table of the app backend (requests and bytes, `show table`);
 *   a sandbox whose counters moved had traffic.
 * - engines: bytes from dockerd count only past its handshake flight (as Node measured it on the
 *   first proven connection, EngineProofs.proofBytes): the proof that dockerd accepted the
 *   client certificate, which HAProxy cannot see (TLS is passed through). Live connections are read
 *   from the kernel's per-socket counters of HAProxy's sockets to dockerd (`ss -tie`), those that
 *   ended since the last poll from the engine stick table (endedConnectionsProven).
 * - TCP twins: their bytes count, from the kernel's counters of HAProxy's live sockets to the app and
 *   from their stick table (connections that ended).
 * - shells: bytes count once the connection is older than sshd's login grace (Node's rule, one that
 *   lived longer has signed in). HAProxy cannot time a connection's bytes, so the age is the kernel
 *   socket's to sshd as these polls saw it first (at most one poll after it opened): a shell counts
 *   from shellProofMs to one poll more of age, never earlier than through Node, and one shorter
 *   than a poll never.
 */
export class DataPlaneActivity {
  private readonly appCounters = new Map<string, number>();
  private readonly engineReceived = new Map<string, number>();
  /** Live shell and TCP twin sockets of HAProxy: bytes both ways at the last poll, and when first seen. */
  private readonly tunnelSockets = new Map<string, { moved: number; since: number }>();
  private readonly tcpCounters = new Map<string, number>();
  private readonly engineTotals = new Map<string, { started: number; open: number; sent: number }>();
  private readonly timer: NodeJS.Timeout;
  private polling = false;

  constructor(
    private readonly opts: {
      api: () => RuntimeApi | null;
      pid: () => number | undefined;
      /** The routes in HAProxy's maps: traffic keeps them there, and tells whose sockets are whose. */
      maps: RouteMaps;
      engineProofs: EngineProofs;
      backend: EdgeBackend;
      enginePort: number;
      /** A shell's bytes count once it is this old (sshd's login grace). */
      shellProofMs: number;
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
      for (const [sandbox, c] of await api.table(TCP_TABLE)) {
        const total = (c.conn_cnt ?? 0) + (c.bytes_in_cnt ?? 0) + (c.bytes_out_cnt ?? 0);
        if (this.tcpCounters.get(sandbox) === total) continue;
        this.tcpCounters.set(sandbox, total);
        this.touch(sandbox);
      }
      let tunnels = 0;
      for (const [sandbox, c] of await api.table(ENGINE_TABLE)) {
        if (this.endedConnectionsProven(sandbox, c)) this.touch(sandbox);
        if (!c.conn_cur) continue;
        tunnels += c.conn_cur;
        this.opts.maps.used(sandbox);
      }
      for (const [sandbox, c] of await api.table(SANDBOX_TUNNELS)) {
        if (!c.conn_cur) continue;
        tunnels += c.conn_cur;
        this.opts.maps.used(sandbox);
      }
      if (tunnels > 0) await this.pollTunnelSockets();
      else {
        this.engineReceived.clear();
        this.tunnelSockets.clear();
      }
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
  private endedConnectionsProven(sandbox: string, c: Record<string, number>): boolean {
    const now = { started: c.conn_cnt ?? 0, open: c.conn_cur ?? 0, sent: c.bytes_out_cnt ?? 0 };
    const before = this.engineTotals.get(sandbox);
    this.engineTotals.set(sandbox, now);
    if (!before) return false;
    const ended = now.started - before.started - (now.open - before.open);
    return ended > 0 && now.sent - before.sent > ended * this.opts.engineProofs.proofBytes(sandbox);
  }

  private touch(sandbox: string): void {
    this.opts.maps.used(sandbox);
    this.opts.backend.recordActivity(sandbox);
  }

  /**
   * The kernel's counters of HAProxy's live sockets to engines, sshds and TCP twins. `ss` filters by
   * their addresses in the kernel, and HAProxy's sockets are told by their inodes from its own
   * /proc/<pid>/fd, so a host with many other sockets (apps' clients) costs nothing here. (`ss -p`
   * would tell them too, but it reads every process's fds, whatever the filter: 3.5 s per reading
   * here beside 20 000 other sockets, against 0.2 s without it.)
   */
  private async pollTunnelSockets(): Promise<void> {
    const pid = this.opts.pid();
    if (!pid) return;
    const targets = this.opts.maps.socketTargets(this.opts.enginePort);
    if (targets.size === 0) return;
    const filter = ['(', ...[...targets.keys()].flatMap((t, i) => (i ? ['or', 'dst', t] : ['dst', t])), ')'];
    const out = await new Promise<string>((resolve, reject) =>
      execFile('ss', ['-tineH', 'state', 'established', ...filter], { maxBuffer: 16 * 1024 * 1024 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
    );
    const haproxys = await socketInodes(pid);
    const now = Date.now();
    const engines = new Map<string, number>();
    const tunnels = new Map<string, { moved: number; since: number }>();
    for (const s of parseSs(out)) {
      if (s.inode === undefined || !haproxys.has(s.inode)) continue;
      const target = targets.get(socketTarget(s.peerAddress, s.peerPort));
      if (!target) continue;
      if (target.kind === 'engine') {
        if (s.bytesReceived <= this.opts.engineProofs.proofBytes(target.sandbox)) continue;
        engines.set(s.key, s.bytesReceived);
        if (this.engineReceived.get(s.key) !== s.bytesReceived) this.touch(target.sandbox);
        continue;
      }
      const moved = s.bytesReceived + s.bytesSent;
      const before = this.tunnelSockets.get(s.key);
      const since = before?.since ?? now;
      tunnels.set(s.key, { moved, since });
      if (moved === (before?.moved ?? 0)) continue;
      if (target.kind === 'tcp' || (before && now - since >= this.opts.shellProofMs)) this.touch(target.sandbox);
    }
    this.engineReceived.clear();
    for (const [k, v] of engines) this.engineReceived.set(k, v);
    this.tunnelSockets.clear();
    for (const [k, v] of tunnels) this.tunnelSockets.set(k, v);
  }
}

/** The inodes of the sockets a process holds (its fds that link to `socket:[inode]`); none if it is gone. */
async function socketInodes(pid: number): Promise<Set<string>> {
  const dir = `/proc/${pid}/fd`;
  const fds = await fs.readdir(dir).catch(() => [] as string[]);
  const links = await Promise.all(fds.map((fd) => fs.readlink(`${dir}/${fd}`).catch(() => '')));
  return new Set(links.flatMap((l) => /^socket:\[(\d+)\]$/.exec(l)?.[1] ?? []));
}

export interface SocketCounters {
  key: string;
  peerAddress: string;
  peerPort: number;
  /** The socket's inode (`ino:`), which names it in its process's /proc/<pid>/fd. */
  inode: string | undefined;
  bytesReceived: number;
  bytesSent: number;
}

/** Parses `ss -tineH` output: one socket per line, its tcp_info on the indented line after it. */
export function parseSs(out: string): SocketCounters[] {
  const sockets: SocketCounters[] = [];
  let current: SocketCounters | null = null;
  for (const line of out.split('\n')) {
    if (!line.trim()) continue;
    if (!/^\s/.test(line)) {
      // Recv-Q Send-Q Local:Port Peer:Port timer:(…) ino:123 sk:…
      const cols = line.trim().split(/\s+/);
      const peer = cols[3] ?? '';
      // the inode tells a socket from a later one on the same ports (a shell's age must not carry over)
      const inode = /\bino:(\d+)/.exec(line)?.[1];
      current = {
        key: `${cols[2]} ${peer}${inode ? ` ${inode}` : ''}`,
        peerAddress: peer.replace(/:\d+$/, '').replace(/^\[|\]$/g, '').replace(/^::ffff:/, ''),
        peerPort: Number(/:(\d+)$/.exec(peer)?.[1]),
        inode,
        bytesReceived: 0,
        bytesSent: 0,
      };
      sockets.push(current);
    }
    const received = /\bbytes_received:(\d+)/.exec(line);
    if (current && received) current.bytesReceived = Number(received[1]);
    const sent = /\bbytes_sent:(\d+)/.exec(line);
    if (current && sent) current.bytesSent = Number(sent[1]);
  }
  return sockets;
}
