import net from 'node:net';
import { IncusError, type IncusClient } from './incus-client.ts';

/**
 * Which members of an Incus cluster are lost, known sooner than Incus knows it (issue 34 §4).
 *
 * Incus marks a member offline once it missed heartbeats for `cluster.offline_threshold` (7 s after a
 * kill with the test cluster's 11 s), but every list of instances asked before then waits for its
 * dial to the lost member to time out: 20 s (measured, docs/incus.md). So the last session's runtime,
 * which read each sandbox's state from the list, saw a lost member's sandbox `unreachable` 20 s after
 * the kill, and every other sandbox's inspect waited as long. Here each member's API port is also
 * dialled directly every second: one that does not accept a connection within PING_MS twice in a row
 * is lost at once, whatever Incus says yet; one Incus marks Offline is lost too. An Evacuated member
 * is not lost: it answers, and its sandboxes were moved off (read where they are now). The members list itself is read from Incus's database and answers in 0.1 s throughout
 * (measured). A plain TCP connect, not an HTTPS request: undici lets a request's deadline pass while
 * it connects, and a connect to a member whose link is gone waits its own 10 s (measured).
 */
export interface Member {
  name: string;
  /** https://address:8443 */
  url: string;
  /** Incus's word: Online, Offline, Evacuated, Blocked. */
  status: string;
  config: Record<string, string>;
  /** Why the member is lost, when it is. */
  lost?: string;
}

interface MemberInfo {
  server_name: string;
  url: string;
  status: string;
  message: string;
  config: Record<string, string> | null;
}

const ROUND_MS = 1000;
/** A member's API port accepts at once (refused at once where its incusd is gone); a link cut gets no answer. */
const PING_MS = 1500;
/** Failed pings in a row before a member is taken for lost (one slow answer is load, not loss). */
const MISSES = 2;

export class MemberHealth {
  private members: Member[] = [];
  private readonly misses = new Map<string, number>();
  private round?: Promise<Member[]>;

  constructor(private readonly incus: IncusClient) {}

  /** Members lost at the last round, with why (empty for a daemon that is not clustered). */
  lost(): ReadonlyMap<string, string> {
    return new Map(this.members.flatMap((m) => (m.lost ? [[m.name, m.lost] as const] : [])));
  }

  /**
   * Members that did not take the last round's dial, or are lost, while Incus still lists them Online:
   * Incus's list of instances waits on them (20 s), so a list is read instance by instance meanwhile.
   */
  unmarked(): string[] {
    return this.members.filter((m) => (m.lost || (this.misses.get(m.name) ?? 0) > 0) && m.status === 'Online').map((m) => m.name);
  }

  /** One round now: the members as Incus lists them, each one's API port dialled. */
  check(): Promise<Member[]> {
    this.round ??= this.ask().finally(() => { this.round = undefined; });
    return this.round;
  }

  /** Rounds every second; `onChange` when a member turns lost or comes back. Returns the stop. */
  watch(onChange: (member: string, lost: string | undefined) => void): () => void {
    let stopped = false;
    const loop = async () => {
      while (!stopped) {
        const before = this.lost();
        await this.check().catch(() => undefined);
        const now = this.lost();
        for (const m of new Set([...before.keys(), ...now.keys()])) if (before.has(m) !== now.has(m)) onChange(m, now.get(m));
        await new Promise((r) => setTimeout(r, ROUND_MS).unref());
      }
    };
    void loop();
    return () => { stopped = true; };
  }

  private async ask(): Promise<Member[]> {
    let infos: MemberInfo[];
    try {
      infos = await this.incus.get<MemberInfo[]>('/1.0/cluster/members?recursion=1', { timeoutMs: 5000 });
    } catch (err) {
      // not clustered: one daemon, nothing to lose but itself (the runtime's own calls say so)
      if (err instanceof IncusError && err.status === 400) return (this.members = []);
      throw err;
    }
    this.members = await Promise.all(infos.map(async (i): Promise<Member> => {
      const member: Member = { name: i.server_name, url: i.url, status: i.status, config: i.config ?? {} };
      if (i.status === 'Offline') return { ...member, lost: `Incus member ${i.server_name} is ${i.status.toLowerCase()}${i.message ? ` (${i.message})` : ''}` };
      const answered = await dials(new URL(i.url));
      const missed = answered ? 0 : (this.misses.get(i.server_name) ?? 0) + 1;
      this.misses.set(i.server_name, missed);
      return missed >= MISSES ? { ...member, lost: `Incus member ${i.server_name} does not answer at ${i.url}` } : member;
    }));
    return this.members;
  }
}

/** True when the member's API port accepts a TCP connection within PING_MS. */
function dials(url: URL): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: url.hostname, port: Number(url.port || 8443), timeout: PING_MS });
    const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}
