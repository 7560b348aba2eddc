import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { errors } from '../../core/errors.ts';
import type { Lifecycle } from '../../lifecycle/index.ts';
import { MAX_RECENT_LINES, parseEventId, parseTime, recentLogs, SandboxLogStream, type Cursor, type LogStreamHandlers } from '../../logs/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

export const DEFAULT_HEARTBEAT_MS = 15_000;
const ENGINE_GONE_GRACE_MS = 30_000;
/** Bytes that may wait for a client before the stream stops following the logs until it has read them. */
const SSE_MAX_WAITING = 1024 * 1024;
/** A client that reads nothing of what waits for this long is cut off. */
const SLOW_CLIENT_GRACE_MS = 30_000;

const DESCRIPTION = `Server-Sent Events (\`text/event-stream\`) with the logs of every app container in the sandbox,
including containers that start while the stream is open. Events:

- \`log\`: one line. \`id\` is \`<unix ns>-<container id>-<n>\`; \`data\` is JSON
  \`{ "id", "container", "container_id", "service", "project", "stream": "stdout"|"stderr", "time", "line" }\`
  (\`service\` and \`project\` are the compose labels, or null; \`time\` is RFC 3339 with nanoseconds).
  Lines of all containers come in timestamp order (held back about 250 ms for that).
- \`container\`: \`{ "container", "container_id", "service", "project", "action": "start"|"stop", "time" }\`.
- \`end\`: \`{ "reason": "asleep", "status", "message" }\` when the sandbox goes to sleep (\`engine-disconnected\` if its
  engine went away while it kept running, or its host stopped answering: status \`unavailable\`); the stream then closes.
  Start the sandbox and reconnect to continue.
- Comment lines (\`: heartbeat\`) every 15 s keep proxies from closing a quiet stream.

Resume: reconnect with header \`Last-Event-ID\` (EventSource does it) to get every line after that event,
or pass \`since\` (RFC 3339 or unix seconds) to start at a time. Without either, the stream starts now
(\`tail\` adds the last n lines of each running container). A running sandbox's log reading counts as activity.`;

export const RecentLogsQuery = Type.Object({
  tail: Type.Optional(Type.String({ pattern: '^[0-9]{1,4}$', description: `Lines (default 100, at most ${MAX_RECENT_LINES})` })),
  container: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'Only this container (name or id prefix)' })),
}, { additionalProperties: false });

const RecentLine = Type.Object({
  container: Type.String(), container_id: Type.String(), service: Type.Union([Type.String(), Type.Null()]), project: Type.Union([Type.String(), Type.Null()]),
  stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]), time: Type.String(), line: Type.String(),
});

