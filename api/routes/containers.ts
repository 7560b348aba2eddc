import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { errors } from '../../core/errors.ts';
import { runningEngine } from '../../files/volumes.ts';
import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../../lifecycle/apps/app-labels.ts';
import type { Lifecycle } from '../../lifecycle/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

const Container = Type.Object({
  id: Type.String({ description: '12 characters' }),
  name: Type.String(),
  image: Type.String(),
  state: Type.String({ description: 'running, exited, restarting, paused, created, dead' }),
  status: Type.String({ description: 'as docker ps says it: "Up 5 minutes"' }),
  project: Type.Union([Type.String(), Type.Null()]),
  service: Type.Union([Type.String(), Type.Null()]),
  ports: Type.Array(Type.Object({ private: Type.Integer(), public: Type.Integer(), protocol: Type.String() })),
});

const ContainerParams = Type.Object({ name: SandboxParams.properties.name, id: Type.String({ pattern: '^[0-9a-f]{12,64}$' }) });

/**
 * What runs in the sandbox (as Portainer's container list): the inner engine's containers with
 * their compose project, state and published ports, and restart / stop / start of one. Thin:
 * authorise (a limited token may use them), then the sandbox's own engine.
 */
export const containerRoutes: FastifyPluginAsyncTypebox<{ store: Store; lifecycle: Lifecycle }> = async (app, { store, lifecycle }) => {
  const tags = ['containers'];
  app.get('/sandboxes/:name/containers', {
    schema: {
      tags, params: SandboxParams,
      summary: 'The containers in the sandbox (docker ps -a), by compose project and name',
      response: { 200: Type.Array(Container), ...errorResponses(401, 404, 409, 410) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const engine = await runningEngine(lifecycle, record.name);
    const rows = (await engine.listContainers({ all: true })).map((c) => ({
      id: c.Id.slice(0, 12),
      name: (c.Names?.[0] ?? c.Id).replace(/^\//, ''),
      image: c.Image,
      state: c.State,
      status: c.Status,
      project: c.Labels?.[COMPOSE_PROJECT] ?? null,
      service: c.Labels?.[COMPOSE_SERVICE] ?? null,
      ports: (c.Ports ?? []).filter((p) => p.PublicPort).map((p) => ({ private: p.PrivatePort, public: p.PublicPort, protocol: p.Type }))
        .filter((p, i, all) => all.findIndex((q) => q.public === p.public && q.protocol === p.protocol) === i),
    }));
    return rows.sort((a, b) => (a.project ?? '').localeCompare(b.project ?? '') || a.name.localeCompare(b.name));
  });

  app.post('/sandboxes/:name/containers/:id/:action', {
    schema: {
      tags,
      params: Type.Object({ ...ContainerParams.properties, action: Type.Union([Type.Literal('restart'), Type.Literal('stop'), Type.Literal('start')]) }),
      summary: 'Restart, stop or start one container in the sandbox',
      response: { 200: Type.Object({ id: Type.String(), state: Type.String() }), ...errorResponses(401, 404, 409, 410) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const engine = await runningEngine(lifecycle, record.name);
    const container = engine.getContainer(request.params.id);
    try {
      const { action } = request.params;
      if (action === 'restart') await container.restart({ t: 10 });
      else if (action === 'stop') await container.stop({ t: 10 });
      else await container.start();
      lifecycle.recordActivity(record.name);
      return { id: request.params.id.slice(0, 12), state: (await container.inspect()).State.Status };
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404) throw new errors.NotFound(`no container ${request.params.id} in sandbox "${record.name}"`);
      if (code === 304) return { id: request.params.id.slice(0, 12), state: (await container.inspect()).State.Status }; // already so
      throw err;
    }
  });
};
