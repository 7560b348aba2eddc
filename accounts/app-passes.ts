import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { AppAccess, AppAccessAnswer, AppAccessQuestion } from '../edge/index.ts';
import type { Store, UserRecord } from '../store/index.ts';
import { authenticate, DISABLED } from './tokens.ts';

/** A sign-in ticket lives this long: the one redirect from the service's host to the app's. */
export const TICKET_TTL_S = 60;
/** A browser's pass for one app address lasts this long; then one more (silent, while signed in) sign-in bounce. */
export const PASS_TTL_S = 8 * 3600;
/** Longer values are not ours: nothing longer is parsed or hashed. */
const MAX_SIGNED = 1024;

type Purpose = 'ticket' | 'pass';
interface Signed { p: Purpose; l: string; u: string; e: number; n: string }

/**
 * Who may reach a private app address (edge/app-access.ts). The service's session cookie never
 * goes to an app's host: the service's host hands the browser a ticket (signed, 60 s, one use, for
 * one address) on a redirect, and the edge trades it at that address for a pass kept in a host-only
 * cookie there. Tickets and passes are HMACs under a key of the service's (kept sealed in the store,
 * the same for every process); each request's user is looked up again (disabled, owner changed).
 */
export class AppPasses implements AppAccess {
  /** Tickets redeemed in this process → when they expire (a ticket is used once). */
  private readonly used = new Map<string, number>();

  private constructor(private readonly store: Store, private readonly key: Buffer, private readonly site: string) {}

  static async open(store: Store, site: string): Promise<AppPasses> {
    const key = await store.serviceKeys.claim('app-pass-key', randomBytes(32).toString('base64url'));
    return new AppPasses(store, Buffer.from(key, 'base64url'), site);
  }

  signInUrl(appUrl: string): string {
    return `${this.site}/api/apps/enter?to=${encodeURIComponent(appUrl)}`;
  }

  /** A ticket for `userId` to enter the app address `label` (made by the service's host for a signed-in browser). */
  ticket(label: string, userId: string): string {
    return this.sign('ticket', label, userId, TICKET_TTL_S);
  }

  redeem(label: string, ticket: string): { pass: string; maxAgeSeconds: number } | null {
    const t = this.verify('ticket', label, ticket);
    if (!t) return null;
    const now = Date.now() / 1000;
    for (const [n, e] of this.used) if (e < now) this.used.delete(n);
    if (this.used.has(t.n)) return null;
    this.used.set(t.n, t.e);
    return { pass: this.sign('pass', label, t.u, PASS_TTL_S), maxAgeSeconds: PASS_TTL_S };
  }

  async decide(q: AppAccessQuestion): Promise<AppAccessAnswer> {
    let user: UserRecord | undefined;
    let limitedTo: string | undefined;
    if (q.bearer !== undefined) {
      try {
        const principal = await authenticate(this.store, `Bearer ${q.bearer}`);
        user = principal.user;
        limitedTo = principal.sandbox;
      } catch (err) {
        return { allowed: false, status: 401, reason: `the access token was refused (${(err as Error).message})` };
      }
    } else {
      const p = q.pass === undefined ? null : this.verify('pass', q.label, q.pass);
      if (!p) return { allowed: false, status: 401, reason: 'your sign-in for this address has ended' };
      user = await this.store.users.get(p.u);
      if (!user) return { allowed: false, status: 401, reason: 'your sign-in for this address has ended' };
      if (user.disabled_at) return { allowed: false, status: 401, reason: DISABLED };
    }
    if (limitedTo !== undefined && limitedTo !== q.sandbox) {
      return { allowed: false, status: 403, reason: `the token is limited to the sandbox ${limitedTo}` };
    }
    if (q.visibility === 'authenticated' || user.admin) return { allowed: true };
    const record = await this.store.sandboxes.get(q.sandbox);
    if (record?.owner_id === user.id) return { allowed: true };
    return { allowed: false, status: 403, reason: `only the owner of ${q.sandbox} and administrators may reach it (tunnel.visibility=owner), and you are signed in as ${user.name}` };
  }

  private mac(body: string): string {
    return createHmac('sha256', this.key).update(body).digest('base64url');
  }

  private sign(p: Purpose, label: string, userId: string, ttlS: number): string {
    const signed: Signed = { p, l: label, u: userId, e: Math.floor(Date.now() / 1000) + ttlS, n: randomBytes(12).toString('base64url') };
    const body = Buffer.from(JSON.stringify(signed)).toString('base64url');
    return `${body}.${this.mac(body)}`;
  }

  /** The signed value if `value` is one of ours, for this purpose and address, and not expired. */
  private verify(p: Purpose, label: string, value: string): Signed | null {
    if (value.length > MAX_SIGNED) return null;
    const [body, mac, extra] = value.split('.');
    if (!body || !mac || extra !== undefined) return null;
    const want = Buffer.from(this.mac(body));
    const got = Buffer.from(mac);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return null;
    let s: Signed;
    try {
      s = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Signed;
    } catch {
      return null;
    }
    return s.p === p && s.l === label && typeof s.u === 'string' && typeof s.e === 'number' && s.e > Date.now() / 1000 ? s : null;
  }
}
