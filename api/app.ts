import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Logger } from '../core/logger.ts';
import type { Lifecycle, SandboxUsage, WakeLimits } from '../lifecycle/index.ts';
import type { Store } from '../store/index.ts';
import { authPlugin } from './plugins/auth.ts';
import { errorsPlugin, frameworkErrors } from './plugins/errors.ts';
import { swaggerPlugin } from './plugins/swagger.ts';
import { meRoutes } from './routes/me.ts';
import { sandboxRoutes } from './routes/sandboxes.ts';
import { registryRoutes } from './routes/registry.ts';
import { fileRoutes } from './routes/files.ts';
import { volumeRoutes } from './routes/volumes.ts';
import { logRoutes } from './routes/logs.ts';
import { mcpRoutes } from './mcp/route.ts';
import { execRoutes } from './routes/exec.ts';
import { cliRoutes } from './routes/cli.ts';
import { terminalRoutes } from './routes/terminal.ts';
import { containerRoutes } from './routes/containers.ts';
import type { SandboxCommands } from '../exec/index.ts';
import type { SandboxFiles } from '../files/index.ts';
import { exportRoutes } from './routes/export.ts';
import { guideRoutes } from './routes/guide.ts';
import { addressesOf } from '../core/addresses.ts';
import type { Config } from '../core/config.ts';
import { errors } from '../core/errors.ts';
import { managerNotIncluded, type ManagerAccessProvider } from '../export/index.ts';
import { ErrorBody } from './schemas/common.ts';
import type { WebSessions, Admission, AuditLog, OidcSignIn, AppPasses } from '../accounts/index.ts';
import type { SignInGuard } from './sign-in-guard.ts';
import type { AuditOnce } from './audit-once.ts';
import { sessionRoutes } from './routes/session.ts';
import { noTokenInUrlPlugin, reqSerializer } from './plugins/no-token-in-url.ts';
import { uiPlugin } from './plugins/ui.ts';
import { auditPlugin } from './plugins/audit.ts';
import { adminRoutes } from './routes/admin.ts';
import { metricsPlugin } from './plugins/metrics.ts';
import { opsRoutes } from './routes/ops.ts';
import type { Readiness } from '../monitoring/index.ts';
import type { ServiceMetrics } from '../core/metrics.ts';
import { oidcRoutes } from './routes/oidc.ts';
import { secretRoutes, type SecretsChanged } from './routes/secrets.ts';
import { sdkRoutes } from './routes/sdk.ts';
import { appEntryRoutes } from './routes/app-entry.ts';

export interface ApiDeps {
  store: Store;
  lifecycle: Lifecycle;
  logger: Logger;
  /** The service CA that signs the edge certificate, served at /ca.pem; null with an operator's certificate. */
  caPem: () => Promise<string | null>;
  /** File operations inside sandboxes, shared by the file routes and the MCP tools. */
  files: SandboxFiles;
  /** Users' commands in sandboxes, shared by the exec routes and the MCP tools. */
  commands: SandboxCommands;
  /** What each sandbox uses, for its panel. */
  usage: SandboxUsage;
  /** Heartbeat of the log stream; 15 s when absent. */
  sseHeartbeatMs?: number;
  /** Public addresses (agent guide, export folder). */
  config: Pick<Config, 'domain' | 'httpsPort'>;
  /** Management tool values for export folders; absent: the folder says why they are not included. */
  managerAccess?: ManagerAccessProvider;
  /** Web UI sessions and the guard on password checks (sign-in, password change). */
  sessions: WebSessions;
  signInGuard: SignInGuard;
  /** Audit rows of reads a page repeats, one per window across processes (a manager's password). */
  auditOnce: AuditOnce;
  /** Quotas and what each user uses of them (GET /me, the admin routes). */
  admission: Admission;
  wakeLimits: WakeLimits;
  audit: AuditLog;
  /** Single sign-on, when SVC_OIDC_ISSUER is set; `passwordSignIn` false turns the password form off. */
  oidc?: OidcSignIn;
  passwordSignIn?: boolean;
  /** The web UI's build (ui/dist when absent). */
  uiDir?: string;
  /** Tickets and passes of private app addresses (the sign-in bounce at /api/apps/enter). */
  appPasses: AppPasses;
  /** Puts changed secrets into the owner's running sandboxes (exec/secret-delivery.ts). */
  secrets: SecretsChanged;
  /** /readyz's checks, and the metrics behind /metrics (absent with metrics off). */
  ops: { readiness: () => Promise<Readiness>; metrics?: ServiceMetrics };
}

