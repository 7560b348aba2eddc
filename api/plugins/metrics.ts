import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { ServiceMetrics } from '../../core/metrics.ts';

/** Counts every answered request by method, route pattern (never the raw path) and status. */
export const metricsPlugin = fp(
  async (app: FastifyInstance, opts: { metrics: ServiceMetrics }) => {
    app.addHook('onResponse', async (request, reply) => {
      opts.metrics.apiRequest(request.method, request.routeOptions.url, reply.statusCode, reply.elapsedTime);
    });
  },
  { name: 'svc-metrics' },
);
