import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { authPlugin, Jwts } from './auth.ts';
import { Compose } from './compose.ts';
import { dockerProxyRoutes } from './docker-proxy.ts';
import { Engine } from './engine.ts';
import { endpointRoutes } from './endpoints.ts';
import { lowercaseKeys, PORTAINER_VERSION, PortainerError } from './portainer.ts';
import { stackRoutes } from './stacks.ts';
import { ManagerState } from './state.ts';

export interface ManagerOptions {
  /** Where the tool keeps its state and the stacks' files (a named volume in its container). */
  dataDir: string;
  /** The engine's unix socket. */
  dockerSocket: string;
  /** The compose v2 binary (the CLI plugin works on its own). */
  composeBin: string;
  /** scrypt hash of admin's password (accounts/passwords.ts form); kept in the state once given. */
  adminPasswordHash?: string;
  logger: Logger;
}

/**
 * The management tool: Portainer's API (spec 4.5) for the one engine it runs beside. Portainer's
 * error body `{ message, details }` everywhere; request keys in any case.
 */
export async function buildManager(opts: ManagerOptions): Promise<FastifyInstance> {
  const state = await ManagerState.open(opts.dataDir);
  if (opts.adminPasswordHash && state.current.adminPasswordHash !== opts.adminPasswordHash) {
    await state.update((d) => void (d.adminPasswordHash = opts.adminPasswordHash));
  }
  const engine = new Engine(opts.dockerSocket);
  const compose = new Compose({ bin: opts.composeBin, dockerHost: `unix://${opts.dockerSocket}` });

  const app = Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    bodyLimit: 2 * 1024 * 1024,
    // Portainer answers a stack file of many MB; ours stop at 1 MB by schema
    ajv: { customOptions: { coerceTypes: true, removeAdditional: false, allErrors: false } },
    forceCloseConnections: true,
    // Fastify's request lines carry the full URL, and clients may put a key in it (?token=, ?X-API-Key=)
    disableRequestLogging: true,
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.info({ method: request.method, path: request.url.split('?')[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
  });

  // Clients send `Content-Type: application/json` with no body on DELETE and start/stop.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, async (_request: unknown, body: string) => {
    if (body.trim() === '') return undefined;
    try {
      return JSON.parse(body);
    } catch {
      throw new PortainerError(400, 'Invalid request payload: the body is not JSON', 'Bad Request');
    }
  });
  app.addHook('preValidation', async (request) => {
    if (request.body && typeof request.body === 'object') request.body = lowercaseKeys(request.body);
  });

  app.setErrorHandler((err, request, reply) => {
    if (err instanceof PortainerError) {
      if (err.retryAfter !== undefined) reply.header('Retry-After', String(err.retryAfter));
      if (err.statusCode >= 500) request.log.warn({ status: err.statusCode, message: err.message }, 'request failed');
      return reply.code(err.statusCode).send({ message: err.message, details: err.details });
    }
    const e = err as { validation?: unknown; statusCode?: number; message: string };
    if (e.validation) return reply.code(400).send({ message: 'Invalid request payload', details: e.message });
    if (e.statusCode && e.statusCode < 500) return reply.code(e.statusCode).send({ message: e.message, details: e.message });
    request.log.error({ err }, 'request failed');
    return reply.code(500).send({ message: 'Internal server error', details: e.message });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ message: `No route for ${request.method} ${request.url.split('?')[0]}`, details: 'Not Found' }));

  await app.register(authPlugin, { state, jwts: new Jwts(() => state.current.jwtSecret), adminHash: () => state.current.adminPasswordHash });

  const status = async () => ({ Version: PORTAINER_VERSION, InstanceID: state.current.instanceId });
  app.get('/api/status', { config: { public: true }, schema: {} }, status);
  app.get('/api/system/status', { config: { public: true }, schema: {} }, status);
  app.get('/api/system/version', { schema: {} }, async () => ({
    UpdateAvailable: false,
    LatestVersion: '',
    ServerVersion: PORTAINER_VERSION,
    ServerEdition: 'CE',
    DatabaseVersion: PORTAINER_VERSION,
    Build: { BuildNumber: '', ImageTag: '', NodejsVersion: process.version, YarnVersion: '', WebpackVersion: '', GoVersion: '', GitCommit: '', Env: [] },
  }));

  await app.register(endpointRoutes, { state });
  await app.register(stackRoutes, { state, engine, compose, dataDir: opts.dataDir });
  await app.register(dockerProxyRoutes, { state, engine });
  return app;
}
