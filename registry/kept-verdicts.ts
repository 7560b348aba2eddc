import { createHash, randomBytes } from 'node:crypto';
import type { Verdict } from './access-rules.ts';

/**
 * Verdicts mayBypass gave HAProxy on requests it did not let by, kept until each request comes to
 * the front (named by REGISTRY_VERDICT_HEADER), so that a request is not decided twice.
 */

/** How long a verdict mayBypass gave waits for its request (HAProxy hands it to the front at once). */
const KEPT_VERDICT_MS = 10_000;
/**
 * Verdicts kept at most; past it the oldest goes (its request, if it still comes, is decided again).
 * A request the front never sees (the client gone first, a target Fastify refuses before any hook)
 * leaves its verdict for KEPT_VERDICT_MS: without a bound, a client sending such requests fast would
 * grow this memory at will.
 */
export const KEPT_VERDICTS_MAX = 10_000;

/**
 * What a kept verdict is bound to: one digest of the method, target and credentials, so that the
 * map holds a fixed size per verdict whatever a client sends, and no credential.
 */
function requestKey(method: string, url: string, authorization: string | undefined): string {
  return createHash('sha256').update(JSON.stringify([method, url, authorization ?? null])).digest('base64url');
}

export class KeptVerdicts {
  private readonly kept = new Map<string, { request: string; verdict: Verdict; until: number }>();

  /** Keeps the verdict on this request; returns the id HAProxy hands the front with it. */
  keep(method: string, url: string, authorization: string | undefined, verdict: Verdict): string {
    const now = Date.now();
    for (const [id, kept] of this.kept) { // in the order kept, so in the order they run out
      if (kept.until > now && this.kept.size < KEPT_VERDICTS_MAX) break;
      this.kept.delete(id);
    }
    // 128 random bits, never shown to a client: nobody can name another request's verdict
    const id = randomBytes(16).toString('base64url');
    this.kept.set(id, { request: requestKey(method, url, authorization), verdict, until: now + KEPT_VERDICT_MS });
    return id;
  }

  /**
   * The verdict kept under `id` for this very request, once: the same rules' answer on the same
   * method, target and credentials a moment ago. Anything else (no such verdict, run out, another
   * request) is undefined, and the request is decided afresh.
   */
  take(id: unknown, method: string, url: string, authorization: string | undefined): Verdict | undefined {
    const kept = typeof id === 'string' ? this.kept.get(id) : undefined;
    if (!kept) return undefined;
    this.kept.delete(id as string);
    const same = kept.request === requestKey(method, url, authorization);
    return same && kept.until > Date.now() ? kept.verdict : undefined;
  }
}
