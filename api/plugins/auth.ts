import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { authenticate, DISABLED, type Caller, type WebSessions } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';
import type { Store } from '../../store/index.ts';
import { requestSession, SESSION_COOKIE, readCookie } from '../web-session.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Caller;
  }
  interface FastifyContextConfig {
    /** Routes that answer without a token (swagger, ca.pem, sign-in). */
    public?: boolean;
  }
}

export interface AuthOptions {
  store: Store;
  sessions: WebSessions;
  /** `https://<domain>[:port]`: the only Origin a session's changes may come from. */
  siteOrigin: string;
}

/**
 * Authentication on every route not marked `config.public`: a bearer token (clients, agents),
 * else the web UI's session cookie with its cross-site and CSRF checks (api/web-session.ts).
 */
export const authPlugin = fp(
  async (app: FastifyInstance, opts: AuthOptions) => {
    app.decorateRequest('principal', null as unknown as Caller);
    app.addHook('onRequest', async (request: FastifyRequest) => {
      if (request.routeOptions.config?.public || !request.routeOptions.url) return;
      if (request.headers.authorization !== undefined || readCookie(request.headers.cookie, SESSION_COOKIE) === undefined) {
        request.principal = await authenticate(opts.store, request.headers.authorization);
        return;
      }
      const { id, session } = await requestSession(request, opts.sessions, opts.siteOrigin);
      const user = await opts.store.users.get(session.userId);
      if (!user) throw new errors.Unauthenticated('your account no longer exists');
      if (user.disabled_at) throw new errors.Unauthenticated(DISABLED);
      request.principal = { user, session: id };
    });
  },
  { name: 'svc-auth' },
);
