import { createHash, createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { verifyPassword } from '../core/passwords.ts';
import { PortainerError } from './portainer.ts';
import type { ManagerState } from './state.ts';

export const ADMIN = { id: 1, username: 'admin' } as const;
const JWT_TTL_S = 8 * 3600; // Portainer's default session length
/** Failed sign-ins allowed before each further one must wait, and the longest wait. */
const FREE_FAILURES = 3;
const MAX_WAIT_MS = 10_000;
/** scrypt costs 32 MB and ~100 ms: at most this many at once, the rest are told to retry. */
const MAX_CHECKS = 2;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Reachable without a JWT or API key. */
    public?: boolean;
    /** Needs a JWT: an API key is not enough (Portainer: making API keys). */
    jwtOnly?: boolean;
  }
  interface FastifyRequest {
    via?: 'jwt' | 'apikey';
  }
}

function b64url(data: Buffer | string): string {
  return Buffer.from(data).toString('base64url');
}

/** HS256 JWTs signed with this tool's own secret, Portainer's claims. */
export class Jwts {
  private readonly revoked = new Map<string, number>();

  constructor(private readonly secret: () => string) {}

  sign(): string {
    const now = Math.floor(Date.now() / 1000);
    const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
    const body = b64url(JSON.stringify({ id: ADMIN.id, username: ADMIN.username, role: 1, scope: 'default', forceChangePassword: false, iat: now, exp: now + JWT_TTL_S, jti: randomUUID() }));
    return `${head}.${body}.${this.mac(`${head}.${body}`)}`;
  }

  /** The claims of a valid, unexpired, not signed-out token; null otherwise. */
  verify(token: string): { jti: string; exp: number } | null {
    const parts = token.split('.');
    if (parts.length !== 3) return null;
    const [head, body, mac] = parts as [string, string, string];
    const want = Buffer.from(this.mac(`${head}.${body}`));
    const got = Buffer.from(mac);
    if (got.length !== want.length || !timingSafeEqual(got, want)) return null;
    try {
      if (JSON.parse(Buffer.from(head, 'base64url').toString()).alg !== 'HS256') return null;
      const claims = JSON.parse(Buffer.from(body, 'base64url').toString()) as { jti?: unknown; exp?: unknown };
      if (typeof claims.jti !== 'string' || typeof claims.exp !== 'number') return null;
      if (claims.exp * 1000 <= Date.now() || this.revoked.has(claims.jti)) return null;
      return { jti: claims.jti, exp: claims.exp };
    } catch {
      return null;
    }
  }

  revoke(token: string): void {
    const claims = this.verify(token);
    if (!claims) return;
    const now = Date.now();
    for (const [jti, exp] of this.revoked) if (exp * 1000 <= now) this.revoked.delete(jti);
    this.revoked.set(claims.jti, claims.exp);
  }

  private mac(data: string): string {
    return createHmac('sha256', this.secret()).update(data).digest('base64url');
  }
}

export function apiKeyDigest(raw: string): string {
  return createHash('sha256').update(raw).digest('base64');
}

/** A new key in Portainer's form: `ptr_` and base64 of 32 random bytes. */
export function newApiKey(): string {
  return `ptr_${randomBytes(32).toString('base64')}`;
}

/**
 * Sign-in slow-down: after FREE_FAILURES wrong passwords in a row, each attempt must wait a growing
 * time (429 with Retry-After before then), and only MAX_CHECKS password checks run at once.
 */
export class SignInGuard {
  private failures = 0;
  private notBefore = 0;
  private running = 0;

  async check(attempt: () => Promise<boolean>): Promise<boolean> {
    const wait = this.notBefore - Date.now();
    if (wait > 0) throw tooMany(wait, 'too many failed sign-ins');
    if (this.running >= MAX_CHECKS) throw tooMany(1000, 'too many sign-ins at once');
    this.running++;
    try {
      const ok = await attempt();
      if (ok) {
        this.failures = 0;
        this.notBefore = 0;
      } else if (++this.failures >= FREE_FAILURES) {
        this.notBefore = Date.now() + Math.min(MAX_WAIT_MS, 500 * 2 ** (this.failures - FREE_FAILURES));
      }
      return ok;
    } finally {
      this.running--;
    }
  }
}

function tooMany(waitMs: number, what: string): PortainerError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  return new PortainerError(429, `${what}; retry after ${seconds} s`, 'Too Many Requests', seconds);
}

/** The token a request carries, in Portainer's lookup order: API key, then JWT. */
function credentials(request: FastifyRequest): { apiKey?: string; jwt?: string } {
  const query = request.query as Record<string, unknown> | undefined;
  const fromQuery = (name: string) => {
    const key = Object.keys(query ?? {}).find((k) => k.toLowerCase() === name);
    const value = key ? query![key] : undefined;
    return typeof value === 'string' ? value : undefined;
  };
  const header = request.headers['x-api-key'];
  const apiKey = (typeof header === 'string' ? header : undefined) ?? fromQuery('x-api-key');
  if (apiKey) return { apiKey };
  const auth = request.headers.authorization;
  const bearer = typeof auth === 'string' && /^bearer /i.test(auth) ? auth.slice(7).trim() : undefined;
  return { jwt: bearer ?? fromQuery('token') };
}

