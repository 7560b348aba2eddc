import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { errors } from '../../core/errors.ts';

/** Where `npm run setup` builds the web UI (vite, ui/). */
export const UI_DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../ui/dist');

/**
 * The page may load only our own scripts, styles and API: no inline code, no other origin, no
 * framing. Apps on our subdomains are other origins too.
 */
export const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  + "font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

interface Asset { type: string; raw: Buffer; gzip: Buffer; br: Buffer; etag: string }

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.woff2': 'font/woff2', '.json': 'application/json',
};

function asset(file: string): Asset {
  const raw = fs.readFileSync(file);
  return {
    type: TYPES[path.extname(file)] ?? 'application/octet-stream',
    raw,
    gzip: gzipSync(raw, { level: 9 }),
    br: brotliCompressSync(raw, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }),
    etag: `"${createHash('sha256').update(raw).digest('base64url').slice(0, 22)}"`,
  };
}

/** The build, read and compressed once at start (a few tens of KB). Null when not built. */
function loadBuild(dir: string): { index: Asset; assets: Map<string, Asset> } | null {
  if (!fs.existsSync(path.join(dir, 'index.html'))) return null;
  const assetsDir = path.join(dir, 'assets');
  const names = fs.existsSync(assetsDir) ? fs.readdirSync(assetsDir) : [];
  return { index: asset(path.join(dir, 'index.html')), assets: new Map(names.map((n) => [n, asset(path.join(assetsDir, n))])) };
}

function send(request: FastifyRequest, reply: FastifyReply, a: Asset, cacheControl: string) {
  reply.header('content-type', a.type).header('cache-control', cacheControl).header('etag', a.etag).header('vary', 'accept-encoding')
    .header('x-content-type-options', 'nosniff');
  if (request.headers['if-none-match'] === a.etag) return reply.status(304).send();
  const accepted = String(request.headers['accept-encoding'] ?? '');
  if (/\bbr\b/.test(accepted)) return reply.header('content-encoding', 'br').send(a.br);
  if (/\bgzip\b/.test(accepted)) return reply.header('content-encoding', 'gzip').send(a.gzip);
  return reply.send(a.raw);
}

/**
 * The web UI at `/`: index.html revalidated on every load (no-cache), hashed assets kept for a
 * year (immutable), brotli or gzip as the browser accepts, a strict CSP. Without a build, `/`
 * says how to make one and the API works as ever.
 */
export async function uiPlugin(app: FastifyInstance, opts: { dir?: string }): Promise<void> {
  const build = loadBuild(opts.dir ?? UI_DIST);
  if (!build) app.log.warn({ dir: opts.dir ?? UI_DIST }, 'the web UI is not built: run npm run setup');
  const page = { hide: true, response: { 200: Type.String(), 304: Type.Null(), 404: Type.Ref('Error'), 503: Type.String() } } as const;

  app.get('/', { schema: page }, async (request, reply) => {
    reply.header('content-security-policy', CSP).header('referrer-policy', 'no-referrer').header('x-frame-options', 'DENY');
    if (!build) return reply.status(503).type('text/plain; charset=utf-8').send('The web UI is not built on this server. The operator runs: npm run setup\n');
    return send(request, reply, build.index, 'no-cache');
  });

  app.get('/assets/:file', { schema: { ...page, params: Type.Object({ file: Type.String({ maxLength: 200 }) }) } }, async (request, reply) => {
    const a = build?.assets.get((request.params as { file: string }).file);
    if (!a) throw new errors.NotFound('no such file of the web UI; reload the page');
    return send(request, reply, a, 'public, max-age=31536000, immutable');
  });
}
