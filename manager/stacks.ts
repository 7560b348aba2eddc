import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ADMIN } from './auth.ts';
import { Compose, ComposeFailed, type ComposeFiles } from './compose.ts';
import type { Engine } from './engine.ts';
import { ENTRY_POINT, externalStackJson, normaliseStackName, PortainerError, stackJson, type EnvPair, type StackRecord } from './portainer.ts';
import type { ManagerState } from './state.ts';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,255}$/;

export interface StackOptions {
  state: ManagerState;
  engine: Engine;
  compose: Compose;
  dataDir: string;
}

const idParams = { type: 'object', required: ['id'], properties: { id: { type: 'integer', minimum: 0, maximum: 2 ** 31 } } } as const;
const endpointQuery = { type: 'object', properties: { endpointid: { type: 'integer', minimum: 0, maximum: 2 ** 31 } } } as const;
const envSchema = {
  type: ['array', 'null'],
  maxItems: 1000,
  items: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, value: { type: 'string', maxLength: 65536 } } },
} as const;
const createBody = {
  type: 'object',
  required: ['name', 'stackfilecontent'],
  properties: { name: { type: 'string', maxLength: 256 }, stackfilecontent: { type: 'string', maxLength: 1024 * 1024 }, env: envSchema },
} as const;
const updateBody = {
  type: 'object',
  required: ['stackfilecontent'],
  properties: { stackfilecontent: { type: 'string', maxLength: 1024 * 1024 }, env: envSchema, prune: { type: 'boolean' }, pullimage: { type: 'boolean' } },
} as const;

interface CreateBody { name: string; stackfilecontent: string; env?: EnvPair[] | null }
interface UpdateBody { stackfilecontent: string; env?: EnvPair[] | null; prune?: boolean; pullimage?: boolean }

/** Query keys are case-insensitive too (`endpointId`, `endpointid`). */
function lowercaseQuery(request: FastifyRequest): void {
  const q = request.query as Record<string, unknown> | undefined;
  if (q && typeof q === 'object') request.query = Object.fromEntries(Object.entries(q).map(([k, v]) => [k.toLowerCase(), v]));
}

/** Env pairs as compose reads them from an env file: one `name=value` a line. */
function envFileText(env: EnvPair[]): string {
  for (const { name, value } of env) {
    if (!ENV_NAME.test(name)) throw new PortainerError(400, `Invalid environment variable name "${name.slice(0, 64)}"`, 'Invalid request payload');
    if (/[\r\n\0]/.test(value ?? '')) throw new PortainerError(400, `The value of environment variable ${name} contains a line break`, 'Invalid request payload');
  }
  return env.map(({ name, value }) => `${name}=${value ?? ''}\n`).join('');
}

function now(): number {
  return Math.floor(Date.now() / 1000);
}

/**
 * Stacks as Portainer runs standalone compose stacks: the compose text and env are stored in
 * compose/<Id>/ and the compose CLI runs with `-p <Name>`. Deploys run one at a time, as in
 * Portainer. Unlike Portainer, a failed `up` never takes down what was running: the old files are
 * put back and compose's error is the answer.
 */
