import type { FastifyError, FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/**
 * One error shape for every route: `{ error: { code, message } }`. Validation failures are 400
 * with the field named; our own catalogue errors keep their code; anything unexpected is a 500
 * that is logged and told to the client without internals.
 */
export const errorsPlugin = fp(
  async (app: FastifyInstance) => {
    app.setErrorHandler((err: FastifyError, request, reply) => {
      if (err.validation) {
        const where = err.validationContext ?? 'request';
        return reply.status(400).send({ error: { code: 'SVC_BAD_REQUEST', message: `${where} ${err.message.replace(/^(body|querystring|params|headers)\s*/, '')}` } });
      }
      const status = err.statusCode && err.statusCode >= 400 ? err.statusCode : 500;
      if (status >= 500 && !err.code?.startsWith('SVC_')) {
        request.log.error({ err }, 'unhandled error');
        return reply.status(500).send({ error: { code: 'SVC_INTERNAL', message: 'internal error; it has been logged, try again' } });
      }
      if (status >= 500) request.log.warn({ err }, 'request failed');
      const retryAfter = (err as { retryAfter?: unknown }).retryAfter;
      if (typeof retryAfter === 'number' && retryAfter > 0) reply.header('retry-after', String(Math.ceil(retryAfter)));
      const code = err.code?.startsWith('SVC_') ? err.code : 'SVC_BAD_REQUEST';
      return reply.status(status).send({ error: { code, message: err.message } });
    });
    app.setNotFoundHandler((request, reply) => {
      reply.status(404).send({ error: { code: 'SVC_NOT_FOUND', message: `no route ${request.method} ${request.url.split('?')[0]}; see /api/swagger` } });
    });
  },
  { name: 'svc-errors' },
);
