import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { listVolumes } from '../../files/index.ts';
import type { Lifecycle } from '../../lifecycle/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

const Volume = Type.Object(
  {
    name: Type.String(),
    path: Type.String({ description: 'Location of its files inside the sandbox, usable with the file routes: /var/lib/docker/volumes/<volume>/_data' }),
    project: Type.Union([Type.String(), Type.Null()], { description: 'Compose project, or null' }),
    containers: Type.Array(Type.Object({
      name: Type.String(),
      service: Type.Union([Type.String(), Type.Null()], { description: 'Compose service, or null' }),
      running: Type.Boolean(),
      mount: Type.String({ description: 'Where the container mounts it' }),
    })),
  },
  { $id: 'Volume' },
);

/** Spec 2.4 / 4.2: local-driver volumes of the sandbox's own engine. */
export const volumeRoutes: FastifyPluginAsyncTypebox<{ store: Store; lifecycle: Lifecycle }> = async (app, { store, lifecycle }) => {
  app.addSchema(Volume);
  app.get('/sandboxes/:name/volumes', {
    schema: {
      tags: ['files'], params: SandboxParams,
      summary: 'Local-driver volumes of the sandbox engine, with the containers that mount them',
      response: { 200: Type.Array(Type.Ref('Volume')), ...errorResponses(401, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    return listVolumes(lifecycle, record.name);
  });
};
