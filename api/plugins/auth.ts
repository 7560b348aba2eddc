import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { authenticate, type Principal } from '../../accounts/index.ts';
import type { Store } from '../../store/index.ts';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** Routes that answer without a token (swagger, ca.pem). */
    public?: boolean;
  }
}

/** Bearer-token authentication on every route not marked `config.public`. */
export const authPlugin = fp(
  async (app: FastifyInstance, opts: { store: Store }) => {
    app.decorateRequest('principal', null as unknown as Principal);
    app.addHook('onRequest', async (request: FastifyRequest) => {
      if (request.routeOptions.config?.public || !request.routeOptions.url) return;
      request.principal = await authenticate(opts.store, request.headers.authorization);
    });
  },
  { name: 'svc-auth' },
);
