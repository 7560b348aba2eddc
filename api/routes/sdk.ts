import fs from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { build } from 'esbuild';
import { pack } from 'tar-stream';

const SDK = fileURLToPath(new URL('../../sdk/', import.meta.url));
/** The version of openapi-fetch the SDK is written and tested against (the tarball's one dependency). */
const OPENAPI_FETCH = '^0.17.0';

/** The files of the package: the client bundled into one module, its declarations, the generated types, the README. */
async function sdkFiles(): Promise<Record<string, string>> {
  const [bundle, source, schema, readme] = await Promise.all([
    build({ entryPoints: [`${SDK}index.ts`], bundle: true, platform: 'node', format: 'esm', target: 'node18', write: false, external: ['openapi-fetch'], legalComments: 'none', logLevel: 'silent' }),
    fs.readFile(`${SDK}index.ts`, 'utf8'),
    fs.readFile(`${SDK}schema.d.ts`, 'utf8'),
    fs.readFile(`${SDK}README.md`, 'utf8'),
  ]);
  // declarations from the source alone (isolated declarations): typescript is loaded only for this
  const ts = (await import('typescript')).default;
  const declarations = ts.transpileDeclaration(source, { fileName: 'index.ts', compilerOptions: { allowImportingTsExtensions: true } });
  const manifest = {
    name: 'svc-sdk', version: '1.0.0', description: "A typed client of the sandbox service's API (types generated from its OpenAPI document)",
    type: 'module', main: './index.js', types: './index.d.ts', exports: { '.': { types: './index.d.ts', default: './index.js' } },
    engines: { node: '>=18' }, dependencies: { 'openapi-fetch': OPENAPI_FETCH }, license: 'UNLICENSED',
  };
  return {
    'package.json': `${JSON.stringify(manifest, null, 2)}\n`,
    'index.js': bundle.outputFiles[0]!.text,
    'index.d.ts': declarations.outputText,
    'schema.d.ts': schema,
    'README.md': readme,
  };
}

/** An npm package tarball: the files under `package/`, gzipped. */
async function tarball(files: Record<string, string>): Promise<Buffer> {
  const tar = pack();
  // a fixed time: the same code gives the same bytes
  for (const [name, text] of Object.entries(files)) tar.entry({ name: `package/${name}`, mode: 0o644, mtime: new Date(0) }, text);
  tar.finalize();
  const chunks: Buffer[] = [];
  for await (const c of tar) chunks.push(c as Buffer);
  return gzipSync(Buffer.concat(chunks));
}

/**
 * The SDK as an npm package at /sdk/svc-sdk.tgz (issue 35), served as the CLI is: built at the first
 * request of this process, then kept, so it always matches the API that serves it.
 * `npm install https://<domain>/sdk/svc-sdk.tgz`; docs/sdk.md.
 */
export const sdkRoutes: FastifyPluginAsyncTypebox = async (app) => {
  let built: Promise<Buffer> | undefined;
  const sdk = () => {
    built ??= sdkFiles().then(tarball);
    built.catch(() => { built = undefined; });
    return built;
  };
  app.get('/sdk/svc-sdk.tgz', {
    config: { public: true },
    schema: {
      summary: 'The typed SDK as an npm package: npm install https://<domain>/sdk/svc-sdk.tgz',
      description: 'Types generated from this OpenAPI document, a client over openapi-fetch (its one dependency, from npm). README.md in the package shows one example per call.',
      produces: ['application/gzip'],
      response: { 200: Type.Unsafe<Buffer>({ type: 'string', format: 'binary' }) },
    },
  }, async (_request, reply) => reply.type('application/gzip').header('cache-control', 'no-cache').send(await sdk()));
};
