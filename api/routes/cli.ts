import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { build } from 'esbuild';

const ENTRY = fileURLToPath(new URL('../../user-cli/svc.ts', import.meta.url));

/**
 * The user CLI at /cli/svc.mjs (issue 22, as Coder serves its CLI from the deployment): cli/
 * bundled by esbuild into one ES module for Node 18 or later, at the first request of this
 * process, then kept (a few tens of ms once; never stale against the code that serves it).
 */
export const cliRoutes: FastifyPluginAsyncTypebox = async (app) => {
  let bundle: Promise<string> | undefined;
  const cliBundle = () => {
    bundle ??= build({
      entryPoints: [ENTRY], bundle: true, platform: 'node', format: 'esm', target: 'node18', write: false,
      banner: { js: '#!/usr/bin/env node' }, legalComments: 'none', logLevel: 'silent',
    }).then((r) => r.outputFiles[0]!.text);
    bundle.catch(() => { bundle = undefined; });
    return bundle;
  };
  app.get('/cli/svc.mjs', {
    config: { public: true },
    schema: {
      summary: 'The user CLI: one file for Node 18 or later (node svc.mjs --help)',
      description: 'Run it in an export folder: `curl -so svc.mjs https://<domain>/cli/svc.mjs && node svc.mjs status`.',
      produces: ['text/javascript'],
      response: { 200: Type.String() },
    },
  }, async (_request, reply) => reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send(await cliBundle()));
};
