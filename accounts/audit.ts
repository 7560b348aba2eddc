import { AsyncLocalStorage } from 'node:async_hooks';
import type { Logger } from '../core/logger.ts';
import type { AuditRow, Store } from '../store/index.ts';
import type { Caller } from './tokens.ts';

/** Who acts: the user and token (never its value) and where from. */
export interface AuditActor {
  user?: { id: string; name: string };
  tokenId?: string;
  /** The client's address; `cli` for the operator's command line. */
  source: string;
}

export type AuditEntry = Partial<Pick<AuditRow, 'sandbox' | 'target' | 'detail' | 'outcome'>>;

const DAY_MS = 86_400_000;
const PRUNE_EVERY_MS = 3_600_000;

/** The actor of the request being handled, for code deep below the routes (quota refusals). */
const current = new AsyncLocalStorage<AuditActor>();

export function withAuditActor<T>(actor: AuditActor, work: () => T): T {
  return current.run(actor, work);
}

export function actorOf(caller: Caller | null | undefined, source: string): AuditActor {
  return {
    source,
    ...(caller?.user ? { user: { id: caller.user.id, name: caller.user.name } } : {}),
    ...(caller?.token ? { tokenId: caller.token.id } : {}),
  };
}

/**
 * The audit log (issue 24): one row per security-relevant action, in the store. Writing a row is
 * awaited where the action happens; a failed write is logged and does not undo the action.
 */
export class AuditLog {
  constructor(private readonly store: Store, private readonly log: Logger, private readonly retentionDays: number) {}

  async record(action: string, actor: AuditActor | undefined, entry: AuditEntry = {}): Promise<void> {
    const who = actor ?? current.getStore();
    try {
      await this.store.audit.append({
        action,
        outcome: entry.outcome ?? 'ok',
        source: who?.source ?? 'service',
        ...(who?.user ? { actor_id: who.user.id, actor_name: who.user.name } : {}),
        ...(who?.tokenId ? { token_id: who.tokenId } : {}),
        ...(entry.sandbox ? { sandbox: entry.sandbox } : {}),
        ...(entry.target ? { target: entry.target.slice(0, 200) } : {}),
        ...(entry.detail ? { detail: entry.detail.slice(0, 500) } : {}),
      });
    } catch (err) {
      this.log.error({ err, action }, 'audit: could not write a row');
    }
  }

  /** Prunes rows past the retention now and every hour; 0 days keeps everything. Returns the stop. */
  startRetention(): () => void {
    if (this.retentionDays <= 0) return () => undefined;
    const prune = () => {
      void this.store.audit.prune(new Date(Date.now() - this.retentionDays * DAY_MS).toISOString())
        .then((n) => { if (n > 0) this.log.info({ pruned: n, days: this.retentionDays }, 'audit: rows past the retention removed'); })
        .catch((err) => this.log.warn({ err }, 'audit: pruning failed; next hour tries again'));
    };
    prune();
    const timer = setInterval(prune, PRUNE_EVERY_MS).unref();
    return () => clearInterval(timer);
  }
}
