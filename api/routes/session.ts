import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { changePassword, DISABLED, forbidLimited, publicUser, recordSignIn, verifyUserPassword, type WebSessions } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';
import type { Store } from '../../store/index.ts';
import type { SignInGuard } from '../sign-in-guard.ts';
import { errorResponses } from '../schemas/common.ts';
import { clearSessionCookie, refuseCrossSite, requestSession, setSessionCookie } from '../web-session.ts';

export interface SessionRoutesOptions {
  store: Store;
  sessions: WebSessions;
  guard: SignInGuard;
  siteOrigin: string;
  /** SVC_PASSWORD_SIGN_IN: off leaves single sign-on as the only way into the web UI. */
  passwordSignIn: boolean;
}

const User = Type.Object({ id: Type.String(), name: Type.String(), admin: Type.Boolean(), created_at: Type.String() });
const SessionAnswer = Type.Object({ user: User, csrf: Type.String({ description: 'Send back in X-CSRF-Token on every change made with the session cookie.' }) });

/** Web UI sign-in (spec 5.7): a session cookie for the user's password; sign-out; password change. */
export const sessionRoutes: FastifyPluginAsyncTypebox<SessionRoutesOptions> = async (app, { store, sessions, guard, siteOrigin, passwordSignIn }) => {
  const tags = ['web session'];

  app.post('/session', {
    config: { public: true },
    schema: {
      tags, summary: 'Sign in to the web UI with user name and password (sets the session cookie)',
      description: 'One answer for a wrong name or password. After repeated failures for a name or from an address, further tries get 429 with Retry-After until a growing wait has passed.',
      body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 }), password: Type.String({ minLength: 1, maxLength: 256 }) }, { additionalProperties: false }),
      response: { 200: SessionAnswer, ...errorResponses(400, 401, 403, 429, 503) },
    },
  }, async (request, reply) => {
    refuseCrossSite(request, siteOrigin);
    if (!passwordSignIn) throw new errors.Forbidden('password sign-in is turned off here: use the single sign-on button of the web UI');
    const { name, password } = request.body;
    let user;
    try {
      user = await guard.attempt(name, request.ip, () => verifyUserPassword(store, name, password));
    } catch (err) {
      await request.audit('session.sign_in', { outcome: 'refused', target: name, detail: (err as Error).message });
      throw err;
    }
    if (!user) {
      await request.audit('session.sign_in', { outcome: 'failed', target: name, detail: 'wrong user name or password' });
      throw new errors.Unauthenticated('wrong user name or password');
    }
    if (user.disabled_at) {
      await request.audit('session.sign_in', { outcome: 'refused', target: name, detail: 'account disabled' });
      throw new errors.AccountDisabled(user.name);
    }
    const { id, session } = await sessions.create(user.id);
    await recordSignIn(store, user.id);
    request.principal = { user, session: id }; // the actor of this row: who signed in
    await request.audit('session.sign_in', { target: user.name });
    setSessionCookie(reply, id);
    request.log.info({ user: user.name }, 'signed in');
    return { user: publicUser(user), csrf: session.csrf };
  });

  app.get('/session', {
    config: { public: true },
    schema: { tags, summary: 'The signed-in user and the CSRF token of this session', response: { 200: SessionAnswer, ...errorResponses(401, 403) } },
  }, async (request) => {
    const { session } = await requestSession(request, sessions, siteOrigin);
    const user = await store.users.get(session.userId);
    if (!user) throw new errors.Unauthenticated('your account no longer exists');
    if (user.disabled_at) throw new errors.Unauthenticated(DISABLED);
    return { user: publicUser(user), csrf: session.csrf };
  });

  app.delete('/session', {
    config: { public: true },
    schema: { tags, summary: 'Sign out (ends this session)', response: { 200: Type.Object({ signed_out: Type.Literal(true) }), ...errorResponses(401, 403) } },
  }, async (request, reply) => {
    const { id } = await requestSession(request, sessions, siteOrigin);
    await sessions.end(id);
    clearSessionCookie(reply);
    return { signed_out: true as const };
  });

  app.post('/me/password', {
    schema: {
      tags, summary: 'Change your password (needs the current one); ends your other web sessions',
      body: Type.Object({ current_password: Type.String({ minLength: 1, maxLength: 256 }), new_password: Type.String({ maxLength: 1024 }) }, { additionalProperties: false }),
      response: { 200: Type.Object({ changed: Type.Literal(true), other_sessions_ended: Type.Integer() }), ...errorResponses(400, 401, 403, 429) },
    },
  }, async (request) => {
    const { principal, body } = request;
    forbidLimited(principal, 'change the password');
    const user = await guard.attempt(principal.user.name, request.ip, () => changePassword(store, principal.user.id, body.current_password, body.new_password));
    if (!user) {
      await request.audit('account.password_change', { outcome: 'failed', target: principal.user.name });
      throw new errors.Forbidden('the current password is not right; nothing was changed');
    }
    await request.audit('account.password_change', { target: user.name });
    const ended = await sessions.endOthers(user.id, principal.session);
    request.log.info({ user: user.name, ended }, 'password changed');
    return { changed: true as const, other_sessions_ended: ended };
  });
};
