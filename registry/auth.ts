import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { authenticate, type Principal } from '../accounts/index.ts';
import type { Store } from '../store/index.ts';

/** How long a registry bearer token lives; docker asks for a new one when it expires. */
export const TOKEN_TTL_SECONDS = 300;
export const SERVICE_NAME = 'svc-registry';

interface Claims {
  /** Token record id of the access token that logged in; absent for anonymous. */
  tid?: string;
  exp: number;
}

/**
 * Registry credentials. `docker login` gets a Bearer challenge from `GET /v2/`, sends the user
 * name and the access token (`svc_…`) as Basic credentials to the token endpoint, and receives a
 * short-lived bearer token that names the access token; every request re-checks that access token
 * (revoked means refused at once). Without credentials the token endpoint answers an anonymous
 * token, which is how docker pulls public images without logging in.
 *
 * Basic credentials and a raw `Bearer svc_…` are accepted on every request too (curl, scripts).
 * The signing key is sealed in the store, so the fronts of every process on one store accept each
 * other's tokens.
 */
export class RegistryAuth {
  private constructor(private readonly store: Store, private readonly key: Buffer) {}

  /**
   * The signing key from the store, made on first use. A store without one takes the key a service
   * kept in `<data>/registry/token.key` before the store kept it (tokens it issued stay valid), once.
   */
  static async open(store: Store, dataDir: string): Promise<RegistryAuth> {
    let hex = await store.serviceKeys.get('registry-token-key');
    if (hex === undefined) {
      const file = path.join(dataDir, 'registry', 'token.key');
      const kept = await fs.promises.readFile(file, 'utf8').then((text) => text.trim(), () => '');
      hex = await store.serviceKeys.claim('registry-token-key', /^[0-9a-f]{64}$/.test(kept) ? kept : randomBytes(32).toString('hex'));
      await fs.promises.rm(file, { force: true });
    }
    return new RegistryAuth(store, Buffer.from(hex, 'hex'));
  }

  /** The token endpoint: Basic credentials → a token for that access token; none → anonymous. */
  async issue(authorization: string | undefined): Promise<{ token: string; principal: Principal | null }> {
    let principal: Principal | null = null;
    if (authorization) principal = await this.principalFromBasic(authorization);
    const claims: Claims = { exp: Math.floor(Date.now() / 1000) + TOKEN_TTL_SECONDS, ...(principal ? { tid: principal.token.id } : {}) };
    return { token: this.sign(claims), principal };
  }

  /**
   * The caller of a registry request: a principal, `null` for anonymous (no credentials or an
   * anonymous token). Throws errors.Unauthenticated for bad or revoked credentials.
   */
  async principal(authorization: string | undefined): Promise<Principal | null> {
    if (!authorization) return null;
    const bearer = /^\s*Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (bearer) {
      const value = bearer[1]!;
      if (value.startsWith('svc_')) return authenticate(this.store, `Bearer ${value}`);
      const claims = this.verify(value);
      if (!claims) throw unauthenticated('invalid or expired registry token; log in again');
      if (!claims.tid) return null;
      return this.principalFromTokenId(claims.tid);
    }
    return this.principalFromBasic(authorization);
  }

  private async principalFromBasic(authorization: string): Promise<Principal> {
    const basic = /^\s*Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(authorization);
    if (!basic) throw unauthenticated('use Basic credentials: any user name, an access token (svc_…) as password');
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const password = colon < 0 ? '' : decoded.slice(colon + 1);
    try {
      return await authenticate(this.store, `Bearer ${password}`);
    } catch {
      throw unauthenticated('unknown or revoked access token: log in with an access token (svc_…) as password');
    }
  }

  private async principalFromTokenId(id: string): Promise<Principal> {
    const token = await this.store.tokens.get(id);
    const user = token && !token.revoked_at ? await this.store.users.get(token.user_id) : undefined;
    // as authenticate() (accounts/tokens.ts): a disabled account's registry tokens stop at once, not at expiry
    if (!token || !user || user.disabled_at) throw unauthenticated('the access token behind this login was revoked or its account disabled; log in again');
    return token.sandbox !== undefined ? { user, token, sandbox: token.sandbox } : { user, token };
  }

  private sign(claims: Claims): string {
    const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return `${body}.${createHmac('sha256', this.key).update(body).digest('base64url')}`;
  }

  private verify(token: string): Claims | null {
    const [body, mac] = token.split('.');
    if (!body || !mac || token.split('.').length !== 2) return null;
    const expected = Buffer.from(createHmac('sha256', this.key).update(body).digest('base64url'));
    const given = Buffer.from(mac);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    try {
      const claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Claims;
      if (typeof claims.exp !== 'number' || claims.exp * 1000 < Date.now()) return null;
      return claims;
    } catch {
      return null;
    }
  }
}

export class RegistryUnauthenticated extends Error {
  override name = 'RegistryUnauthenticated';
}

function unauthenticated(message: string): RegistryUnauthenticated {
  return new RegistryUnauthenticated(message);
}
