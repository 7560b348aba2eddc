import assert from 'node:assert/strict';
import { serviceCaPem } from '../../edge/index.ts';
import { OciClient } from '../../harness/oci.ts';
import { answerOf, eventually, type TestService } from '../../harness/service.ts';

/** A sandbox's registry report (`GET /api/sandboxes/<sandbox>/registry`), as its owner reads it. */
export interface RegistryReport {
  images: Array<{
    name: string; visibility: string; reason: string;
    versions: Array<{ digest: string; tags: string[]; scan: { state: string; reason?: string }; findings: Array<{ path: string; layer: string; rule: string }> }>;
  }>;
}

/**
 * The registry tests' cast: alice and bob with a sandbox each (`<prefix>a-…`, `<prefix>b-…`), and OCI
 * clients of the registry through the edge (SNI registry.<domain>): anonymous, as alice, as bob.
 */
export async function registryOwners(t: TestService, prefix: string) {
  const alice = await t.user('alice');
  const bob = await t.user('bob');
  const sandbox = async (token: string, name: string): Promise<string> => {
    const res = await t.api('POST', '/api/sandboxes', token, { name: `${name}-${t.config.redisPrefix}` });
    assert.equal(res.status, 201, answerOf(res));
    return res.body.name;
  };
  const sbA = await sandbox(alice.token, `${prefix}a`);
  const sbB = await sandbox(bob.token, `${prefix}b`);
  const ca = (await serviceCaPem(t.config, t.service.store.serviceKeys))!;
  const anon = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca });
  return { alice, bob, sbA, sbB, anon, asAlice: anon.withAuth(OciClient.basic(alice.token)), asBob: anon.withAuth(OciClient.basic(bob.token)) };
}

export async function registryReport(t: TestService, sandbox: string, token: string): Promise<RegistryReport> {
  const res = await t.api('GET', `/api/sandboxes/${sandbox}/registry`, token);
  assert.equal(res.status, 200, answerOf(res));
  return res.body as RegistryReport;
}

/** The image `repo` (`<sandbox>/<name>`) once every version's scan has finished. */
export function scansSettled(t: TestService, token: string, repo: string) {
  return eventually(async () => {
    const img = (await registryReport(t, repo.split('/')[0]!, token)).images.find((i) => i.name === repo);
    // the image's visibility is re-decided just after its versions' verdicts are written (catalog.ts)
    const settled = img && img.versions.every((v) => !['pending', 'scanning'].includes(v.scan.state)) && !/^private until the scan/.test(img.reason);
    return settled ? img : undefined;
  }, `scans of ${repo} to finish`, 30_000);
}