/**
 * The service API under /api. Order as Fastify's guide prescribes: ecosystem plugins, our
 * plugins, then routes; authentication is encapsulated with the routes so /api/swagger stays open.
 */
export async function buildApi(deps: ApiDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger.child({ part: 'api' }, { serializers: { req: reqSerializer } }) as FastifyBaseLogger,
    bodyLimit: 1024 * 1024,
    // close() ends every connection, open log streams (hijacked, never idle) included: else it waits for them.
    forceCloseConnections: true,
    frameworkErrors,
    // Unknown fields and wrong types are errors, never silently dropped or coerced (bad input
    // changes nothing). Query strings are declared as strings for the same reason.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.addSchema(ErrorBody);
  await app.register(errorsPlugin);
  if (deps.ops.metrics) await app.register(metricsPlugin, { metrics: deps.ops.metrics });
  await app.register(noTokenInUrlPlugin);
  await app.register(auditPlugin, { audit: deps.audit });
  await app.register(swaggerPlugin);
  app.get('/ca.pem', {
    config: { public: true },
    schema: { summary: "The service CA: trust it to reach the service's addresses without warnings", produces: ['application/x-pem-file'], response: { 200: Type.String(), 404: Type.Ref('Error') } },
  }, async (_request, reply) => {
    const pem = await deps.caPem();
    if (!pem) throw new errors.NotFound('this service uses an operator-supplied certificate; no service CA');
    return reply.type('application/x-pem-file').send(pem);
  });
  await app.register(opsRoutes, { store: deps.store, ...deps.ops });
  const addresses = addressesOf(deps.config);
  await app.register(guideRoutes, { addresses });
  await app.register(cliRoutes);
  await app.register(sdkRoutes);
  await app.register(uiPlugin, { dir: deps.uiDir });
  const exportDeps = { store: deps.store, config: deps.config, serviceCa: deps.caPem, manager: deps.managerAccess ?? managerNotIncluded };
  await app.register(
    async (api) => {
      await api.register(authPlugin, { store: deps.store, sessions: deps.sessions, siteOrigin: addresses.site });
      await api.register(sessionRoutes, { store: deps.store, sessions: deps.sessions, guard: deps.signInGuard, siteOrigin: addresses.site, passwordSignIn: deps.passwordSignIn ?? true });
      await api.register(oidcRoutes, { store: deps.store, sessions: deps.sessions, oidc: deps.oidc, passwordSignIn: deps.passwordSignIn ?? true });
      await api.register(sandboxRoutes, { store: deps.store, lifecycle: deps.lifecycle, auditOnce: deps.auditOnce });
      await api.register(adminRoutes, { store: deps.store, lifecycle: deps.lifecycle, admission: deps.admission, sessions: deps.sessions, usage: deps.usage });
      await api.register(meRoutes, { store: deps.store, lifecycle: deps.lifecycle, admission: deps.admission, wakeLimits: deps.wakeLimits });
      await api.register(secretRoutes, { store: deps.store, delivery: deps.secrets });
      await api.register(appEntryRoutes, { store: deps.store, sessions: deps.sessions, passes: deps.appPasses, domain: addresses.domain, port: addresses.port });
      await api.register(registryRoutes, { store: deps.store });
      const { files } = deps;
      await api.register(fileRoutes, { store: deps.store, files });
      await api.register(volumeRoutes, { store: deps.store, lifecycle: deps.lifecycle });
      await api.register(logRoutes, { store: deps.store, lifecycle: deps.lifecycle, heartbeatMs: deps.sseHeartbeatMs });
      await api.register(exportRoutes, { exportDeps, lifecycle: deps.lifecycle });
      await api.register(execRoutes, { store: deps.store, commands: deps.commands });
      await api.register(containerRoutes, { store: deps.store, lifecycle: deps.lifecycle, usage: deps.usage });
      await api.register(terminalRoutes, { store: deps.store, commands: deps.commands, siteOrigin: addresses.site });
      await api.register(mcpRoutes, { store: deps.store, lifecycle: deps.lifecycle, files, commands: deps.commands });
    },
    { prefix: '/api' },
  );
  return app;
}
