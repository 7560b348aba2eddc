import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { exportSandbox, zipEntries, type ExportDeps } from '../../export/index.ts';
import type { Lifecycle } from '../../lifecycle/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

/** Spec 1.7: the export folder `svc-<sandbox>/` as a zip, for the owner (a limited token may export its own sandbox). */
export const exportRoutes: FastifyPluginAsyncTypebox<{ exportDeps: ExportDeps; lifecycle: Lifecycle }> = async (app, { exportDeps, lifecycle }) => {
  app.get('/sandboxes/:name/export', {
    schema: {
      tags: ['sandboxes'], params: SandboxParams,
      summary: 'Download the export folder svc-<sandbox>/ (zip): svc.env with a new token limited to the sandbox, docker/ certificates, README',
      description: 'Every download mints a new access token limited to the sandbox, listed under the owner\'s tokens as "export of <sandbox>, <time>". '
        + 'The zip keeps svc.env and docker/key.pem at mode 0600. Answers 409 for a sandbox whose engine access needs certificates (enable it first).',
      produces: ['application/zip'],
      response: { 200: { type: 'string', format: 'binary', description: 'application/zip' }, ...errorResponses(401, 403, 404, 409, 410, 503) },
    },
  }, async (request, reply) => {
    const record = await authorizeSandbox(exportDeps.store, request.principal, request.params.name, 'use');
    const { extras } = await lifecycle.views.view(record);
    const { folder, entries } = await exportSandbox(exportDeps, request.principal.user, record, extras);
    const zip = await zipEntries(entries);
    request.log.info({ sandbox: record.name }, 'export folder made (new limited token)');
    await request.audit('sandbox.export', { sandbox: record.name, detail: 'export folder with a new token limited to the sandbox' });
    return reply
      .header('content-type', 'application/zip')
      .header('content-disposition', `attachment; filename="${folder}.zip"`)
      .header('cache-control', 'no-store')
      .send(zip as unknown as string); // bytes, never serialised
  });
};
