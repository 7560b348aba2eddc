import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { createUser, publicUser, requireUserByName, resetPassword, setDisabled, updateUser, type Caller, type WebSessions, type Admission, QUOTA_NAMES, setQuotas, type QuotaName } from '../../accounts/index.ts';
import { errors } from '../../core/errors.ts';
import { mapLimited } from '../../core/map-limited.ts';
import { parseDuration, type Lifecycle, type SandboxUsage } from '../../lifecycle/index.ts';
import type { Store, UserRecord } from '../../store/index.ts';
import { errorResponses } from '../schemas/common.ts';
import { Quotas } from '../schemas/quotas.ts';

export interface AdminRoutesOptions {
  store: Store;
  lifecycle: Lifecycle;
  admission: Admission;
  sessions: WebSessions;
  usage: SandboxUsage;
}

const AdminUser = Type.Object({
  id: Type.String(), name: Type.String(), admin: Type.Boolean(), created_at: Type.String(),
  disabled_at: Type.Optional(Type.String()), last_sign_in_at: Type.Optional(Type.String()),
  quotas: Quotas,
  own_quotas: Type.Array(Type.String(), { description: 'Quotas set for this user; the others are the operator defaults.' }),
  usage: Type.Object({ sandboxes: Type.Integer(), running: Type.Integer() }),
});
const UserParams = Type.Object({ user: Type.String({ minLength: 1, maxLength: 100 }) });
const QuotaChange = Type.Object(
  Object.fromEntries(QUOTA_NAMES.map((q) => [q, Type.Optional(Type.Union([Type.Number(), Type.Null()], { description: 'null: back to the operator default' }))])),
  { additionalProperties: false },
);
const AuditRowSchema = Type.Object({
  id: Type.String(), at: Type.String(), action: Type.String(), outcome: Type.String(), source: Type.String(),
  actor_id: Type.Optional(Type.String()), actor_name: Type.Optional(Type.String()), token_id: Type.Optional(Type.String()),
  sandbox: Type.Optional(Type.String()), target: Type.Optional(Type.String()), detail: Type.Optional(Type.String()),
});
const MB = 1024 * 1024;
/** Engine readings of memory under way at once for the list of every sandbox. */
const MEMORY_READINGS_AT_ONCE = 8;
const IsoTime = Type.String({ maxLength: 40, description: 'ISO 8601 time, e.g. 2026-11-26T05:00:00Z' });

function requireAdmin(principal: Caller): void {
  if (principal.sandbox || !principal.user.admin) throw new errors.Forbidden('administrators only (a full token or a web session of a user with the admin flag)');
}

function isoOrBad(value: string | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  const t = Date.parse(value);
  if (Number.isNaN(t)) throw new errors.BadRequest(`${name} must be an ISO 8601 time (2026-11-26T05:00:00Z), got "${value.slice(0, 40)}"`);
  return new Date(t).toISOString();
}

/**
 * Admin (issue 24): users (create, disable/enable, reset password, quotas, admin flag), every
 * sandbox with its owner, and the audit log. Admins act on any sandbox through the ordinary
 * sandbox routes (authorizeSandbox lets them). Every change here is an audit row.
 */
