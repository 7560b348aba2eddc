import type { FastifyInstance, FastifyRequest, RouteHandlerMethod } from 'fastify';
import fp from 'fastify-plugin';
import { actorOf, withAuditActor, type AuditEntry, type AuditLog } from '../../accounts/index.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** Writes an audit row with this request's caller and address as the actor. */
    audit(action: string, entry?: AuditEntry): Promise<void>;
  }
}

/**
 * The audit log on every route: `request.audit(action, …)` for the routes' own actions, and each
 * handler runs with its caller as the current audit actor, so a refusal deep in the lifecycle
 * (a quota) is written with the right actor and address too.
 */
export const auditPlugin = fp(
  async (app: FastifyInstance, opts: { audit: AuditLog }) => {
    app.decorateRequest('audit', function (this: FastifyRequest, action: string, entry?: AuditEntry) {
      return opts.audit.record(action, actorOf(this.principal, this.ip), entry);
    });
    app.addHook('onRoute', (route) => {
      const handler = route.handler as RouteHandlerMethod;
      route.handler = function (this: FastifyInstance, request, reply) {
        return withAuditActor(actorOf(request.principal, request.ip), () => handler.call(this, request, reply));
      } as RouteHandlerMethod;
    });
  },
  { name: 'svc-audit' },
);