export async function stackRoutes(app: FastifyInstance, opts: StackOptions): Promise<void> {
  const { state, engine, compose } = opts;
  const root = path.join(opts.dataDir, 'compose');
  await fs.promises.mkdir(root, { recursive: true, mode: 0o700 });
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const run = queue.then(work);
    queue = run.catch(() => undefined);
    return run;
  };

  const projectPath = (id: number) => path.join(root, String(id));
  const filesOf = (stack: Pick<StackRecord, 'Id' | 'Name'>): ComposeFiles => {
    const dir = projectPath(stack.Id);
    return { project: stack.Name, dir, file: path.join(dir, ENTRY_POINT), envFile: path.join(dir, 'stack.env') };
  };
  const json = (stack: StackRecord) => stackJson(stack, projectPath(stack.Id));
  const find = (id: number): StackRecord => {
    if (id === 0) throw new PortainerError(403, 'This stack was deployed outside the tool: it is listed, but cannot be edited here (use docker compose on the engine)', 'Forbidden');
    const stack = state.current.stacks.find((s) => s.Id === id);
    if (!stack) throw new PortainerError(404, 'Unable to find a stack with the specified identifier inside the database', 'Not Found');
    return stack;
  };
  const endpointOf = (request: FastifyRequest, required: boolean): number | undefined => {
    const id = (request.query as { endpointid?: number }).endpointid;
    if (id === undefined) {
      if (required) throw new PortainerError(400, 'Invalid query parameter: endpointId', 'Bad Request');
      return undefined;
    }
    if (!state.current.endpoints.some((e) => e.Id === id)) throw new PortainerError(404, 'Unable to find an environment with the specified identifier inside the database', 'Not Found');
    return id;
  };
  const writeFiles = async (files: ComposeFiles, content: string, env: EnvPair[]) => {
    await fs.promises.mkdir(files.dir, { recursive: true, mode: 0o700 });
    await fs.promises.writeFile(files.file, content, { mode: 0o600 });
    await fs.promises.writeFile(files.envFile, envFileText(env), { mode: 0o600 });
    await fs.promises.chmod(files.envFile, 0o600);
  };
  const composeError = (err: unknown): never => {
    if (err instanceof ComposeFailed) throw new PortainerError(500, err.message, err.output);
    throw err;
  };

  async function create(request: FastifyRequest) {
    const endpointId = endpointOf(request, true)!;
    const body = request.body as CreateBody;
    const name = normaliseStackName(body.name);
    if (!name) throw new PortainerError(400, 'Invalid stack name: use letters, digits, - or _', 'Invalid request payload');
    const env = body.env ?? [];
    envFileText(env); // bad env refused before anything changes
    return serial(async () => {
      const external = await engine.composeProjects();
      if (state.current.stacks.some((s) => s.Name === name) || external.has(name)) {
        throw new PortainerError(409, `A stack with the normalized name '${name}' already exists`, 'Conflict');
      }
      const id = await state.update((d) => d.nextStackId++);
      const files = filesOf({ Id: id, Name: name });
      await writeFiles(files, body.stackfilecontent, env);
      try {
        await compose.up(files, { pull: false, removeOrphans: false });
      } catch (err) {
        // nothing of this name ran before: clear what a half-done up left, so the name stays free
        await compose.down(files).catch(() => undefined);
        await fs.promises.rm(files.dir, { recursive: true, force: true });
        composeError(err);
      }
      const stack: StackRecord = { Id: id, Name: name, EndpointId: endpointId, Env: env, Status: 1, CreationDate: now(), CreatedBy: ADMIN.username, UpdateDate: 0, UpdatedBy: '' };
      await state.update((d) => void d.stacks.push(stack));
      request.log.info({ stack: name, id }, 'stack created');
      return json(stack);
    });
  }

  app.addHook('preValidation', async (request) => lowercaseQuery(request));

  app.post('/api/stacks/create/standalone/string', { schema: { querystring: endpointQuery, body: createBody } }, create);

  // The older form (psu, carlrygart's action): POST /api/stacks?type=2&method=string&endpointId=N
  app.post('/api/stacks', {
    schema: {
      querystring: { ...endpointQuery, properties: { ...endpointQuery.properties, type: { type: 'integer' }, method: { type: 'string' } } },
      body: createBody,
    },
  }, async (request) => {
    const { type, method } = request.query as { type?: number; method?: string };
    if (type !== 2) throw new PortainerError(400, 'Invalid query parameter: type (only 2, standalone compose, is supported here)', 'Bad Request');
    if (method !== 'string') throw new PortainerError(400, 'Invalid query parameter: method (only "string" is supported here)', 'Bad Request');
    return create(request);
  });

  app.get('/api/stacks', {
    schema: { querystring: { type: 'object', properties: { filters: { type: 'string', maxLength: 1024 } } } },
  }, async (request) => {
    let endpointFilter: number | undefined;
    const { filters } = request.query as { filters?: string };
    if (filters) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(filters);
      } catch {
        throw new PortainerError(400, 'Invalid query parameter: filters', 'Bad Request');
      }
      const key = Object.keys(parsed ?? {}).find((k) => k.toLowerCase() === 'endpointid');
      if (key) endpointFilter = Number((parsed as Record<string, unknown>)[key]);
    }
    const own = state.current.stacks.map(json);
    const ownNames = new Set(own.map((s) => s.Name));
    const local = state.current.endpoints[0]?.Id ?? 1;
    const external = [...(await engine.composeProjects())]
      .filter(([name]) => !ownNames.has(name))
      .map(([name, running]) => externalStackJson(name, local, running));
    return [...own, ...external].filter((s) => endpointFilter === undefined || s.EndpointId === endpointFilter);
  });

  app.get('/api/stacks/:id', { schema: { params: idParams } }, async (request) => json(find((request.params as { id: number }).id)));

  app.get('/api/stacks/:id/file', { schema: { params: idParams } }, async (request) => {
    const stack = find((request.params as { id: number }).id);
    return { StackFileContent: await fs.promises.readFile(filesOf(stack).file, 'utf8') };
  });

  app.put('/api/stacks/:id', { schema: { params: idParams, querystring: endpointQuery, body: updateBody } }, async (request) => {
    endpointOf(request, true);
    const body = request.body as UpdateBody;
    const id = (request.params as { id: number }).id;
    find(id);
    return serial(async () => {
      const stack = find(id);
      const env = body.env ?? stack.Env;
      const files = filesOf(stack);
      const before = await Promise.all([fs.promises.readFile(files.file, 'utf8'), fs.promises.readFile(files.envFile, 'utf8')]);
      await writeFiles(files, body.stackfilecontent, env);
      try {
        await compose.up(files, { pull: body.pullimage === true, removeOrphans: body.prune === true });
      } catch (err) {
        await fs.promises.writeFile(files.file, before[0], { mode: 0o600 });
        await fs.promises.writeFile(files.envFile, before[1], { mode: 0o600 });
        composeError(err);
      }
      const updated = await state.update((d) => {
        const s = d.stacks.find((x) => x.Id === id)!;
        Object.assign(s, { Env: env, Status: 1, UpdateDate: now(), UpdatedBy: ADMIN.username });
        return s;
      });
      request.log.info({ stack: stack.Name, id }, 'stack updated');
      return json(updated);
    });
  });

  app.delete('/api/stacks/:id', { schema: { params: idParams, querystring: endpointQuery } }, async (request, reply) => {
    // endpointId is optional here (psu sends none): the stack's own environment is used
    const id = (request.params as { id: number }).id;
    find(id);
    await serial(async () => {
      const stack = find(id);
      await compose.down(filesOf(stack)).catch(composeError);
      await state.update((d) => void (d.stacks = d.stacks.filter((s) => s.Id !== id)));
      await fs.promises.rm(projectPath(id), { recursive: true, force: true });
      request.log.info({ stack: stack.Name, id }, 'stack removed');
    });
    return reply.code(204).send();
  });

  for (const action of ['start', 'stop'] as const) {
    app.post(`/api/stacks/:id/${action}`, { schema: { params: idParams, querystring: endpointQuery } }, async (request) => {
      const id = (request.params as { id: number }).id;
      find(id);
      return serial(async () => {
        const stack = find(id);
        const want = action === 'start' ? 1 : 2;
        if (stack.Status === want) throw new PortainerError(400, `Stack is already ${action === 'start' ? 'active' : 'inactive'}`, 'Bad Request');
        const files = filesOf(stack);
        await (action === 'start' ? compose.up(files, { pull: false, removeOrphans: false }) : compose.stop(files)).catch(composeError);
        const updated = await state.update((d) => {
          const s = d.stacks.find((x) => x.Id === id)!;
          s.Status = want;
          return s;
        });
        return json(updated);
      });
    });
  }
}
