import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import contentDisposition from 'content-disposition';
import type { SandboxFiles } from '../../files/index.ts';
import type { Store } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

export interface FileRoutesOptions {
  store: Store;
  files: SandboxFiles;
}

const PathQuery = Type.Object(
  {
    path: Type.Optional(Type.String({
      maxLength: 4096,
      description: 'Absolute path in /root (default), /home, /srv, /opt or /var/lib/docker/volumes/<volume>/_data; a relative path is taken from /root. `..` is refused.',
    })),
  },
  { additionalProperties: false },
);
const RequiredPathQuery = Type.Object({ path: Type.String({ minLength: 1, maxLength: 4096, description: PathQuery.properties.path.description }) }, { additionalProperties: false });

const FileEntry = Type.Object(
  {
    name: Type.String(),
    type: Type.Union([Type.Literal('dir'), Type.Literal('file'), Type.Literal('link'), Type.Literal('other')]),
    size: Type.Number({ description: 'Bytes (of the link text for a link).' }),
    mtime: Type.String({ format: 'date-time' }),
  },
  { $id: 'FileEntry' },
);

const tags = ['files'];
const params = SandboxParams;
const Binary = { type: 'string', format: 'binary' } as const;

/**
 * Spec 4.2: the file area of a running sandbox. Thin: authorise (a limited token may use them
 * all), then call files/, which the MCP tools share.
 */
export const fileRoutes: FastifyPluginAsyncTypebox<FileRoutesOptions> = async (app, { store, files }) => {
  app.addSchema(FileEntry);

  app.get('/sandboxes/:name/files', {
    schema: {
      tags, params, querystring: PathQuery,
      summary: 'List a folder: folders first, then files, by name',
      response: { 200: Type.Array(Type.Ref('FileEntry')), ...errorResponses(400, 401, 403, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    return (await files.list(record.name, request.query.path)).entries;
  });

  app.get('/sandboxes/:name/files/content', {
    schema: {
      tags, params, querystring: RequiredPathQuery,
      summary: 'Download a file, or a folder as a tar archive',
      description: 'A file comes as `application/octet-stream` with its length; a folder as an `application/x-tar` stream whose entries start with the folder name. Links inside are stored as links, never followed.',
      produces: ['application/octet-stream', 'application/x-tar'],
      response: { 200: { ...Binary, description: 'The bytes' }, ...errorResponses(400, 401, 403, 404, 409, 410, 503) },
    },
  }, async (request, reply) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const download = await files.download(record.name, request.query.path);
    const filename = download.kind === 'folder' ? `${download.name}.tar` : download.name;
    reply.header('content-disposition', contentDisposition(filename));
    if (download.kind === 'file') {
      reply.header('content-length', download.size);
      reply.type('application/octet-stream');
    } else {
      reply.type('application/x-tar');
    }
    request.raw.on('close', () => { if (!reply.raw.writableFinished) download.stream.destroy(); });
    return reply.send(download.stream as unknown as string); // streamed, never serialised
  });

  app.get('/sandboxes/:name/files/text', {
    schema: {
      tags, params, querystring: RequiredPathQuery,
      summary: 'Read a UTF-8 text file of up to 1 MB',
      response: { 200: Type.Object({ path: Type.String(), text: Type.String() }), ...errorResponses(400, 401, 403, 404, 409, 410, 422, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    return files.readText(record.name, request.query.path);
  });

  app.post('/sandboxes/:name/files/mkdir', {
    schema: {
      tags, params,
      summary: 'Create a folder (and missing parents); owner root, mode 0644',
      body: Type.Object({ path: Type.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false }),
      response: { 201: Type.Object({ path: Type.String() }), ...errorResponses(400, 401, 403, 404, 409, 410, 503) },
    },
  }, async (request, reply) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const result = await files.mkdir(record.name, request.body.path);
    return reply.status(201).send(result);
  });

  app.delete('/sandboxes/:name/files', {
    schema: {
      tags, params, querystring: RequiredPathQuery,
      summary: 'Delete a file, a link, or a folder with everything in it (never a top folder or a volume\'s own folder)',
      response: { 200: Type.Object({ path: Type.String(), deleted: Type.Literal(true) }), ...errorResponses(400, 401, 403, 404, 409, 410, 503) },
    },
  }, async (request) => {
    const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    return files.remove(record.name, request.query.path);
  });

  // The upload takes the raw request stream: its own context, where every body is passed through
  // unparsed (no buffering, no bodyLimit); FILES_MAX_UPLOAD is enforced while streaming.
  await app.register(async (scope) => {
    const raw = scope.withTypeProvider<TypeBoxTypeProvider>();
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
    raw.put('/sandboxes/:name/files/content', {
      schema: {
        tags, params, querystring: RequiredPathQuery,
        summary: 'Upload a file: the request body is the raw bytes',
        description: `Streamed to a temporary file beside the target and put in its place when complete, so a stopped upload leaves nothing under the final name. Owner root, mode 0644. Larger than FILES_MAX_UPLOAD (${files.maxUpload} bytes here): 413.`,
        consumes: ['application/octet-stream'],
        response: { 200: Type.Object({ path: Type.String(), size: Type.Number() }), ...errorResponses(400, 401, 403, 404, 409, 410, 413, 503) },
      },
    }, async (request) => {
      const record = await authorizeSandbox(store, request.principal, request.params.name, 'use');
      const length = request.headers['content-length'];
      const body = (request.body as IncomingMessage | undefined) ?? emptyBody();
      return files.upload(record.name, request.query.path, body, length === undefined ? undefined : Number(length));
    });
  });
};

function emptyBody(): Readable {
  return Readable.from([]);
}
