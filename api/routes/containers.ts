import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { errors } from '../../core/errors.ts';
import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../../core/compose-labels.ts';
import type { Lifecycle, SandboxUsage } from '../../lifecycle/index.ts';
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
  ports: Type.Array(Type.Object({
    private: Type.Integer(), public: Type.Integer(), protocol: Type.String(),
    url: Type.Union([Type.String(), Type.Null()], { description: 'The app address the service gives this port (null: none, e.g. published on 127.0.0.1 only, or UDP)' }),
  })),
});

const Usage = Type.Object({
  at: Type.String({ format: 'date-time', description: 'When the engine read the figures' }),
  cpu: Type.Object({
    cores: Type.Number({ description: 'Cores used on average over the last seconds (0.5 = half a core)' }),
    limit_cores: Type.Number({ description: 'Cores the sandbox may use' }),
  }),
  memory: Type.Object({ bytes: Type.Integer({ description: 'In use, without the page cache the kernel can drop' }), limit_bytes: Type.Integer() }),
  disk: Type.Union([
    Type.Object({
      used_bytes: Type.Integer({ description: 'The persistent folders: /root, /home, /srv, /opt and the inner engine (its images, containers, volumes)' }),
      free_bytes: Type.Integer({ description: 'Free space where they live (shared with the host)' }),
      complete: Type.Boolean({ description: 'False when counting took too long and was cut off' }),
      measured_at: Type.String({ format: 'date-time', description: 'Disk use is measured at most once a minute' }),
    }),
    Type.Null(),
  ], { description: 'null while the first measurement runs' }),
  history: Type.Array(Type.Object({ at: Type.String({ format: 'date-time' }), cpu_cores: Type.Number(), memory_bytes: Type.Integer() }), {
    description: 'What was sampled in the last 10 minutes while someone looked (every 2 s at most), oldest first',
  }),
});

/** Seconds a stop or restart gives a container between SIGTERM and SIGKILL (docker's default). */
const STOP_GRACE_S = 10;

const ContainerParams = Type.Object({ name: SandboxParams.properties.name, id: Type.String({ pattern: '^[0-9a-f]{12,64}$' }) });

/**
 * What runs in the sandbox (as Portainer's container list): the inner engine's containers with
 * their compose project, state and published ports, and restart / stop / start of one. Thin:
 * authorise (a limited token may use them), then the sandbox's own engine.
 */
export const containerRoutes: FastifyPluginAsyncTypebox<{ store: Store; lifecycle: Lifecycle; usage: SandboxUsage }> = async (app, { store, lifecycle, usage }) => {
  const tags = ['containers'];
  app.get('/sandboxes/:name/containers', {
    schema: {
      tags, params: SandboxParams,
      summary: 'The containers in the sandbox (docker ps -a), by compose project and name',
      response: { 200: Type.Array(Container), ...errorResponses(401, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const engine = await lifecycle.runningEngine(record.name);
    const addresses = lifecycle.views.appAddresses(record.name);
    const urlOf = (container: string, port: { public: number; protocol: string }) =>
      (port.protocol === 'tcp' && addresses.find((a) => a.container === container && a.hostPort === port.public)?.url) || null;
    const rows = (await engine.listContainers({ all: true })).map((c) => ({
      id: c.Id.slice(0, 12),
      name: nameOf(c),
      image: c.Image,
      state: c.State,
      status: c.Status,
      project: c.Labels?.[COMPOSE_PROJECT] ?? null,
      service: c.Labels?.[COMPOSE_SERVICE] ?? null,
      ports: (c.Ports ?? []).filter((p) => p.PublicPort).map((p) => ({ private: p.PrivatePort, public: p.PublicPort, protocol: p.Type }))
        .filter((p, i, all) => all.findIndex((q) => q.public === p.public && q.protocol === p.protocol) === i)
        .map((p) => ({ ...p, url: urlOf(nameOf(c), p) })),
    }));
    return rows.sort((a, b) => (a.project ?? '').localeCompare(b.project ?? '') || a.name.localeCompare(b.name));
  });

  app.get('/sandboxes/:name/usage', {
    schema: {
      tags, params: SandboxParams,
      summary: 'What the sandbox uses: CPU, memory and disk now, and a short history',
      description: 'Read while someone looks (the panel asks every few seconds); nothing is sampled otherwise. Never wakes the sandbox: asleep is 409.',
      response: { 200: Usage, ...errorResponses(401, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const now = await usage.read(record.name);
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      at: iso(now.at),
      cpu: { cores: now.cpu.cores, limit_cores: now.cpu.limit },
      memory: { bytes: now.memory.bytes, limit_bytes: now.memory.limit },
      disk: now.disk && { used_bytes: now.disk.usedBytes, free_bytes: now.disk.freeBytes, complete: now.disk.complete, measured_at: iso(now.disk.at) },
      history: now.history.map((p) => ({ at: iso(p.at), cpu_cores: p.cpu, memory_bytes: p.memoryBytes })),
    };
  });

  app.post('/sandboxes/:name/containers/:id/:action', {
    schema: {
      tags,
      params: Type.Object({ ...ContainerParams.properties, action: Type.Union([Type.Literal('restart'), Type.Literal('stop'), Type.Literal('start')]) }),
      summary: 'Restart, stop or start one container in the sandbox',
      response: { 200: Type.Object({ id: Type.String(), state: Type.String() }), ...errorResponses(401, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    // the engine answers a stop only after the grace (a PID 1 that ignores SIGTERM uses all of it),
    // so the client waits longer than that before it calls the connection dead
    const engine = await lifecycle.runningEngine(record.name, { timeoutMs: (STOP_GRACE_S + 20) * 1000 });
    const container = engine.getContainer(request.params.id);
    try {
      const { action } = request.params;
      if (action === 'restart') await container.restart({ t: STOP_GRACE_S });
      else if (action === 'stop') await container.stop({ t: STOP_GRACE_S });
      else await container.start();
      lifecycle.clock.recordActivity(record.name);
      return { id: request.params.id.slice(0, 12), state: (await container.inspect()).State.Status };
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404) throw new errors.NotFound(`no container ${request.params.id} in sandbox "${record.name}"`);
      if (code === 304) return { id: request.params.id.slice(0, 12), state: (await container.inspect()).State.Status }; // already so
      throw err;
    }
  });
};

function nameOf(c: { Names?: string[]; Id: string }): string {
  return (c.Names?.[0] ?? c.Id).replace(/^\//, '');
}
