import { serviceCaPem } from '../edge/index.ts';
import { LAYER_GZIP, sha256, type OciClient } from './oci.ts';
import type { TestService } from './service.ts';

/**
 * What a push to the service's registry needs: a user ("bench") with one sandbox (`bench-<prefix>`),
 * whose token the registry takes, and the service CA (PEM) its TLS port is signed by.
 */
export async function registryPusher(t: TestService): Promise<{ token: string; sandbox: string; ca: string }> {
  const { token } = await t.user('bench');
  const created = await t.api('POST', '/api/sandboxes', token, { name: `bench-${t.config.redisPrefix}` });
  if (created.status !== 201) throw new Error(`create sandbox: ${JSON.stringify(created.body)}`);
  const ca = await serviceCaPem(t.config, t.service.store.serviceKeys);
  if (!ca) throw new Error('the service has no CA');
  return { token, sandbox: created.body.name as string, ca };
}

/** A gzip tar layer already uploaded to the registry. */
export interface UploadedLayer {
  digest: string;
  size: number;
}

/** A version's scan as the owner's registry report (GET /api/sandboxes/<sandbox>/registry) shows it. */
export interface ScanVerdict {
  state: string;
  reason?: string;
  layers?: Array<{ reason?: string }>;
}

/**
 * Makes an image of one layer already uploaded (its bytes sent apart, as a large push sends them):
 * pushes a config with `env`, then the manifest under `tag`. Returns the manifest's digest.
 */
export async function tagUploadedLayer(client: OciClient, repo: string, tag: string, layer: UploadedLayer, env: string[]): Promise<string> {
  const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Env: env }, rootfs: { type: 'layers', diff_ids: [] } }));
  const c = await client.pushBlob(repo, config);
  if (c.status !== 201) throw new Error(`config: ${c.status} ${c.body}`);
  const manifest = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
    layers: [{ mediaType: LAYER_GZIP, digest: layer.digest, size: layer.size }],
  };
  const m = await client.pushManifest(repo, tag, manifest, manifest.mediaType);
  if (m.status !== 201 || !m.digest) throw new Error(`manifest: ${m.status} ${m.body}`);
  return m.digest;
}

/**
 * The scan of version `digest` of image `repo` (`<sandbox>/<name>`) once it is finished (neither
 * pending nor scanning), read from the owner's registry report every `everyMs`. No time limit: the
 * benches measure how long it takes.
 */
export async function finishedScan(t: TestService, token: string, repo: string, digest: string, everyMs: number): Promise<ScanVerdict> {
  for (;;) {
    const res = await t.api('GET', `/api/sandboxes/${repo.split('/')[0]}/registry`, token);
    if (res.status !== 200) throw new Error(`registry report: ${res.status}`);
    const version = res.body.images?.find((x: { name: string }) => x.name === repo)?.versions.find((x: { digest: string }) => x.digest === digest);
    if (version && !['pending', 'scanning'].includes(version.scan.state)) return version.scan as ScanVerdict;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