export interface AuthOptions {
  state: ManagerState;
  jwts: Jwts;
  /** The admin's scrypt hash, from the environment the service set, else the stored one. */
  adminHash: () => string | undefined;
}

/** Every route needs a JWT or an API key unless its config says `public`. */
export const authPlugin = fp(async (app: FastifyInstance, opts: AuthOptions) => {
  const { state, jwts } = opts;
  const guard = new SignInGuard();
  const digests = () => new Map(state.current.apiKeys.map((k) => [k.digest, k]));

  app.addHook('onRequest', async (request) => {
    if (request.routeOptions.config.public) return;
    const { apiKey, jwt } = credentials(request);
    if (apiKey) {
      if (request.routeOptions.config.jwtOnly) throw new PortainerError(403, 'Access denied: sign in with a password (a JWT) to manage API keys', 'Forbidden');
      const key = digests().get(apiKeyDigest(apiKey));
      if (!key) throw new PortainerError(401, 'Invalid API key', 'Unauthorized');
      request.via = 'apikey';
      return;
    }
    if (!jwt) throw new PortainerError(401, 'A valid authorization token is missing', 'Unauthorized');
    if (!jwts.verify(jwt)) throw new PortainerError(401, 'Invalid JWT token', 'Unauthorized');
    request.via = 'jwt';
  });

  const checkPassword = (password: string) =>
    guard.check(async () => {
      const hash = opts.adminHash();
      return hash !== undefined && (await verifyPassword(password, hash));
    });

  app.post('/api/auth', {
    config: { public: true },
    schema: {
      body: {
        type: 'object',
        required: ['username', 'password'],
        properties: { username: { type: 'string', maxLength: 256 }, password: { type: 'string', maxLength: 1024 } },
      },
    },
  }, async (request) => {
    const { username, password } = request.body as { username: string; password: string };
    const ok = await checkPassword(password);
    if (!ok || username !== ADMIN.username) throw new PortainerError(422, 'Invalid credentials', 'Unauthorized');
    return { jwt: jwts.sign() };
  });

  app.post('/api/auth/logout', { schema: {} }, async (request, reply) => {
    const { jwt } = credentials(request);
    if (jwt) jwts.revoke(jwt);
    return reply.code(204).send();
  });

  const userParams = { type: 'object', required: ['id'], properties: { id: { type: 'string', pattern: '^[0-9]{1,9}$' } } };
  const ownUser = (id: string) => {
    if (Number(id) !== ADMIN.id) throw new PortainerError(403, 'Permission denied to manage API keys of another user', 'Forbidden');
  };
  const keyJson = ({ digest: _digest, ...key }: (typeof state.current.apiKeys)[number]) => key;

  app.post('/api/users/:id/tokens', {
    config: { jwtOnly: true },
    schema: {
      params: userParams,
      body: {
        type: 'object',
        required: ['description'],
        properties: { description: { type: 'string', minLength: 1, maxLength: 128 }, password: { type: 'string', maxLength: 1024 } },
      },
    },
  }, async (request, reply) => {
    ownUser((request.params as { id: string }).id);
    const { description, password } = request.body as { description: string; password?: string };
    if (password === undefined || !(await checkPassword(password))) throw new PortainerError(403, 'Invalid password', 'Forbidden');
    const raw = newApiKey();
    const apiKey = await state.update((d) => {
      const key = { id: d.nextKeyId++, userId: ADMIN.id, description, prefix: raw.slice(0, 7), dateCreated: Math.floor(Date.now() / 1000), lastUsed: 0, digest: apiKeyDigest(raw) };
      d.apiKeys.push(key);
      return key;
    });
    return reply.code(201).send({ rawAPIKey: raw, apiKey: keyJson(apiKey) });
  });

  app.get('/api/users/:id/tokens', { schema: { params: userParams } }, async (request) => {
    ownUser((request.params as { id: string }).id);
    return state.current.apiKeys.map(keyJson);
  });

  app.delete('/api/users/:id/tokens/:keyId', {
    config: { jwtOnly: true },
    schema: { params: { ...userParams, required: ['id', 'keyId'], properties: { ...userParams.properties, keyId: { type: 'string', pattern: '^[0-9]{1,9}$' } } } },
  }, async (request, reply) => {
    const { id, keyId } = request.params as { id: string; keyId: string };
    ownUser(id);
    const removed = await state.update((d) => {
      const before = d.apiKeys.length;
      d.apiKeys = d.apiKeys.filter((k) => k.id !== Number(keyId));
      return d.apiKeys.length < before;
    });
    if (!removed) throw new PortainerError(404, 'Unable to find an API key with the specified identifier', 'Not Found');
    return reply.code(204).send();
  });
});
