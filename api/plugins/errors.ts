import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { errors, retryAfterOf } from '../../core/errors.ts';
import { errorResponses } from '../schemas/common.ts';

/** Fastify's own request errors, told as the catalogue's errors (their words say what to do). */
const FRAMEWORK: Record<string, (request: FastifyRequest, err: FastifyError) => FastifyError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: (request) => new errors.TooLarge(request.routeOptions.bodyLimit),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (request) => new errors.UnsupportedMediaType(request.headers['content-type'] ?? ''),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new errors.BadRequest('the body is empty but its content-type says JSON: send a JSON body, or no content-type'),
  FST_ERR_CTP_INVALID_JSON_BODY: () => new errors.BadRequest('the body is not valid JSON'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => new errors.BadRequest('the body is shorter or longer than its Content-Length'),
  FST_ERR_BAD_URL: () => new errors.BadRequest('the URL holds a malformed %-escape: encode each path part with encodeURIComponent'),
  FST_ERR_VALIDATION: (_request, err) => {
    const where = err.validationContext ?? 'request';
    return new errors.BadRequest(`${where} ${err.message.replace(/^(body|querystring|params|headers)\s*/, '')}`);
  },
};

/** Other libraries' client errors, by status, as the catalogue's general errors. */
const BY_STATUS: Record<number, (message: string) => FastifyError> = {
  400: (m) => new errors.BadRequest(m),
  401: (m) => new errors.Unauthenticated(m),
  403: (m) => new errors.Forbidden(m),
  404: (m) => new errors.NotFound(m),
  409: (m) => new errors.Conflict(m),
};

/** The catalogue error a client is told for `err`; anything not ours and not a client error is internal. */
function catalogued(err: FastifyError, request: FastifyRequest): FastifyError {
  if (err.code?.startsWith('SVC_')) {
    if ((err.statusCode ?? 500) >= 500) request.log.warn({ err }, 'request failed');
    return err;
  }
  const framework = FRAMEWORK[err.code];
  if (framework) return framework(request, err);
  const status = err.statusCode ?? 500;
  const general = BY_STATUS[status];
  if (general) return general(err.message);
  if (status >= 400 && status < 500) {
    // a client error the catalogue has no code for: still the client's, and worth a code of its own
    request.log.warn({ err }, 'client error without a catalogue code');
    return new errors.BadRequest(err.message);
  }
  request.log.error({ err }, 'unhandled error');
  return new errors.Internal();
}

/** Sends the one error shape: `{ error: { code, message } }`, with Retry-After when the error asks for a wait. */
function sendError(reply: FastifyReply, err: FastifyError): FastifyReply {
  const retryAfter = retryAfterOf(err);
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
  return reply.status(err.statusCode ?? 500).send({ error: { code: err.code, message: err.message } });
}

/**
 * One error shape for every route: `{ error: { code, message } }` with a code of the catalogue
 * (core/errors.ts) and its status. Validation failures are 400 with the field named; Fastify's own
 * errors (body too large, unsupported content type, bad JSON, bad URL) get the catalogue's code;
 * anything unexpected is a 500 that is logged and told to the client without internals.
 */
export const errorsPlugin = fp(
  async (app: FastifyInstance) => {
    app.setErrorHandler((err: FastifyError, request, reply) => sendError(reply, catalogued(err, request)));
    app.setNotFoundHandler((request, reply) => sendError(reply, new errors.NotFound(`no route ${request.method} ${request.url.split('?')[0]}; see /api/swagger`)));
    // A route that reads a body can also be refused before it runs (SVC_TOO_LARGE, SVC_UNSUPPORTED_MEDIA_TYPE): say so in its OpenAPI answers.
    app.addHook('onRoute', (route) => {
      if (route.schema?.body && route.schema.response) route.schema.response = { ...errorResponses(413, 415), ...route.schema.response };
    });
  },
  { name: 'svc-errors' },
);

/**
 * Fastify's `frameworkErrors` option: errors raised before a route is found (a malformed URL)
 * would otherwise be answered in Fastify's own shape.
 */
export function frameworkErrors(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  sendError(reply, catalogued(err, request));
}
