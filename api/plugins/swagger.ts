import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/** OpenAPI document built from the route schemas, served with an interactive UI at /api/swagger. */
export const swaggerPlugin = fp(
  async (app: FastifyInstance) => {
    await app.register(swagger, {
      openapi: {
        info: {
          title: 'Sandbox service API',
          version: '1',
          description: 'Every call sends `Authorization: Bearer <svc_ token>`. Errors are `{ "error": { "code", "message" } }`.',
        },
        components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
        security: [{ bearer: [] }],
      },
    });
    await app.register(swaggerUi, { routePrefix: '/api/swagger', uiConfig: { deepLinking: true } });
  },
  { name: 'svc-swagger' },
);
