import { IncusClient, IncusError } from './incus-client.ts';

/**
 * Which members of an Incus cluster are lost, known sooner than Incus knows it (issue 34 §4).
 *
 * Incus marks a member offline once it missed heartbeats for `cluster.offline_threshold` (7 s after a
 * kill with the test cluster's 11 s), but every list of instances asked before then waits for its
 * dial to the lost member to time out: 20 s (measured, docs/incus.md). So the last session's runtime,
 * which read each sandbox's state from the list, saw a lost member's sandbox `unreachable` 20 s after
 * the kill, and every other sandbox's inspect waited as long. Here each member is also asked directly
 * (`GET /1.0` at its own address, which no other member forwards) every second: one that does not
 * answer within PING_MS twice in a row is lost at once, whatever Incus says yet; one Incus marks
 * Offline (or Evacuated: it runs nothing) is lost too. The members list itself is read from Incus's
 * database and answers in 0.1 s throughout (measured).
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
/** A member's own /1.0 answers in 0.1 s; under load (10 on 2 cores) within 1 s. */
const PING_MS = 1500;
/** Failed pings in a row before a member is taken for lost (one slow answer is load, not loss). */
const MISSES = 2;

export class MemberHealth {
  private members: Member[] = [];
  private readonly misses = new Map<string, number>();
  /** Clients of each member's own address (same certificates as the cluster's client). */
  private readonly direct = new Map<string, IncusClient>();
  private round?: Promise<Member[]>;

  constructor(private readonly incus: IncusClient) {}

  /** Members lost at the last round, with why (empty for a daemon that is not clustered). */
  lost(): ReadonlyMap<string, string> {
    return new Map(this.members.flatMap((m) => (m.lost ? [[m.name, m.lost] as const] : [])));
  }

  /** One round now: the members as Incus lists them, each pinged at its own address. */
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

  async close(): Promise<void> {
    await Promise.all([...this.direct.values()].map((c) => c.close()));
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
      if (i.status === 'Offline' || i.status === 'Evacuated') return { ...member, lost: `Incus member ${i.server_name} is ${i.status.toLowerCase()}${i.message ? ` (${i.message})` : ''}` };
      const direct = this.client(i);
      if (!direct) return member;
      const answered = await direct.get('/1.0', { timeoutMs: PING_MS }).then(() => true, () => false);
      const missed = answered ? 0 : (this.misses.get(i.server_name) ?? 0) + 1;
      this.misses.set(i.server_name, missed);
      return missed >= MISSES ? { ...member, lost: `Incus member ${i.server_name} does not answer at ${i.url}` } : member;
    }));
    return this.members;
  }

  /** A client of the member's own address; none over a unix socket (no certificate to go elsewhere: Incus's word alone). */
  private client(i: MemberInfo): IncusClient | undefined {
    if (!this.incus.endpoint.url) return undefined;
    if (this.incus.endpoint.url === i.url) return this.incus;
    let c = this.direct.get(i.url);
    if (!c) this.direct.set(i.url, (c = new IncusClient({ ...this.incus.endpoint, url: i.url })));
    return c;
  }
}
