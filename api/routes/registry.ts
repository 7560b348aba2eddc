import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Store, VersionRecord } from '../../store/index.ts';
import { authorizeSandbox } from '../../accounts/index.ts';
import { errorResponses, SandboxParams } from '../schemas/common.ts';

const Finding = Type.Object({
  path: Type.String({ description: 'File path inside the layer, or config:Env/<NAME> / config:history[i] for the image config. Never the secret itself.' }),
  layer: Type.String({ description: 'Digest of the layer (or config blob) that holds it; a layer stays pullable even if a later layer deletes the file.' }),
  rule: Type.String({ description: 'Rule that matched: env-file, private-key, ssh-private-key-file, pkcs12, aws-credentials, svc-access-token, github-token, … (docs/scanner.md lists them).' }),
  line: Type.Optional(Type.Integer({ minimum: 1, description: 'Line of the file the secret is on (content findings).' })),
  fingerprint: Type.Optional(Type.String({ description: 'Short hash of the secret (of the whole file for a file-name rule), never the secret: the same secret in several versions has the same fingerprint.' })),
  vendored: Type.Optional(Type.Boolean({ description: 'The file is in a package folder (node_modules, site-packages, vendor…): likely a package\'s fixture, judged by the same rules.' })),
  manifest: Type.Optional(Type.String({ description: 'For an index: the platform image the finding is in.' })),
  secret: Type.Optional(Type.String({ description: "Rule owner-secret: the name of the owner's secret (PUT /api/me/secrets) whose exact value stands there; never the value." })),
  layer_index: Type.Optional(Type.Integer({ minimum: 1, description: 'Rule owner-secret in a layer: the layer\'s place in the image, 1-based.' })),
  message: Type.Optional(Type.String({ description: 'Rule owner-secret: the finding in a sentence ("your secret DB_PASSWORD is in app/config.py, layer 3").' })),
}, { additionalProperties: false });

const ScanState = Type.Union(['pending', 'scanning', 'clean', 'flagged', 'unscannable'].map((s) => Type.Literal(s)), {
  description: 'pending/scanning: keeps the image private until done; clean; flagged: carries secrets; unscannable: could not be read (reason says why).',
});

const Version = Type.Object({
  digest: Type.String(),
  tags: Type.Array(Type.String()),
  kind: Type.Union([Type.Literal('image'), Type.Literal('index')]),
  media_type: Type.String(),
  platform: Type.Optional(Type.String({ description: 'os/architecture of an image that an index lists.' })),
  children: Type.Optional(Type.Array(Type.String(), { description: 'Digests of the images an index lists.' })),
  pushed_at: Type.String({ format: 'date-time' }),
  scan: Type.Object({
    state: ScanState,
    reason: Type.Optional(Type.String()),
    progress: Type.Optional(Type.Object({ layers_total: Type.Integer(), layers_done: Type.Integer(), bytes_read: Type.Integer() })),
    started_at: Type.Optional(Type.String({ format: 'date-time' })),
    finished_at: Type.Optional(Type.String({ format: 'date-time' })),
  }),
  findings: Type.Array(Finding),
}, { additionalProperties: false });

const Image = Type.Object({
  name: Type.String({ description: 'Repository: <sandbox>/<image>; pull as registry.<domain>/<name>:<tag>.' }),
  visibility: Type.Union([Type.Literal('public'), Type.Literal('private')]),
  reason: Type.String({ description: 'Why the image is public or private.' }),
  versions: Type.Array(Version),
}, { additionalProperties: false });

export const RegistryReport = Type.Object({
  sandbox: Type.String(),
  images: Type.Array(Image),
}, { $id: 'RegistryReport', additionalProperties: false, description: 'Secret-scan report of the images pushed under this sandbox.' });

function version(v: VersionRecord) {
  return {
    digest: v.digest,
    tags: v.tags,
    kind: v.kind,
    media_type: v.media_type,
    ...(v.platform ? { platform: v.platform } : {}),
    ...(v.children ? { children: v.children } : {}),
    pushed_at: v.pushed_at,
    scan: {
      state: v.state,
      ...(v.reason ? { reason: v.reason } : {}),
      ...(v.progress ? { progress: v.progress } : {}),
      ...(v.scan_started_at ? { started_at: v.scan_started_at } : {}),
      ...(v.scanned_at && (v.state === 'clean' || v.state === 'flagged' || v.state === 'unscannable') ? { finished_at: v.scanned_at } : {}),
    },
    findings: v.findings.map((f) => ({
      path: f.path, layer: f.layer, rule: f.rule,
      ...(f.line ? { line: f.line } : {}), ...(f.fingerprint ? { fingerprint: f.fingerprint } : {}), ...(f.vendored ? { vendored: true } : {}),
      ...(f.manifest ? { manifest: f.manifest } : {}),
      ...(f.secret ? { secret: f.secret, message: `your secret ${f.secret} is in ${f.path}${f.line ? `:${f.line}` : ''}${f.layer_index ? `, layer ${f.layer_index}` : ''}` } : {}),
      ...(f.layer_index ? { layer_index: f.layer_index } : {}),
    })),
  };
}

/** Spec 4.1 / 2.5: the secret-scan report of the images pushed under a sandbox (its registry project). */
export const registryRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  app.addSchema(RegistryReport);
  app.get('/sandboxes/:name/registry', {
    schema: {
      tags: ['registry'],
      summary: 'Secret-scan report of the images pushed to registry.<domain>/<sandbox>/…',
      description: 'Every image (repository) with its visibility and the reason, and each version with digest, tags, scan state and findings (path, layer, rule, line, fingerprint; never the secret).',
      params: SandboxParams,
      response: { 200: Type.Ref('RegistryReport'), ...errorResponses(401, 404, 409, 410) },
    },
  }, async (request) => {
    const sandbox = await authorizeSandbox(store, request.principal, request.params.name, 'use');
    const repos = await store.registry.listRepos(sandbox.name);
    const images = await Promise.all(repos.map(async (r) => ({
      name: r.repo,
      visibility: r.public ? ('public' as const) : ('private' as const),
      reason: r.reason,
      versions: (await store.registry.listVersions(r.repo)).map(version),
    })));
    return { sandbox: sandbox.name, images };
  });
};
