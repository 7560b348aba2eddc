import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { forbidLimited, MAX_SECRET_BYTES, removeSecret, setSecret } from '../../accounts/index.ts';
import type { Store } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';

const Scope = Type.Union([Type.Literal('all'), Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { minItems: 1, maxItems: 100 })], {
  description: '`all` of the owner\'s sandboxes (the default), or these sandboxes by name',
});
const Secret = Type.Object({ name: Type.String(), scope: Scope, created_at: Type.String(), updated_at: Type.String() }, { $id: 'Secret' });
const NameParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 128 }) });

/** What happens to the running sandboxes when the owner's secrets change (exec/secret-delivery.ts). */
export interface SecretsChanged {
  changed(ownerId: string): Promise<void>;
}

/**
 * The caller's secrets (issue 35): values go in and never come out (not in an answer, a log or an
 * audit row, which names the secret); running sandboxes in scope have the change when the call answers.
 */
export const secretRoutes: FastifyPluginAsyncTypebox<{ store: Store; delivery: SecretsChanged }> = async (app, { store, delivery }) => {
  const tags = ['secrets'];
  app.addSchema(Secret);

  app.get('/me/secrets', {
    schema: { tags, summary: "The caller's secrets: names, scopes and dates, never values", response: { 200: Type.Array(Type.Ref('Secret')), ...errorResponses(401, 403) } },
  }, async ({ principal }) => {
    forbidLimited(principal, 'manage secrets');
    return store.secrets.list(principal.user.id);
  });

  app.put('/me/secrets/:name', {
    schema: {
      tags,
      summary: 'Set a secret (new: 201, replaced: 200); its value is write-only',
      description: 'The name is an environment variable name. Sandboxes in scope get it as an environment variable in exec, terminal and ssh sessions and as the file `/run/svc/secrets/<NAME>`; running ones before this call answers.',
      params: NameParams,
      body: Type.Object({ value: Type.String({ minLength: 1, maxLength: MAX_SECRET_BYTES }), scope: Type.Optional(Scope) }, { additionalProperties: false }),
      response: { 200: Type.Ref('Secret'), 201: Type.Ref('Secret'), ...errorResponses(400, 401, 403, 404, 409) },
    },
  }, async (request, reply) => {
    const { principal, params, body } = request;
    forbidLimited(principal, 'manage secrets');
    const { meta, created } = await setSecret(store, principal.user.id, { name: params.name, value: body.value, scope: body.scope ?? 'all' });
    await request.audit(created ? 'secret.create' : 'secret.update', { target: meta.name, detail: meta.scope === 'all' ? 'scope: all' : `scope: ${meta.scope.join(', ')}` });
    await delivery.changed(principal.user.id);
    reply.status(created ? 201 : 200);
    return meta;
  });

  app.delete('/me/secrets/:name', {
    schema: { tags, summary: 'Remove a secret: gone from running sandboxes when this answers', params: NameParams, response: { 200: Type.Ref('Secret'), ...errorResponses(400, 401, 403, 404) } },
  }, async (request) => {
    const { principal, params } = request;
    forbidLimited(principal, 'manage secrets');
    const removed = await removeSecret(store, principal.user.id, params.name);
    await request.audit('secret.delete', { target: removed.name });
    await delivery.changed(principal.user.id);
    return removed;
  });
};
