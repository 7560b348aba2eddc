import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { TLSSocket } from 'node:tls';
import { authenticate } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';
import type { Readiness } from '../../monitoring/index.ts';
import type { ServiceMetrics } from '../../core/metrics.ts';
import type { Store } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';

export interface OpsRoutesOptions {
  store: Store;
  readiness: () => Promise<Readiness>;
  /** Absent when the service runs with metrics off (SVC_METRICS=off): /metrics answers 404. */
  metrics?: ServiceMetrics;
}

const tags = ['operations'];
const ReadinessBody = Type.Object({
  ready: Type.Boolean(),
  checks: Type.Record(Type.String(), Type.String(), { description: '"ok", or why that part does not answer' }),
});

/**
 * Health and metrics for load balancers, supervisors and Prometheus (docs/operations.md).
 * /healthz and /readyz are open on both ports: they name parts, never secrets. /metrics is open
 * on the operator port (plain HTTP on 127.0.0.1); through the public port (TLS, by the edge) it
 * needs an admin's unlimited token.
 */
export const opsRoutes: FastifyPluginAsyncTypebox<OpsRoutesOptions> = async (app, opts) => {
  app.get('/healthz', {
    config: { public: true },
    schema: { tags, summary: 'Liveness: the process answers', response: { 200: Type.Object({ ok: Type.Literal(true) }) } },
  }, async (_request, reply) => reply.header('cache-control', 'no-store').send({ ok: true as const }));

  app.get('/readyz', {
    config: { public: true },
    schema: {
      tags, summary: 'Readiness: Redis, the store, the sandbox engine and the registry upstream answer (503 names those that do not)',
      response: { 200: ReadinessBody, 503: ReadinessBody },
    },
  }, async (_request, reply) => {
    const result = await opts.readiness();
    return reply.status(result.ready ? 200 : 503).header('cache-control', 'no-store').send(result);
  });

  app.get('/metrics', {
    config: { public: true },
    schema: {
      tags, summary: 'Prometheus metrics (text format); through the public port only with an admin token',
      produces: ['text/plain'], response: { 200: Type.String(), ...errorResponses(401, 403, 404) },
    },
  }, async (request, reply) => {
    if ((request.raw.socket as TLSSocket).encrypted) {
      const caller = await authenticate(opts.store, request.headers.authorization);
      if (!caller.user.admin || caller.sandbox) throw new errors.Forbidden('metrics need an admin token that is not limited to a sandbox (or the operator port on 127.0.0.1)');
    }
    if (!opts.metrics) throw new errors.NotFound('metrics are off in this process (SVC_METRICS=off)');
    const { contentType, body } = await opts.metrics.scrape();
    return reply.type(contentType).header('cache-control', 'no-store').send(body);
  });
};