export const adminRoutes: FastifyPluginAsyncTypebox<AdminRoutesOptions> = async (app, { store, lifecycle, admission, sessions, usage }) => {
  const tags = ['admin'];
  app.addHook('preHandler', async (request) => requireAdmin(request.principal));

  const show = async (user: UserRecord) => ({
    ...publicUser(user),
    ...(user.disabled_at ? { disabled_at: user.disabled_at } : {}),
    ...(user.last_sign_in_at ? { last_sign_in_at: user.last_sign_in_at } : {}),
    quotas: admission.quotasOf(user),
    own_quotas: Object.keys(user.quotas ?? {}),
    usage: await admission.usage(user),
  });

  /** Puts every running sandbox of the user to sleep (a disabled account's). */
  const sleepAll = async (user: UserRecord) => {
    for (const record of await store.sandboxes.listByOwner(user.id)) {
      if (!record.archived_at && (await lifecycle.status(record.name)).status === 'running') await lifecycle.sleep(record.name, 'owner disabled');
    }
  };

  app.get('/admin/users', {
    schema: { tags, summary: 'Every user with quotas, usage, last sign-in and whether disabled', response: { 200: Type.Array(AdminUser), ...errorResponses(401, 403) } },
  }, async () => Promise.all((await store.users.list()).map(show)));

  app.post('/admin/users', {
    schema: {
      tags, summary: 'Create a user; the generated password is shown once, in this answer',
      body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 }), admin: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
      response: { 201: Type.Object({ user: AdminUser, password: Type.String() }), ...errorResponses(400, 401, 403, 409) },
    },
  }, async (request, reply) => {
    const { user, password } = await createUser(store, request.body);
    await request.audit('admin.user_create', { target: user.name, detail: user.admin ? 'admin' : undefined });
    reply.status(201);
    return { user: await show(user), password };
  });

  app.patch('/admin/users/:user', {
    schema: {
      tags, summary: "Change a user's quotas and admin flag (checked before anything changes)", params: UserParams,
      body: Type.Object({ admin: Type.Optional(Type.Boolean()), quotas: Type.Optional(QuotaChange) }, { additionalProperties: false, minProperties: 1 }),
      response: { 200: AdminUser, ...errorResponses(400, 401, 403, 404) },
    },
  }, async (request) => {
    const { admin, quotas } = request.body;
    if (admin === false && request.params.user === request.principal.user.name) throw new errors.BadRequest('you cannot take your own admin flag; another admin can');
    let user = await setQuotas(store, request.params.user, (quotas ?? {}) as Partial<Record<QuotaName, number | null>>);
    if (admin !== undefined) user = await updateUser(store, user.id, (u) => ({ ...u, admin }));
    await request.audit('admin.user_update', { target: user.name, detail: JSON.stringify(request.body) });
    return show(user);
  });

  app.post('/admin/users/:user/disable', {
    schema: {
      tags, params: UserParams,
      summary: "Disable a user: their tokens and web sessions are refused at once (401), their running sandboxes go to sleep and cannot be woken",
      response: { 200: AdminUser, ...errorResponses(400, 401, 403, 404) },
    },
  }, async (request) => {
    if (request.params.user === request.principal.user.name) throw new errors.BadRequest('you cannot disable your own account');
    const user = await setDisabled(store, request.params.user, true);
    await sessions.endOthers(user.id);
    await request.audit('admin.user_disable', { target: user.name });
    await sleepAll(user);
    return show(user);
  });

  app.post('/admin/users/:user/enable', {
    schema: { tags, params: UserParams, summary: 'Enable a disabled user: their tokens work again (web sessions were ended: they sign in again)', response: { 200: AdminUser, ...errorResponses(401, 403, 404) } },
  }, async (request) => {
    const user = await setDisabled(store, request.params.user, false);
    await request.audit('admin.user_enable', { target: user.name });
    return show(user);
  });

  app.post('/admin/users/:user/password', {
    schema: {
      tags, params: UserParams, summary: "Reset a user's password to a generated one, shown once; ends their web sessions",
      response: { 200: Type.Object({ name: Type.String(), password: Type.String() }), ...errorResponses(401, 403, 404) },
    },
  }, async (request) => {
    const { user, password } = await resetPassword(store, request.params.user);
    await sessions.endOthers(user.id);
    await request.audit('admin.user_password_reset', { target: user.name });
    return { name: user.name, password };
  });

  app.get('/admin/sandboxes', {
    schema: {
      tags, summary: 'Every sandbox with its owner, status, limits, last activity, host and memory in use now',
      response: {
        200: Type.Array(Type.Object({
          name: Type.String(), owner: Type.String(), status: Type.String(), created_at: Type.String(),
          memory_mb: Type.Number(), cpus: Type.Number(), idle_timeout: Type.String(),
          stops_at: Type.Union([Type.String(), Type.Null()]),
          last_activity_at: Type.Union([Type.String(), Type.Null()], { description: 'Of a running sandbox: when traffic or a start last renewed its idle countdown.' }),
          host: Type.Union([Type.String(), Type.Null()], { description: "The host the sandbox is on (svc hosts list): the Incus member, or the service's machine by its engine's own name (a runner host of an earlier release for a sandbox still there); null if that engine did not answer in time." }),
          memory_now_mb: Type.Union([Type.Number(), Type.Null()], { description: 'Memory the sandbox uses now (as docker stats counts it), in MB; null when not running or not answered in time.' }),
        })),
        ...errorResponses(401, 403),
      },
    },
  }, async () => {
    const records = (await store.sandboxes.listAll()).filter((r) => !r.archived_at);
    const owners = new Map((await store.users.list()).map((u) => [u.id, u]));
    const listed = lifecycle.views.list(records);
    const [summaries, hosts, memory] = await Promise.all([
      listed,
      Promise.all(records.map((r) => lifecycle.views.hostOf(r.name))),
      // only a running sandbox uses memory; each reading is an inspect and a stats call: a few at a time
      listed.then((all) => mapLimited(all, MEMORY_READINGS_AT_ONCE, (s) => (s.status === 'running' ? usage.memoryNow(s.name) : Promise.resolve(null)))),
    ]);
    const defaults = admission.quotasOf({});
    return summaries.map((s, i) => {
      const record = records[i]!;
      const memoryBytes = memory[i]!;
      const idle = parseDuration(s.idle_timeout);
      return {
        name: s.name, owner: owners.get(record.owner_id)?.name ?? record.owner_id, status: s.status, created_at: s.created_at,
        memory_mb: record.memory_mb ?? defaults.memory_mb, cpus: record.cpus ?? defaults.cpus, idle_timeout: s.idle_timeout,
        stops_at: s.stops_at,
        last_activity_at: s.stops_at && idle ? new Date(Date.parse(s.stops_at) - idle).toISOString() : null,
        host: hosts[i]!,
        memory_now_mb: memoryBytes === null ? null : Math.round((memoryBytes / MB) * 10) / 10,
      };
    });
  });

  app.get('/admin/audit', {
    schema: {
      tags, summary: 'The audit log, newest first, in pages',
      description: '`action` is one action (`sandbox.create`) or a family ending in a dot (`sandbox.`). Pass `next` of an answer as `before` for the following page.',
      querystring: Type.Object({
        user: Type.Optional(Type.String({ maxLength: 100, description: 'The acting user, by name' })),
        sandbox: Type.Optional(Type.String({ maxLength: 64 })),
        action: Type.Optional(Type.String({ maxLength: 64 })),
        since: Type.Optional(IsoTime),
        until: Type.Optional(IsoTime),
        limit: Type.Optional(Type.String({ pattern: '^[0-9]{1,3}$', description: '1-500, default 100' })),
        before: Type.Optional(Type.String({ maxLength: 200 })),
      }, { additionalProperties: false }),
      response: { 200: Type.Object({ rows: Type.Array(AuditRowSchema), next: Type.Union([Type.String(), Type.Null()]) }), ...errorResponses(400, 401, 403, 404) },
    },
  }, async (request) => {
    const q = request.query;
    const actor = q.user === undefined ? undefined : await requireUserByName(store, q.user);
    return store.audit.query(
      { actorId: actor?.id, sandbox: q.sandbox, action: q.action, since: isoOrBad(q.since, 'since'), until: isoOrBad(q.until, 'until') },
      { limit: q.limit === undefined ? undefined : Number(q.limit), before: q.before },
    );
  });
};
