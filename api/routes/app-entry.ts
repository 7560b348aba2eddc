import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppPasses, WebSessions } from '../../accounts/index.ts';
import { httpsUrl } from '../../core/addresses.ts';
import { errors } from '../../core/errors.ts';
import { APP_ENTRY_PATH, routeFor } from '../../edge/index.ts';
import type { Store } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';
import { readCookie, SESSION_COOKIE } from '../web-session.ts';

export interface AppEntryRoutesOptions {
  store: Store;
  sessions: WebSessions;
  passes: AppPasses;
  domain: string;
  port: number;
}

/** The app address `to` names (https, `<label>.<domain>` on our port), as its origin, label and path. */
function appAddress(to: string, domain: string, port: number): { origin: string; label: string; path: string } {
  let url: URL;
  try {
    url = new URL(to);
  } catch {
    throw new errors.BadRequest('to must be the https:// address of an app');
  }
  const route = routeFor(url.hostname, domain);
  const origin = httpsUrl(url.hostname, port);
  if (url.protocol !== 'https:' || route.kind !== 'app-http' || url.origin !== origin || url.username || url.password) {
    throw new errors.BadRequest(`to must be the https:// address of an app of ${domain}`);
  }
  return { origin, label: route.label, path: `${url.pathname}${url.search}` };
}

/**
 * The sign-in bounce of a private app address (issue 35): the app's host sends a browser without a
 * pass here; signed in, it goes back with a one-use ticket that the edge trades for a cookie of that
 * address alone (the session cookie never leaves this host); not signed in, to the web UI's sign-in,
 * which brings it back here.
 */
export const appEntryRoutes: FastifyPluginAsyncTypebox<AppEntryRoutesOptions> = async (app, { store, sessions, passes, domain, port }) => {
  app.get('/apps/enter', {
    config: { public: true },
    schema: {
      tags: ['web session'],
      summary: 'Sign in to a private app address (tunnel.visibility): redirects back to the app with a one-use ticket, or to the web UI to sign in first',
      querystring: Type.Object({ to: Type.String({ minLength: 1, maxLength: 4096, description: 'The app address to come back to' }) }, { additionalProperties: false }),
      response: { 302: Type.Null(), ...errorResponses(400) },
    },
  }, async (request, reply) => {
    const target = appAddress(request.query.to, domain, port);
    const id = readCookie(request.headers.cookie, SESSION_COOKIE);
    const session = id ? await sessions.get(id) : null;
    const user = session ? await store.users.get(session.userId) : undefined;
    if (!user || user.disabled_at) return reply.redirect(`/?app=${encodeURIComponent(`${target.origin}${target.path}`)}`, 302);
    const ticket = passes.ticket(target.label, user.id);
    return reply.header('cache-control', 'no-store').redirect(`${target.origin}${APP_ENTRY_PATH}?ticket=${ticket}&to=${encodeURIComponent(target.path)}`, 302);
  });
};
