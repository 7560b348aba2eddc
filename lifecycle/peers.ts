import { randomBytes } from 'node:crypto';
import os from 'node:os';
import type { Redis } from 'ioredis';
import type { Config } from '../core/config.ts';

/** A process says it lives this often; one silent for PEER_TTL_MS is gone (killed, or its host is). */
const HEARTBEAT_MS = 5_000;
const PEER_TTL_MS = 20_000;

/** What one service process tells the others about itself, in `<prefix>:peers`. */
export interface Peer {
  id: string;
  host: string;
  pid: number;
  dataDir: string;
  /** `sqlite` or `postgres`: a SQLite store is one data folder's. */
  store: 'sqlite' | 'postgres';
  /** Whether its registry upstream is one it spawned on its data folder. */
  spawnedRegistry: boolean;
  /** Where it writes the archives of deleted sandboxes (SVC_ARCHIVE_DIR); absent from processes of before. */
  archiveDir?: string;
  /** Until when it counts as alive (ms since the epoch). */
  until: number;
}

/**
 * The service processes on one Redis prefix (issue 19). Each one registers at start and renews its
 * entry; a process refuses to start in a shape that cannot work with the others that run (the
 * message says what to set): a SQLite store or a spawned registry lives in one data folder, so
 * processes on other folders would each see their own users, sandboxes and images.
 */
export class Peers {
  readonly id = `${os.hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  private timer: NodeJS.Timeout | undefined;
  private readonly key: string;

  constructor(private readonly redis: Redis, prefix: string, private readonly config: Pick<Config, 'dataDir' | 'archiveDir' | 'storeUrl' | 'registryUpstream'>) {
    this.key = `${prefix}:peers`;
  }

  /** The live processes other than this one. */
  async others(): Promise<Peer[]> {
    const now = Date.now();
    const all = Object.entries(await this.redis.hgetall(this.key)).map(([, raw]) => JSON.parse(raw) as Peer);
    const gone = all.filter((p) => p.until < now).map((p) => p.id);
    if (gone.length) await this.redis.hdel(this.key, ...gone);
    return all.filter((p) => p.until >= now && p.id !== this.id);
  }

  /**
   * Checks the shape against the processes that run, then registers this one and keeps it registered.
   * Returns what works but an operator should know (for the log).
   */
  async join(): Promise<string[]> {
    const me = this.entry();
    const warnings: string[] = [];
    for (const other of await this.others()) {
      if (other.archiveDir !== undefined && other.archiveDir !== me.archiveDir) {
        warnings.push(`another service process (${other.host}, pid ${other.pid}) writes the archives of deleted sandboxes to ${other.archiveDir}, this one to ${me.archiveDir}: ` +
          'an archive lies where the process that ran its DELETE put it; set SVC_ARCHIVE_DIR to one folder all processes share');
      }
      if (other.host === me.host && other.dataDir === me.dataDir) continue; // one data folder: one store, one registry
      const where = `another service process runs on this Redis prefix (${other.host}, pid ${other.pid}, data folder ${other.dataDir})`;
      if (me.store === 'sqlite' || other.store === 'sqlite') {
        throw new Error(`${where} and ${me.store === 'sqlite' ? 'this process' : 'that one'} keeps its store in SQLite in its own data folder: ` +
          'several processes need one PostgreSQL store; set SVC_STORE_URL=postgres://… (the same on every process) and SVC_SECRET_KEY_FILE to one key file');
      }
      if (me.spawnedRegistry || other.spawnedRegistry) {
        throw new Error(`${where} and ${me.spawnedRegistry ? 'this process' : 'that one'} spawns its registry on its own data folder: ` +
          'several processes need one registry; set SVC_REGISTRY_UPSTREAM to one distribution registry (the same on every process)');
      }
    }
    await this.beat();
    this.timer = setInterval(() => void this.beat().catch(() => undefined), HEARTBEAT_MS);
    return warnings;
  }

  private entry(): Peer {
    return {
      id: this.id,
      host: os.hostname(),
      pid: process.pid,
      dataDir: this.config.dataDir,
      store: this.config.storeUrl.startsWith('sqlite:') ? 'sqlite' : 'postgres',
      spawnedRegistry: !this.config.registryUpstream,
      archiveDir: this.config.archiveDir,
      until: Date.now() + PEER_TTL_MS,
    };
  }

  private async beat(): Promise<void> {
    await this.redis.hset(this.key, this.id, JSON.stringify(this.entry()));
  }

  /** Leaves (service shutdown): the others stop counting this process at once. */
  async leave(): Promise<void> {
    clearInterval(this.timer);
    await this.redis.hdel(this.key, this.id);
  }
}
