import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Lifecycle, SandboxView } from '../../lifecycle/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox, forbidLimited } from '../../accounts/index.ts';
import type { AuditOnce } from '../audit-once.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';
import { ArchiveResult, CreateSandboxBody, ForkSandboxBody, PatchSandboxBody, Sandbox, SandboxSummary } from '../schemas/sandbox.ts';

export interface SandboxRoutesOptions {
  store: Store;
  lifecycle: Lifecycle;
  auditOnce: AuditOnce;
}

/** A caller who reads a manager sandbox's password again within this long writes no new row. */
const REVEAL_ROW_EVERY_MS = 60_000;

/**
 * A sandbox record that carries the management tool's password (a manager sandbox's) is a reveal
 * of it: an audit row, whichever route answered with it (the create answer's is its create row),
 * at most one per actor (a token; a web session's user) and sandbox per REVEAL_ROW_EVERY_MS.
 */
async function revealed(request: FastifyRequest, auditOnce: AuditOnce, view: SandboxView): Promise<SandboxView> {
  if (!view.extras.manager_password) return view;
  const { principal } = request;
  const actor = principal.token ? `token:${principal.token.id}` : `user:${principal.user.id}`;
  if (await auditOnce.first(`manager_password_read:${actor}:${view.name}`, REVEAL_ROW_EVERY_MS)) {
    await request.audit('sandbox.manager_password_read', { sandbox: view.name });
  }
  return view;
}

/** Spec 4.1: the sandbox resource and its lifecycle verbs. Thin: authorise, then call lifecycle/. */
export const sandboxRoutes: FastifyPluginAsyncTypebox<SandboxRoutesOptions> = async (app, { store, lifecycle, auditOnce }) => {
  const reveal = (request: FastifyRequest, view: SandboxView) => revealed(request, auditOnce, view);
  app.addSchema(Sandbox);
  app.addSchema(SandboxSummary);
  const tags = ['sandboxes'];
  const params = SandboxParams;

  app.get('/sandboxes', {
    schema: { tags, summary: "The caller's sandboxes (with a limited token, only that one)", response: { 200: Type.Array(Type.Ref('SandboxSummary')), ...errorResponses(401, 503) } },
  }, async (request) => {
    const { principal } = request;
    const records = principal.sandbox
      ? [await store.sandboxes.get(principal.sandbox)].filter((r) => r !== undefined)
      : await store.sandboxes.listByOwner(principal.user.id, { secrets: false });
    return lifecycle.views.list(records);
  });

  app.post('/sandboxes', {
    schema: { tags, summary: 'Create a sandbox', body: CreateSandboxBody, response: { 201: Type.Ref('Sandbox'), ...errorResponses(400, 401, 403, 409, 422, 502, 503) } },
  }, async (request, reply) => {
    forbidLimited(request.principal, 'create sandboxes');
    const view = await lifecycle.create(request.principal.user, request.body);
    const { name: _name, ...settings } = request.body;
    await request.audit('sandbox.create', { sandbox: view.name, detail: JSON.stringify(settings) });
    reply.status(201);
    return view;
  });

  app.post('/sandboxes/:name/fork', {
    schema: {
      tags, params, body: ForkSandboxBody,
      summary: 'Fork the sandbox: a new sandbox of its owner with a copy of its volumes',
      description: 'Files, the inner engine\'s images, containers and volumes are copied (a running source is paused for the copy, '
        + 'then resumes; docs/lifecycle.md, "Forks"); the fork has its own certificates, addresses and timers and is running when this answers. '
        + 'A token limited to one sandbox answers 403, as for a create.',
      response: { 201: Type.Ref('Sandbox'), ...errorResponses(400, 401, 403, 404, 409, 410, 429, 502, 503) },
    },
  }, async (request, reply) => {
    forbidLimited(request.principal, 'fork sandboxes (a fork is a new sandbox)');
    const source = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const view = await lifecycle.fork(await lifecycle.owner(source), source, request.body.name);
    await request.audit('sandbox.fork', { sandbox: view.name, detail: JSON.stringify({ from: source.name }) });
    reply.status(201);
    return view; // its fork row stands for a reveal of a manager's password, as a create's does
  });

  app.get('/sandboxes/:name', {
    schema: { tags, summary: 'The sandbox record', params, response: { 200: Type.Ref('Sandbox'), ...errorResponses(401, 404, 409, 410, 503) } },
  }, async (request) => {
    return reveal(request, await lifecycle.views.view(await authorizeSandbox(store, request.principal, request.params.name, 'use')));
  });

  app.post('/sandboxes/:name/start', {
    schema: {
      tags, params,
      summary: 'Wake the sandbox',
      description: 'Answers once the sandbox runs and its engine answers: a few seconds from asleep, longer from deep sleep.',
      response: { 200: Type.Ref('Sandbox'), ...errorResponses(401, 404, 409, 410, 502, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    await lifecycle.start(record.name);
    return reveal(request, await lifecycle.views.view(record));
  });

  app.post('/sandboxes/:name/keep-awake', {
    schema: { tags, params, summary: 'Restart the idle countdown (never wakes a sleeping sandbox)', response: { 200: Type.Ref('Sandbox'), ...errorResponses(401, 404, 409, 410, 503) } },
  }, async (request) => reveal(request, await lifecycle.keepAwake((await authorizeSandbox(store, request.principal, request.params.name, 'use')).name)));

  app.patch('/sandboxes/:name', {
    schema: { tags, params, summary: 'Change idle_timeout and/or deep_sleep_after (owner or admin)', body: PatchSandboxBody, response: { 200: Type.Ref('Sandbox'), ...errorResponses(400, 401, 403, 404, 409, 410, 503) } },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'configure');
    const view = await lifecycle.updateSettings(record.name, request.body);
    await request.audit('sandbox.patch', { sandbox: record.name, detail: JSON.stringify(request.body) });
    return reveal(request, view);
  });

  app.delete('/sandboxes/:name', {
    schema: { tags, params, summary: 'Archive the sandbox (configuration and data kept in the archive)', response: { 200: ArchiveResult, ...errorResponses(401, 403, 404, 409, 410, 503) } },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'delete');
    const result = await lifecycle.archive(record.name);
    await request.audit('sandbox.delete', { sandbox: record.name, detail: result.archive });
    return { ...result, archived: true as const };
  });

  app.post('/sandboxes/:name/engine-access', {
    schema: {
      tags, params,
      summary: 'Enable engine access for a needs-certs sandbox (issues certificates, restarts the sandbox)',
      response: { 200: Type.Ref('Sandbox'), ...errorResponses(401, 403, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'configure');
    const view = await lifecycle.enableEngineAccess(record.name);
    await request.audit('sandbox.enable_engine_access', { sandbox: record.name });
    return reveal(request, view);
  });
};
