import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { StringDecoder } from 'node:string_decoder';
import { MAX_TIMEOUT_S, OUTPUT_LIMIT, DEFAULT_TIMEOUT_S, type SandboxCommands } from '../../exec/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

export interface ExecRoutesOptions {
  store: Store;
  commands: SandboxCommands;
}

export const ExecBody = Type.Object(
  {
    command: Type.Union([
      Type.String({ minLength: 1, maxLength: 65536, description: 'Run by `sh -c`' }),
      Type.Array(Type.String({ maxLength: 65536 }), { minItems: 1, maxItems: 4096, description: 'argv, run as it is' }),
    ]),
    stdin: Type.Optional(Type.String({ description: 'Written to the command\'s stdin, which is then closed (empty without it)' })),
    timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_TIMEOUT_S, description: `Seconds (default ${DEFAULT_TIMEOUT_S}): then SIGTERM to the command's process group, SIGKILL 2 s later` })),
  },
  { additionalProperties: false },
);

const CommandEnd = {
  exit_code: Type.Integer({ description: 'The command\'s exit code (124 when its timeout ended it, 127 when it was not found)' }),
  timed_out: Type.Boolean(),
  woke: Type.Boolean({ description: 'The sandbox was asleep and was woken for this command' }),
  duration_ms: Type.Integer(),
};
const ExecResult = Type.Object({
  ...CommandEnd,
  stdout: Type.String(),
  stderr: Type.String(),
  truncated: Type.Boolean({ description: `stdout or stderr was longer than ${OUTPUT_LIMIT} bytes and was cut there (use exec/stream for long output)` }),
});

const STREAM_DESCRIPTION = `The same command, its output as it comes: \`application/x-ndjson\`, one JSON object a line:
\`{"stream":"stdout"|"stderr","data":"<text>"}\` (UTF-8; a character split between reads is kept whole), then
\`{"exit_code","timed_out","woke","duration_ms"}\` as the last line. No output bound; the timeout holds.
A failure after the answer began is a last line \`{"error":{"code","message"}}\`.
Closing the connection cuts the command off (SIGPIPE on its next write; its timeout ends it otherwise).`;

/**
 * Commands in a sandbox in one call (what Daytona's process.executeCommand and E2B's
 * commands.run do). Thin: authorise (a limited token may run commands in its own sandbox), then
 * exec/. An asleep sandbox is woken first, as E2B resumes a paused sandbox.
 */
export const execRoutes: FastifyPluginAsyncTypebox<ExecRoutesOptions> = async (app, { store, commands }) => {
  const tags = ['exec'];
  const params = SandboxParams;

  app.post('/sandboxes/:name/exec', {
    schema: {
      tags, params, body: ExecBody,
      summary: 'Run a command as root in the sandbox and answer with its exit code and output',
      description: `Runs in /root with the sandbox's environment. Each of stdout and stderr is cut at ${OUTPUT_LIMIT} bytes (\`truncated\`). An asleep sandbox is woken first (a few seconds; about 30 s from deep sleep); the timeout starts once the command runs.`,
      response: { 200: ExecResult, ...errorResponses(400, 401, 404, 409, 410, 502, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    return commands.run(record.name, request.body);
  });

  app.post('/sandboxes/:name/exec/stream', {
    schema: {
      tags, params, body: ExecBody,
      summary: 'Run a command and stream its output (NDJSON)',
      description: STREAM_DESCRIPTION,
      produces: ['application/x-ndjson'],
      response: { 200: { type: 'string', description: 'application/x-ndjson' }, ...errorResponses(400, 401, 404, 409, 410, 502, 503) },
    },
  }, async (request, reply) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const cmd = await commands.start(record.name, request.body);
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' });
    const line = (value: unknown) => res.write(`${JSON.stringify(value)}\n`);
    for (const stream of ['stdout', 'stderr'] as const) {
      const decoder = new StringDecoder('utf8');
      const source = cmd[stream];
      source.on('data', (chunk: Buffer) => {
        const data = decoder.write(chunk);
        // a client that reads slower than the command writes holds the command back (stdout;
        // stderr is the engine's to interleave and is not held)
        if (data && !line({ stream, data }) && stream === 'stdout') {
          source.pause();
          res.once('drain', () => source.resume());
        }
      });
      source.on('end', () => { const rest = decoder.end(); if (rest) line({ stream, data: rest }); });
    }
    res.on('close', () => { if (!res.writableFinished) cmd.stdout.destroy(); });
    try {
      const end = await cmd.done;
      await Promise.all([ended(cmd.stdout), ended(cmd.stderr)]);
      line(end);
    } catch (err) {
      request.log.warn({ sandbox: record.name, err }, 'exec stream failed');
      line({ error: { code: 'SVC_ENGINE_UNAVAILABLE', message: `the command's connection broke: ${(err as Error).message}` } });
    }
    res.end();
  });
};

/** Resolves once a stream has ended or closed (its last data delivered). */
function ended(stream: NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean }): Promise<void> {
  if (stream.readableEnded || stream.destroyed) return Promise.resolve();
  return new Promise((resolve) => { stream.once('end', resolve); stream.once('close', resolve); });
}
