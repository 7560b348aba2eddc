import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { containsToken, redactTokens } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';

/**
 * A token value in a URL is refused on every route: URLs end up in logs, proxies and browser
 * history. The request logger blanks it too (reqSerializer), so the refusal itself leaks nothing.
 */
export const noTokenInUrlPlugin = fp(
  async (app: FastifyInstance) => {
    app.addHook('onRequest', async (request: FastifyRequest) => {
      if (containsToken(request.url)) {
        throw new errors.BadRequest('an access token in a URL is refused: send it in the Authorization header. Revoke that token (Access tokens): it may have been recorded on the way');
      }
    });
  },
  { name: 'svc-no-token-in-url' },
);

/** Fastify's request log line, with token values blanked out of the URL. */
export function reqSerializer(req: { method: string; url: string; host?: string; ip?: string }) {
  return { method: req.method, url: redactTokens(req.url), host: req.host, remoteAddress: req.ip };
}
