import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { addSshKey, createToken, forbidLimited, listSshKeys, listTokens, publicToken, publicUser, removeSshKey, revokeToken, type Admission } from '../../accounts/index.ts';
import type { Lifecycle, WakeLimits } from '../../lifecycle/index.ts';
import { Quotas, QuotaUsage } from '../schemas/quotas.ts';
import type { Store } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';

const Token = Type.Object({
  id: Type.String(),
  user_id: Type.String(),
  sandbox: Type.Optional(Type.String()),
  name: Type.Optional(Type.String()),
  created_at: Type.String(),
  revoked_at: Type.Optional(Type.String()),
  last_used_at: Type.Optional(Type.String()),
});

const SshKey = Type.Object({ id: Type.String(), key: Type.String(), fingerprint: Type.String(), created_at: Type.String() });
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

/** The caller's own account: identity, access tokens, SSH keys. */
export const meRoutes: FastifyPluginAsyncTypebox<{ store: Store; lifecycle: Lifecycle; admission: Admission; wakeLimits: WakeLimits }> = async (app, { store, lifecycle, admission, wakeLimits }) => {
  const tags = ['account'];

  app.get('/me', {
    schema: {
      tags, summary: 'The caller; for a limited token, includes `sandbox`; the quotas and what of them is used',
      response: {
        200: Type.Object({
          id: Type.String(), name: Type.String(), admin: Type.Boolean(), created_at: Type.String(), sandbox: Type.Optional(Type.String()),
          quotas: Quotas, usage: QuotaUsage,
        }),
        ...errorResponses(401),
      },
    },
  }, async ({ principal }) => ({
    ...publicUser(principal.user),
    ...(principal.sandbox ? { sandbox: principal.sandbox } : {}),
    quotas: admission.quotasOf(principal.user),
    usage: { ...(await admission.usage(principal.user)), wakes_this_hour: await wakeLimits.used(principal.user.id) },
  }));

  app.get('/me/tokens', {
    schema: { tags, summary: 'Access tokens of the caller (never their values)', response: { 200: Type.Array(Token), ...errorResponses(401, 403) } },
  }, async ({ principal }) => {
    forbidLimited(principal, 'manage access tokens');
    const tokens = await listTokens(store, principal.user.id);
    const used = await store.tokens.lastUsed(tokens.map((t) => t.id));
    return tokens.map((t) => publicToken(t, used.get(t.id)));
  });

  app.post('/me/tokens', {
    schema: {
      tags, summary: 'New access token; the value is shown once, in this answer',
      body: Type.Object({ name: Type.Optional(Type.String({ maxLength: 100 })), sandbox: Type.Optional(Type.String({ maxLength: 64 })) }, { additionalProperties: false }),
      response: { 201: Type.Object({ token: Type.String(), record: Token }), ...errorResponses(400, 401, 403, 404) },
    },
  }, async (request, reply) => {
    const { principal, body } = request;
    forbidLimited(principal, 'create access tokens');
    const created = await createToken(store, { userId: principal.user.id, ...body });
    await request.audit('token.create', { target: created.token.id, ...(created.token.sandbox ? { sandbox: created.token.sandbox } : {}) });
    reply.status(201);
    return { token: created.value, record: publicToken(created.token) };
  });

  app.delete('/me/tokens/:id', {
    schema: { tags, summary: 'Revoke an access token', params: IdParams, response: { 200: Token, ...errorResponses(401, 403, 404) } },
  }, async (request) => {
    const { principal, params } = request;
    forbidLimited(principal, 'revoke access tokens');
    const token = await revokeToken(store, params.id, { userId: principal.user.id });
    await request.audit('token.revoke', { target: token.id });
    return publicToken(token);
  });

  app.get('/me/ssh-keys', {
    schema: { tags, summary: "SSH public keys accepted for root in the caller's sandboxes", response: { 200: Type.Array(SshKey), ...errorResponses(401) } },
  }, async ({ principal }) => listSshKeys(store, principal.user.id));

  app.post('/me/ssh-keys', {
    schema: {
      tags, summary: 'Register an SSH public key (one authorized_keys line)',
      body: Type.Object({ key: Type.String({ minLength: 1, maxLength: 16384 }) }, { additionalProperties: false }),
      response: { 201: SshKey, ...errorResponses(400, 401, 403, 409) },
    },
  }, async (request, reply) => {
    const { principal, body } = request;
    forbidLimited(principal, 'change SSH keys');
    const key = await addSshKey(store, principal.user.id, body.key);
    await request.audit('ssh_key.add', { target: key.fingerprint });
    await lifecycle.sshKeys.syncOwner(principal.user.id);
    reply.status(201);
    return key;
  });

  app.delete('/me/ssh-keys/:id', {
    schema: { tags, summary: 'Remove an SSH public key', params: IdParams, response: { 200: SshKey, ...errorResponses(401, 403, 404) } },
  }, async (request) => {
    const { principal, params } = request;
    forbidLimited(principal, 'change SSH keys');
    const key = await removeSshKey(store, principal.user.id, params.id);
    await request.audit('ssh_key.remove', { target: key.fingerprint });
    await lifecycle.sshKeys.syncOwner(principal.user.id);
    return key;
  });
};
