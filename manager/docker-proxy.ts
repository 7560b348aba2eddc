import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Engine } from './engine.ts';
import { PortainerError } from './portainer.ts';
import type { ManagerState } from './state.ts';

/** Request headers that belong to this hop or carry the tool's own credentials. */
const DROPPED_REQUEST = new Set(['host', 'authorization', 'x-api-key', 'cookie', 'connection', 'keep-alive', 'upgrade', 'proxy-authorization', 'te', 'trailer']);
const DROPPED_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'trailer']);
/** Query parameters that carry the tool's credentials: never shown to the engine. */
const CREDENTIAL_PARAMS = new Set(['token', 'x-api-key']);

/**
 * `/api/endpoints/:id/docker/<engine path>`, passed to the engine with both bodies streamed: a build
 * tar goes up as it arrives and its JSON lines come back as the engine writes them.
 */
export async function dockerProxyRoutes(app: FastifyInstance, opts: { state: ManagerState; engine: Engine }): Promise<void> {
  // Bodies are streamed, never parsed: any content type is accepted and left unread in request.raw.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));

  app.all('/api/endpoints/:id/docker/*', {
    schema: { params: { type: 'object', required: ['id'], properties: { id: { type: 'string', maxLength: 12 } } } },
  }, async (request, reply) => {
    const id = Number((request.params as { id: string }).id);
    if (!Number.isInteger(id) || !opts.state.current.endpoints.some((e) => e.Id === id)) {
      throw new PortainerError(404, 'Unable to find an environment with the specified identifier inside the database', 'Not Found');
    }
    return forward(request, reply, opts.engine, enginePath(request.raw.url ?? '', id));
  });
}

/** The engine path of a pass-through URL, or a 400 for one that tries to leave the docker/ prefix. */
export function enginePath(url: string, id: number): string {
  const queryAt = url.indexOf('?');
  const rawPath = queryAt < 0 ? url : url.slice(0, queryAt);
  const prefix = `/api/endpoints/${id}/docker`;
  const rest = rawPath.slice(rawPath.indexOf('/docker/') + '/docker'.length);
  let decoded: string;
  try {
    decoded = decodeURIComponent(rest);
  } catch {
    throw new PortainerError(400, 'Invalid path: bad percent-encoding', 'Bad Request');
  }
  const segments = decoded.split(/[/\\]/);
  if (!rawPath.startsWith(`/api/endpoints/`) || !rest.startsWith('/') || segments.some((s) => s === '..' || s === '.') || /[\0\\]/.test(decoded)) {
    throw new PortainerError(400, `Invalid path: it must stay under ${prefix}/`, 'Bad Request');
  }
  const params = new URLSearchParams(queryAt < 0 ? '' : url.slice(queryAt + 1));
  for (const key of [...params.keys()]) if (CREDENTIAL_PARAMS.has(key.toLowerCase())) params.delete(key);
  const query = params.toString();
  return rest + (query ? `?${query}` : '');
}

function forward(request: FastifyRequest, reply: FastifyReply, engine: Engine, path: string): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(request.headers)) {
    if (v !== undefined && !DROPPED_REQUEST.has(k.toLowerCase())) headers[k] = v;
  }
  return new Promise((resolve, reject) => {
    const upstream = engine.request(request.method, path, headers);
    const fail = (err: Error) => reject(new PortainerError(502, 'Unable to reach the Docker engine', err.message));
    upstream.once('error', fail);
    upstream.once('response', (res: IncomingMessage) => {
      upstream.off('error', fail);
      for (const [k, v] of Object.entries(res.headers)) {
        if (v !== undefined && !DROPPED_RESPONSE.has(k.toLowerCase())) reply.header(k, v);
      }
      // the client went away: stop the engine's side too (a followed log, a long build)
      reply.raw.once('close', () => { if (!res.complete) res.destroy(); });
      reply.code(res.statusCode ?? 502).send(res);
      resolve();
    });
    request.raw.pipe(upstream);
  });
}
