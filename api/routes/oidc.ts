import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { recordSignIn, SESSION_TTL_MS, type WebSessions, SsoRefused, type OidcSignIn } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';
import type { Store } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';
import { readCookie, SESSION_COOKIE } from '../web-session.ts';

export interface OidcRoutesOptions {
  store: Store;
  sessions: WebSessions;
  oidc: OidcSignIn | undefined;
  passwordSignIn: boolean;
}

/**
 * The browser's state of a sign-in in progress. SameSite=Lax, not Strict: the provider sends the
 * browser back with a top-level GET from its own site, which must carry it.
 */
const STATE_COOKIE = '__Host-svc_oidc';

/** Single sign-on with OpenID Connect (issue 24): the sign-in page's button, the redirect, the callback. */
export const oidcRoutes: FastifyPluginAsyncTypebox<OidcRoutesOptions> = async (app, { store, sessions, oidc, passwordSignIn }) => {
  const tags = ['web session'];

  app.get('/auth/methods', {
    config: { public: true },
    schema: {
      tags, summary: 'How the web UI signs in: password, and/or a named identity provider',
      response: { 200: Type.Object({ password: Type.Boolean(), oidc: Type.Union([Type.Object({ name: Type.String(), start: Type.String() }), Type.Null()]) }) },
    },
  }, async () => ({ password: passwordSignIn, oidc: oidc ? { name: oidc.name, start: '/api/auth/oidc/start' } : null }));

  app.get('/auth/oidc/start', {
    config: { public: true },
    schema: { tags, summary: 'Start single sign-on: redirects to the identity provider', response: { 302: Type.Null(), ...errorResponses(404, 503) } },
  }, async (_request, reply) => {
    if (!oidc) throw new errors.NotFound('single sign-on is not set up on this service (SVC_OIDC_ISSUER)');
    const { url, state } = await oidc.start();
    reply.header('set-cookie', `${STATE_COOKIE}=${state}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=600`);
    return reply.redirect(url, 302);
  });

  app.get('/auth/oidc/callback', {
    config: { public: true },
    schema: {
      tags, summary: 'Where the identity provider sends the browser back; signs in and redirects to the web UI (a refusal: to the sign-in page with the reason)',
      querystring: Type.Record(Type.String(), Type.String({ maxLength: 4096 })),
      response: { 302: Type.Null(), ...errorResponses(404) },
    },
  }, async (request, reply) => {
    if (!oidc) throw new errors.NotFound('single sign-on is not set up on this service (SVC_OIDC_ISSUER)');
    const clearState = `${STATE_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=0`;
    const query = request.url.includes('?') ? request.url.slice(request.url.indexOf('?')) : '';
    try {
      const user = await oidc.finish(oidc.callbackUrl(query), readCookie(request.headers.cookie, STATE_COOKIE));
      const { id } = await sessions.create(user.id);
      await recordSignIn(store, user.id);
      request.principal = { user, session: id }; // the actor of this row: who signed in
      await request.audit('session.sign_in', { target: user.name, detail: `single sign-on (${oidc.name})` });
      reply.header('set-cookie', [clearState, `${SESSION_COOKIE}=${id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=${SESSION_TTL_MS / 1000}`]);
      return reply.redirect('/#/sandboxes', 302);
    } catch (err) {
      if (!(err instanceof SsoRefused)) throw err;
      await request.audit('session.sign_in', { outcome: 'refused', detail: `single sign-on: ${err.message}` });
      reply.header('set-cookie', clearState);
      return reply.redirect(`/?sso_error=${encodeURIComponent(err.message)}#/`, 302);
    }
  });
};
