import type { FastifyInstance } from 'fastify';
import { endpointJson, PortainerError } from './portainer.ts';
import type { ManagerState } from './state.ts';

const FORM_LIMIT = 1024 * 1024;

/**
 * Environments. Every one is the sandbox's own engine: Portainer's local type (1) is the only one
 * that can be made, and the list holds `local` (Id 1) from the start.
 */
export async function endpointRoutes(app: FastifyInstance, opts: { state: ManagerState }): Promise<void> {
  const { state } = opts;

  // Portainer takes POST /api/endpoints as multipart/form-data; urlencoded forms work as well.
  app.addContentTypeParser('multipart/form-data', { parseAs: 'buffer', bodyLimit: FORM_LIMIT }, async (request: { headers: Record<string, unknown> }, body: Buffer) => {
    try {
      const form = await new Response(new Uint8Array(body), { headers: { 'content-type': String(request.headers['content-type']) } }).formData();
      return Object.fromEntries([...form].filter(([, v]) => typeof v === 'string'));
    } catch {
      throw new PortainerError(400, 'Invalid multipart form', 'Bad Request');
    }
  });
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: FORM_LIMIT }, async (_req: unknown, body: string) =>
    Object.fromEntries(new URLSearchParams(body)));

  app.get('/api/endpoints', {
    schema: { querystring: { type: 'object', properties: { name: { type: 'string' }, start: { type: 'integer', minimum: 0 }, limit: { type: 'integer', minimum: 0 } } } },
  }, async (request, reply) => {
    const { name, start = 0, limit = 0 } = request.query as { name?: string; start?: number; limit?: number };
    const all = state.current.endpoints.filter((e) => name === undefined || e.Name === name);
    const page = limit > 0 ? all.slice(start, start + limit) : all.slice(start);
    reply.header('X-Total-Count', String(all.length)).header('X-Total-Available', String(state.current.endpoints.length));
    return page.map(endpointJson);
  });

  app.get('/api/endpoints/:id', {
    schema: { params: { type: 'object', required: ['id'], properties: { id: { type: 'integer', minimum: 0, maximum: 2 ** 31 } } } },
  }, async (request) => {
    const id = (request.params as { id: number }).id;
    const endpoint = state.current.endpoints.find((e) => e.Id === id);
    if (!endpoint) throw new PortainerError(404, 'Unable to find an environment with the specified identifier inside the database', 'Not Found');
    return endpointJson(endpoint);
  });

  app.post('/api/endpoints', {
    schema: {
      body: {
        type: 'object',
        required: ['name', 'endpointcreationtype'],
        properties: { name: { type: 'string', minLength: 1, maxLength: 128 }, endpointcreationtype: { type: 'string', pattern: '^[0-9]{1,2}$' } },
      },
    },
  }, async (request) => {
    const { name, endpointcreationtype } = request.body as { name: string; endpointcreationtype: string };
    if (endpointcreationtype !== '1') {
      throw new PortainerError(400, 'Invalid environment type: only 1 (the local Docker engine) can be added here', 'Bad Request');
    }
    const endpoint = await state.update((d) => {
      if (d.endpoints.some((e) => e.Name === name)) throw new PortainerError(409, 'Name is not unique', 'Conflict');
      const e = { Id: d.nextEndpointId++, Name: name };
      d.endpoints.push(e);
      return e;
    });
    return endpointJson(endpoint);
  });
}