/** Spec 4.1 / 6: GET /sandboxes/:name/logs/stream; and the last lines at once (CLI `logs`, the MCP tool). */
export const logRoutes: FastifyPluginAsyncTypebox<{ store: Store; lifecycle: Lifecycle; heartbeatMs?: number }> = async (app, { store, lifecycle, heartbeatMs = DEFAULT_HEARTBEAT_MS }) => {
  app.get('/sandboxes/:name/logs', {
    schema: {
      tags: ['logs'], params: SandboxParams, querystring: RecentLogsQuery,
      summary: 'The last lines of the sandbox\'s app containers (running or stopped), in time order',
      response: { 200: Type.Array(RecentLine), ...errorResponses(400, 401, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const engine = await lifecycle.runningEngine(record.name);
    return recentLogs(engine, { tail: Number(request.query.tail ?? 100), container: request.query.container });
  });

  app.get('/sandboxes/:name/logs/stream', {
    schema: {
      tags: ['logs'], params: SandboxParams,
      summary: 'Live logs of every app in the sandbox (Server-Sent Events)',
      description: DESCRIPTION,
      querystring: Type.Object({
        since: Type.Optional(Type.String({ maxLength: 40, description: 'RFC 3339 time or unix seconds' })),
        tail: Type.Optional(Type.String({ pattern: '^[0-9]{1,5}$', description: 'Last n lines of each running container first' })),
      }, { additionalProperties: false }),
      headers: Type.Object({ 'last-event-id': Type.Optional(Type.String({ maxLength: 100 })) }),
      produces: ['text/event-stream'],
      response: { 200: { type: 'string', description: 'text/event-stream' }, ...errorResponses(400, 401, 404, 409, 410, 503) },
    },
  }, async (request, reply) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const lastId = request.headers['last-event-id'];
    let after: Cursor | undefined;
    let since: bigint | undefined;
    if (lastId) {
      after = parseEventId(lastId) ?? undefined;
      if (!after) throw new errors.BadRequest(`Last-Event-ID "${lastId}" is not an id of this stream (<unix ns>-<container id>-<n>)`);
    } else if (request.query.since) {
      since = parseTime(request.query.since) ?? undefined;
      if (since === undefined) throw new errors.BadRequest('since must be an RFC 3339 time or unix seconds');
    }
    const engine = await lifecycle.runningEngine(record.name, { timeoutMs: 0 });
    const name = record.name;
    const res = reply.raw;
    let closed = false;
    let open = false; // headers sent; until then events wait in `queued`
    const queued: string[] = [];
    let timer: NodeJS.Timeout | undefined;
    const write = (text: string) => {
      if (closed) return;
      if (!open) return void queued.push(text);
      res.write(text);
      if (!paused && res.writableLength > SSE_MAX_WAITING) pause();
    };
    const finish = (reason?: { reason: string; status: string }) => {
      if (closed) return;
      const message = reason?.status === 'unavailable'
        ? `sandbox "${name}" is unavailable: the engine that holds it does not answer; reconnect once its status is running again`
        : `sandbox "${name}" went to sleep; start it (POST /api/sandboxes/${name}/start) and reconnect to continue`;
      if (reason) write(`event: end\ndata: ${JSON.stringify({ ...reason, message })}\n\n`);
      closed = true;
      clearInterval(timer);
      stream.stop();
      if (open) res.end();
    };
    let emitted = after;
    const handlers: LogStreamHandlers = {
      log(event) {
        // Once paused, lines the stopped stream still delivers (the rest of an engine chunk, lines held
        // for ordering) are dropped, not queued: the resumed stream starts after the last line sent.
        if (paused) return;
        emitted = parseEventId(event.id) ?? emitted;
        write(`id: ${event.id}\nevent: log\ndata: ${JSON.stringify(event)}\n\n`);
        lifecycle.clock.recordActivity(name);
      },
      container(event) {
        if (paused) return;
        write(`event: container\ndata: ${JSON.stringify(event)}\n\n`);
      },
      gone() {
        goneAt = Date.now();
        void endIfAsleep();
      },
    };
    let stream = new SandboxLogStream(engine, handlers, { after, since, tail: request.query.tail ? Number(request.query.tail) : undefined });
    // The client reads slower than the logs come (or not at all): the stream stops following
    // and, once the client has read what waits, goes on after the last line sent — the resume a
    // Last-Event-ID gives. A client that does not read for SLOW_CLIENT_GRACE_MS is cut off.
    let paused = false;
    const pause = () => {
      paused = true;
      stream.stop();
      const cutOff = setTimeout(() => {
        request.log.info({ sandbox: name }, 'log stream: the client stopped reading; cut off');
        res.destroy();
      }, SLOW_CLIENT_GRACE_MS);
      res.once('drain', () => {
        clearTimeout(cutOff);
        if (closed) return;
        paused = false;
        stream = new SandboxLogStream(engine, handlers, { after: emitted });
        stream.start().catch(() => finish({ reason: 'engine-disconnected', status: 'unknown' }));
      });
    };
    // The inner engine goes away first while the sandbox stops (its container takes up to
    // 20 s more): once it is gone, the sandbox's state is polled until it says asleep.
    let goneAt: number | undefined;
    const endIfAsleep = async (): Promise<void> => {
      if (closed) return;
      const state = await lifecycle.observe(name).catch(() => ({ status: 'unknown' }));
      if (state.status === 'unavailable') return finish({ reason: 'engine-disconnected', status: state.status });
      if (state.status !== 'running') return finish({ reason: 'asleep', status: state.status });
      if (goneAt === undefined) return;
      if (Date.now() - goneAt > ENGINE_GONE_GRACE_MS) return finish({ reason: 'engine-disconnected', status: state.status });
      setTimeout(() => void endIfAsleep(), 500);
    };

    try {
      await stream.start();
    } catch (err) {
      stream.stop();
      throw err;
    }
    reply.hijack();
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write(`retry: 3000\n: streaming logs of ${name}\n\n`);
    open = true;
    for (const text of queued.splice(0)) res.write(text);
    if (closed) return void res.end();
    timer = setInterval(() => {
      write(`: heartbeat ${new Date().toISOString()}\n\n`);
      if (goneAt === undefined) void endIfAsleep();
    }, heartbeatMs);
    request.raw.on('close', () => finish());
    res.on('close', () => finish());
  });
};
