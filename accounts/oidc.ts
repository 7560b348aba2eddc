import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import * as oidc from 'openid-client';
import type { OidcConfig } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import type { Store, UserRecord } from '../store/index.ts';
import { generatePassword, hashPassword } from '../core/passwords.ts';
import { updateUser, validateUserName } from './users.ts';

/** A sign-in started here must come back within this time. */
const PENDING_TTL_S = 600;

/** What a refused single sign-on tells the user (shown on the sign-in page). */
export class SsoRefused extends Error {}

interface Pending { verifier: string; nonce: string }

/**
 * OpenID Connect sign-in (issue 24): authorization code with PKCE (S256), `state` and `nonce`,
 * against any issuer found by discovery, with openid-client (certified relying party). A sign-in
 * in progress is kept in Redis under its state and taken exactly once, so a replayed callback
 * (the same code and state) is refused even before the provider refuses the used code.
 */
export class OidcSignIn {
  private discovered?: Promise<oidc.Configuration>;

  constructor(
    private readonly settings: OidcConfig,
    private readonly redirectUri: string,
    private readonly store: Store,
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  /** The callback address with the query the provider sent: what the token request names as redirect_uri. */
  callbackUrl(query: string): URL {
    return new URL(`${this.redirectUri}${query}`);
  }

  get name(): string {
    return this.settings.name;
  }

  private configuration(): Promise<oidc.Configuration> {
    const { issuer, clientId, clientSecret } = this.settings;
    const url = new URL(issuer);
    // Plain HTTP only on this machine (a provider run by a test or beside the service).
    const loopback = url.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
    const found = this.discovered ?? oidc.discovery(url, clientId, clientSecret, undefined, loopback ? { execute: [oidc.allowInsecureRequests] } : undefined)
      .catch((err: Error) => {
        this.discovered = undefined; // try again on the next sign-in
        throw new errors.Busy(30, `the identity provider ${issuer} did not answer its discovery document: ${err.message}`);
      });
    this.discovered = found;
    return found;
  }

  private key(state: string): string {
    return `${this.prefix}:oidc:${state}`;
  }

  /** Where to send the browser, and the state to bind to it (a cookie). */
  async start(): Promise<{ url: string; state: string }> {
    const config = await this.configuration();
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const nonce = oidc.randomNonce();
    await this.redis.set(this.key(state), JSON.stringify({ verifier, nonce } satisfies Pending), 'EX', PENDING_TTL_S);
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: this.redirectUri,
      scope: this.settings.scopes,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state,
      nonce,
    });
    return { url: url.href, state };
  }

  /**
   * The provider sent the browser back: checks the state against the browser's cookie and the
   * sign-in kept here (taken once), exchanges the code, and maps the claims to a user.
   */
  async finish(callbackUrl: URL, cookieState: string | undefined): Promise<UserRecord> {
    const state = callbackUrl.searchParams.get('state') ?? '';
    if (!cookieState || state !== cookieState) throw new SsoRefused('this sign-in did not start in this browser (state mismatch); start again');
    const raw = await this.redis.getdel(this.key(state));
    if (!raw) throw new SsoRefused('this sign-in has expired or was already used; start again');
    const pending = JSON.parse(raw) as Pending;
    if (callbackUrl.searchParams.get('error')) {
      throw new SsoRefused(`the identity provider refused: ${callbackUrl.searchParams.get('error_description') ?? callbackUrl.searchParams.get('error')}`);
    }
    const config = await this.configuration();
    let claims: Record<string, unknown>;
    try {
      const tokens = await oidc.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: pending.verifier, expectedState: state, expectedNonce: pending.nonce, idTokenExpected: true,
      });
      const idClaims = tokens.claims()!;
      const info = await oidc.fetchUserInfo(config, tokens.access_token, idClaims.sub);
      claims = { ...info, ...idClaims };
    } catch (err) {
      throw new SsoRefused(`the identity provider did not confirm the sign-in: ${(err as Error).message}`);
    }
    return this.userFor(claims);
  }

  /** The service's user for these claims: checked against the allowed domains and groups; made on first sign-in if allowed. */
  private async userFor(claims: Record<string, unknown>): Promise<UserRecord> {
    const { allowedDomains, allowedGroups, groupsClaim, createUsers, adminClaim } = this.settings;
    const subject = `${this.settings.issuer}#${String(claims.sub)}`;
    const email = typeof claims.email === 'string' ? claims.email.toLowerCase() : undefined;
    const groups = Array.isArray(claims[groupsClaim]) ? (claims[groupsClaim] as unknown[]).map(String) : [];
    if (allowedDomains.length > 0) {
      const domain = email?.split('@')[1];
      if (!domain || claims.email_verified === false || !allowedDomains.includes(domain)) {
        throw new SsoRefused(`${email ?? 'an account without an email address'} may not sign in here: only addresses at ${allowedDomains.join(', ')} may`);
      }
    }
    if (allowedGroups.length > 0 && !groups.some((g) => allowedGroups.includes(g))) {
      throw new SsoRefused(`your account is in none of the groups that may sign in here (${allowedGroups.join(', ')})`);
    }
    const admin = adminClaim ? claimHolds(claims, adminClaim) : undefined;
    let user = await this.store.users.getBySubject(subject);
    if (!user) {
      if (!createUsers) throw new SsoRefused('there is no account for you here; ask an administrator to create one');
      user = await this.createFor(subject, nameFrom(claims, email), admin ?? false, email);
    } else if (admin !== undefined && user.admin !== admin) {
      user = await updateUser(this.store, user.id, (u) => ({ ...u, admin }));
    }
    if (user.disabled_at) throw new SsoRefused('this account is disabled; ask an administrator to enable it');
    return user;
  }

  /**
   * Makes the user of a first sign-in, or finds the one a simultaneous first sign-in of the same
   * person made (the store's insert-or-get by subject). A name another sign-in took meanwhile
   * moves on to the next free one.
   */
  private async createFor(subject: string, base: string, admin: boolean, email: string | undefined): Promise<UserRecord> {
    // a password nobody knows: this user signs in through the provider (an admin may reset it)
    const password_hash = await hashPassword(generatePassword());
    for (let i = 1; i <= NAME_TRIES; i++) {
      const name = i === 1 ? base : `${base}-${i}`;
      if (await this.store.users.getByName(name)) continue;
      const user: UserRecord = {
        id: randomUUID(), name, admin, created_at: new Date().toISOString(), ssh_keys: [], password_hash,
        oidc_subject: subject, ...(email ? { email } : {}),
      };
      try {
        return (await this.store.users.insertForSubject(user)).user;
      } catch (err) {
        if (!(err instanceof errors.NameTaken)) throw err;
      }
    }
    throw new SsoRefused(`no free user name near "${base}"; ask an administrator to create your account`);
  }
}

/** Names tried for a new user before giving up: `name`, `name-2` … */
const NAME_TRIES = 20;

/** `claim=value` holds when the claim equals the value or is a list holding it; `claim` alone when it is true. */
function claimHolds(claims: Record<string, unknown>, rule: string): boolean {
  const [name, value] = rule.split('=', 2) as [string, string | undefined];
  const actual = claims[name];
  if (value === undefined) return actual === true || actual === 'true';
  return Array.isArray(actual) ? actual.map(String).includes(value) : String(actual) === value;
}

/** A user name from preferred_username or the email's local part, made to fit the service's rules. */
function nameFrom(claims: Record<string, unknown>, email: string | undefined): string {
  const raw = typeof claims.preferred_username === 'string' ? claims.preferred_username : email?.split('@')[0] ?? `user-${String(claims.sub)}`;
  const name = raw.toLowerCase().replace(/[^a-z0-9._-]+/g, '-').replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, '').slice(0, 34) || 'user';
  return validateUserName(name);
}
