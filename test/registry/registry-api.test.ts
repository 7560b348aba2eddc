import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';
import { gzip, LAYER_GZIP, LAYER_TAR, LAYER_ZSTD, makeTar, OciClient, privateKeyPem, sha256, zstd } from '../../harness/oci.ts';
import { registryOwners, registryReport, scansSettled } from '../helpers/registry-owners.ts';

/**
 * The registry front through the edge (SNI registry.<domain>), with an OCI client: auth, who may
 * push where, scans and visibility, bad input. The docker CLI path is in docker-cli.test.ts.
 */
describe('registry front and scans (OCI API through the edge)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let sbA: string;
  let sbB: string;
  let limitedA: string;
  let anon: OciClient;
  let asAlice: OciClient;
  let asBob: OciClient;

  const report = (sandbox: string, token = alice.token) => registryReport(t, sandbox, token);
  const image = async (repo: string) => (await report(repo.split('/')[0]!)).images.find((i) => i.name === repo);
  const settled = (repo: string) => scansSettled(t, alice.token, repo);

  before(async () => {
    t = await startTestService();
    ({ alice, bob, sbA, sbB, anon, asAlice, asBob } = await registryOwners(t, 'reg'));
    limitedA = await t.limitedToken(alice.id, sbA);
  });
  after(async () => {
    anon?.close();
    await t?.close();
  });

  it('answers the docker token flow: a Bearer challenge, tokens for good credentials, 401 for bad ones', async () => {
    const ping = await anon.request('GET', '/v2/');
    assert.equal(ping.status, 401);
    assert.match(String(ping.headers['www-authenticate']), new RegExp(`^Bearer realm="https://registry\\.${t.config.domain}:${t.service.edge.httpsPort}/token",service="svc-registry"`));
    const bad = await anon.request('GET', '/token?service=svc-registry&offline_token=true', { auth: OciClient.basic('svc_' + 'x'.repeat(43)) });
    assert.equal(bad.status, 401);
    assert.equal(JSON.parse(bad.body.toString()).errors[0].code, 'UNAUTHORIZED');
    const good = await anon.request('GET', '/token?service=svc-registry', { auth: OciClient.basic(alice.token) });
    assert.equal(good.status, 200);
    const { token, expires_in } = JSON.parse(good.body.toString());
    assert.ok(token && expires_in >= 60);
    assert.equal((await anon.request('GET', '/v2/', { auth: `Bearer ${token}` })).status, 200);
    const anonymous = JSON.parse((await anon.request('GET', '/token?scope=repository:x/y:pull')).body.toString());
    assert.ok(anonymous.token, 'anonymous pulls get a token');
    assert.equal((await anon.request('GET', '/v2/', { auth: 'Bearer forged.token' })).status, 401);
  });

  it('refuses a registry token at once when its account is disabled (not at the token\'s expiry)', async () => {
    const dora = await t.user('dora');
    const root = await t.user('root', { admin: true });
    const issued = await anon.request('GET', '/token?service=svc-registry', { auth: OciClient.basic(dora.token) });
    const { token } = JSON.parse(issued.body.toString());
    assert.equal((await anon.request('GET', '/v2/', { auth: `Bearer ${token}` })).status, 200);
    const disabled = await t.api('POST', `/api/admin/users/dora-${t.config.redisPrefix}/disable`, root.token);
    assert.equal(disabled.status, 200, JSON.stringify(disabled.body));
    assert.equal((await anon.request('GET', '/v2/', { auth: `Bearer ${token}` })).status, 401);
  });

  it('lets a user push only into their own sandboxes; a limited token only into its own', async () => {
    const layer = gzip(await makeTar([{ path: 'hello.txt', content: 'hello' }]));
    assert.equal((await anon.pushBlob(`${sbA}/app`, layer)).status, 401, 'no credentials');
    assert.equal((await asBob.pushBlob(`${sbA}/app`, layer)).status, 403, "another user's project");
    assert.equal((await asAlice.pushBlob(`nosuch-${t.config.redisPrefix}/app`, layer)).status, 403, 'no such sandbox');
    assert.equal((await asAlice.pushBlob(`${sbA}`, layer)).status, 400, 'a repository needs <project>/<image>');
    const limited = anon.withAuth(OciClient.basic(limitedA));
    assert.equal((await limited.pushBlob(`${sbA}/app`, layer)).status, 201);
    assert.equal((await limited.pushBlob(`${sbB}/app`, layer)).status, 403);
    const denied = await asBob.request('POST', `/v2/${sbA}/app/blobs/uploads/`);
    assert.equal(JSON.parse(denied.body.toString()).errors[0].code, 'DENIED');
  });

  it('makes a clean image public: anyone pulls it without logging in', async () => {
    const repo = `${sbA}/clean`;
    const layer = gzip(await makeTar([
      { path: 'etc/ssl/certs/ca.pem', content: '-----BEGIN CERTIFICATE-----\nMIIB' + 'A'.repeat(200) + '\n-----END CERTIFICATE-----\n' },
      { path: 'root/.ssh/id_ed25519.pub', content: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG9 me@host\n' },
      { path: 'usr/share/doc/ssh.md', content: 'Put your key in a file that starts with -----BEGIN OPENSSH PRIVATE KEY----- and never commit it.\n' },
      { path: 'app/.env.example', content: 'SVC_TOKEN=\n' },
    ]));
    const pushed = await asAlice.pushImage(repo, 'v1', [{ blob: layer, mediaType: LAYER_GZIP }]);
    assert.equal(pushed.status, 201, pushed.body);
    const img = await settled(repo);
    assert.equal(img.versions[0]!.scan.state, 'clean', JSON.stringify(img));
    assert.deepEqual(img.versions[0]!.findings, []);
    assert.equal(img.visibility, 'public');
    const manifest = await anon.request('GET', `/v2/${repo}/manifests/v1`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } });
    assert.equal(manifest.status, 200);
    const blob = await anon.request('GET', `/v2/${repo}/blobs/${sha256(layer)}`);
    assert.equal(blob.status, 200);
    assert.ok(blob.body.equals(layer));
  });

  it('flags env files, private keys (even deleted by a later layer), tokens in ENV; keeps the image private until the version is deleted', async () => {
    const repo = `${sbA}/flagged`;
    const clean = gzip(await makeTar([{ path: 'app/main.sh', content: 'echo hi\n' }]));
    assert.equal((await asAlice.pushImage(repo, 'good', [{ blob: clean, mediaType: LAYER_GZIP }], { env: ['PATH=/bin', 'PORT=8080', 'DB_PASSWORD=changeme', 'TOKEN_FILE=/run/secrets/token'] })).status, 201);
    await eventually(async () => (await image(repo))?.visibility === 'public', 'the clean version to make it public', 30_000);

    const key = privateKeyPem();
    const withKey = gzip(await makeTar([{ path: 'root/.ssh/deploy_key', content: key }, { path: 'app/.env', content: 'DB_PASSWORD=hunter2hunter2\n' }]));
    const removesKey = zstd(await makeTar([{ path: 'root/.ssh/deploy_key', content: null }, { path: 'app/.env', content: null }]));
    const token = 'svc_' + 'A1b2C3d4'.repeat(5) + 'xyz';
    const generic = 'q8Zr2vLx9TfW3mKp7NcY';
    const pushed = await asAlice.pushImage(repo, 'bad', [{ blob: clean, mediaType: LAYER_GZIP }, { blob: withKey, mediaType: LAYER_GZIP }, { blob: removesKey, mediaType: LAYER_ZSTD }], { env: ['PATH=/bin', `SVC_TOKEN=${token}`, `DB_PASSWORD=${generic}`], history: [`ENV API_SECRET=${generic}`] });
    assert.equal(pushed.status, 201, pushed.body);
    const img = await settled(repo);
    assert.equal(img.visibility, 'private');
    assert.match(img.reason, /carries secrets/);
    const bad = img.versions.find((v) => v.tags.includes('bad'))!;
    assert.equal(bad.scan.state, 'flagged');
    const rules = bad.findings.map((f) => `${f.path} ${f.rule}`).sort();
    assert.deepEqual(rules, ['app/.env env-file', 'config:Env/DB_PASSWORD generic-secret', 'config:Env/SVC_TOKEN svc-access-token', 'config:history[0] generic-secret', 'root/.ssh/deploy_key private-key']);
    assert.equal(bad.findings.find((f) => f.rule === 'private-key')!.layer, sha256(withKey));
    const text = JSON.stringify(await report(sbA));
    assert.ok(!text.includes(token) && !text.includes(generic) && !text.includes('hunter2') && !text.includes('PRIVATE KEY-----\nMII'), 'the report never carries a secret');

    // private: anonymous pulls are refused, for both versions and every blob
    const anonManifest = await anon.request('GET', `/v2/${repo}/manifests/good`);
    assert.equal(anonManifest.status, 401);
    assert.equal((await anon.request('GET', `/v2/${repo}/blobs/${sha256(clean)}`)).status, 401);
    assert.equal((await asBob.request('GET', `/v2/${repo}/manifests/good`)).status, 404, 'another user sees nothing');
    assert.equal((await asAlice.request('GET', `/v2/${repo}/manifests/bad`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).status, 200, 'the owner pulls');

    const del = await asBob.request('DELETE', `/v2/${repo}/manifests/${bad.digest}`);
    assert.equal(del.status, 403, 'only the owner deletes');
    assert.equal((await asAlice.request('DELETE', `/v2/${repo}/manifests/bad`)).status, 400, 'delete by digest');
    assert.equal((await asAlice.request('DELETE', `/v2/${repo}/manifests/${bad.digest}`)).status, 202);
    const after = await image(repo);
    assert.equal(after!.visibility, 'public', after!.reason);
    assert.equal(after!.versions.length, 1);
    assert.equal((await anon.request('GET', `/v2/${repo}/manifests/good`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).status, 200);
    // the flagged layer is still in storage, but no longer part of a version: never served to others
    assert.equal((await anon.request('GET', `/v2/${repo}/blobs/${sha256(withKey)}`)).status, 401);
    assert.equal((await asBob.request('GET', `/v2/${repo}/blobs/${sha256(withKey)}`)).status, 404);
  });

  it('scans each layer once by digest and reuses the result', async () => {
    const layer = gzip(await makeTar([{ path: 'shared/file.txt', content: 'shared layer' }]));
    const r1 = await asAlice.pushImage(`${sbA}/reuse1`, 'v1', [{ blob: layer, mediaType: LAYER_GZIP }]);
    assert.equal(r1.status, 201);
    await settled(`${sbA}/reuse1`);
    const first = await t.service.store.registry.getLayer(sha256(layer));
    assert.ok(first);
    const r2 = await asAlice.pushImage(`${sbA}/reuse2`, 'v1', [{ blob: layer, mediaType: LAYER_GZIP }], { env: ['A=1'] });
    assert.equal(r2.status, 201);
    await settled(`${sbA}/reuse2`);
    assert.equal((await t.service.store.registry.getLayer(sha256(layer)))!.scanned_at, first.scanned_at, 'not scanned again');
  });

  it('a wrong declared size makes only that version unscannable, not the layer for everyone', async () => {
    const layer = gzip(await makeTar([{ path: 'popular/base.txt', content: `a popular base layer ${t.config.redisPrefix}` }]));
    const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Env: ['PATH=/bin'] }, rootfs: { type: 'layers', diff_ids: [sha256(layer)] } }));
    const manifest = (size: number) => ({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
      layers: [{ mediaType: LAYER_GZIP, digest: sha256(layer), size }],
    });
    const liar = `${sbA}/liar`; // another tenant's repository would do the same; bob's must stay empty
    for (const blob of [layer, config]) assert.equal((await asAlice.pushBlob(liar, blob)).status, 201);
    const lie = await asAlice.pushManifest(liar, 'v1', manifest(layer.length + 7), 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(lie.status, 201, lie.body);
    const lied = await settled(liar);
    assert.equal(lied.versions[0]!.scan.state, 'unscannable');
    assert.match(lied.versions[0]!.scan.reason ?? '', /size mismatch/);

    const honest = `${sbA}/honest`;
    const r = await asAlice.pushImage(honest, 'v1', [{ blob: layer, mediaType: LAYER_GZIP }]);
    assert.equal(r.status, 201, r.body);
    const img = await settled(honest);
    assert.equal(img.versions[0]!.scan.state, 'clean', JSON.stringify(img.versions[0]));
  });

  it('a scan that cannot run (no zstd here) fails for a retry and decides nothing about the layer', async () => {
    const layer = zstd(await makeTar([{ path: 'z/file.txt', content: `zstd layer ${t.config.redisPrefix}` }]));
    const repo = `${sbA}/nozstd`;
    const worker = t.service.scanning.worker!;
    await worker.pause(); // this test drives the scanner itself, as the worker's job would
    const path = process.env.PATH;
    try {
      const r = await asAlice.pushImage(repo, 'v1', [{ blob: layer, mediaType: LAYER_ZSTD }]);
      assert.equal(r.status, 201, r.body);
      process.env.PATH = '/nonexistent';
      await assert.rejects(t.service.scanning.scanner.scanVersion(repo, r.digest), /cannot run zstd/, 'the job fails, so BullMQ retries it');
      assert.equal(await t.service.store.registry.getLayer(sha256(layer)), undefined, 'nothing kept about the layer');
      process.env.PATH = path;
      const retried = await t.service.scanning.scanner.scanVersion(repo, r.digest);
      assert.equal(retried!.state, 'clean', JSON.stringify(retried));
    } finally {
      process.env.PATH = path;
      worker.resume();
    }
    assert.equal((await settled(repo)).versions[0]!.scan.state, 'clean');
  });

  it('pushes a multi-platform index: its images are scanned and decide its visibility', async () => {
    const repo = `${sbA}/multi`;
    const amd = await asAlice.pushImage(repo, 'sha256-placeholder-amd', [{ blob: gzip(await makeTar([{ path: 'bin/app', content: 'amd64' }])), mediaType: LAYER_GZIP }]);
    const arm = await asAlice.pushImage(repo, 'sha256-placeholder-arm', [{ blob: gzip(await makeTar([{ path: 'bin/app', content: 'arm64' }, { path: 'srv/prod.env', content: 'X=1' }])), mediaType: LAYER_GZIP }]);
    assert.equal(amd.status, 201);
    assert.equal(arm.status, 201);
    const index = {
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: amd.digest, size: Buffer.byteLength(JSON.stringify(amd.manifest)), platform: { os: 'linux', architecture: 'amd64' } },
        { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: arm.digest, size: Buffer.byteLength(JSON.stringify(arm.manifest)), platform: { os: 'linux', architecture: 'arm64' } },
      ],
    };
    const put = await asAlice.pushManifest(repo, 'latest', index, index.mediaType);
    assert.equal(put.status, 201, put.body);
    const img = await settled(repo);
    const idx = img.versions.find((v) => v.tags.includes('latest'))!;
    assert.equal(idx.scan.state, 'flagged');
    assert.deepEqual(idx.findings.map((f) => [f.path, f.rule, (f as { manifest?: string }).manifest]), [['srv/prod.env', 'env-file', arm.digest]]);
    assert.equal(img.visibility, 'private');
  });

  it('refuses bad manifests and blobs with clear OCI errors', async () => {
    const repo = `${sbA}/bad`;
    const unknown = await asAlice.pushManifest(repo, 'v1', { schemaVersion: 2 }, 'application/vnd.example.thing+json');
    assert.equal(unknown.status, 400);
    assert.match(unknown.body, /MANIFEST_INVALID.*unsupported manifest media type/);
    const notJson = await asAlice.pushManifest(repo, 'v1', Buffer.from('{nope'), 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(notJson.status, 400);
    const big = await asAlice.pushManifest(repo, 'v1', Buffer.alloc(5 * 1024 * 1024, 0x20), 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(big.status, 413);
    const wrongDigest = await asAlice.pushManifest(repo, sha256(Buffer.from('other')), { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(Buffer.from('x')), size: 1 }, layers: [] }, 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(wrongDigest.status, 400);
    assert.match(wrongDigest.body, /DIGEST_INVALID/);
    const missingBlobs = await asAlice.pushManifest(repo, 'v1', { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(Buffer.from('x')), size: 1 }, layers: [] }, 'application/vnd.oci.image.manifest.v1+json');
    assert.equal(missingBlobs.status, 400, 'the upstream refuses a manifest whose blobs are missing');
    const blob = await asAlice.pushBlob(repo, Buffer.from('some bytes'), sha256(Buffer.from('other bytes')));
    assert.equal(blob.status, 400);
    assert.match(blob.body, /DIGEST_INVALID/);
    assert.equal(await image(repo), undefined, 'nothing refused is recorded');
  });

  it('marks hostile or unknown layers unscannable, so the image stays private', async () => {
    const cases: Array<[string, Buffer, string, RegExp]> = [
      ['bomb', gzip(Buffer.alloc(400 * 1024 * 1024)), LAYER_GZIP, /compression bomb/],
      ['escape', await makeTar([{ path: '../../etc/passwd', content: 'x' }]), LAYER_TAR, /escapes the layer root/],
      ['notatar', gzip(Buffer.from('this is not a tar archive at all, just text '.repeat(40))), LAYER_GZIP, /not a readable gzip tar/],
      ['corrupt', Buffer.concat([gzip(await makeTar([{ path: 'a', content: 'b'.repeat(100000) }])).subarray(0, 200), Buffer.alloc(100, 7)]), LAYER_GZIP, /corrupt|readable/],
      ['helm', Buffer.from('a helm chart'), 'application/vnd.cncf.helm.chart.content.v1.tar+gzip', /not a filesystem layer/],
    ];
    for (const [name, blob, mediaType, reason] of cases) {
      const repo = `${sbA}/${name}`;
      const r = await asAlice.pushImage(repo, 'v1', [{ blob, mediaType }]);
      assert.equal(r.status, 201, `${name}: ${r.body}`);
      const img = await settled(repo);
      assert.equal(img.versions[0]!.scan.state, 'unscannable', `${name}: ${JSON.stringify(img.versions[0])}`);
      assert.match(img.versions[0]!.scan.reason ?? '', reason, name);
      assert.equal(img.visibility, 'private', name);
      assert.equal((await anon.request('GET', `/v2/${repo}/manifests/v1`)).status, 401, name);
    }
  });

  it('reports only to the owner; another user gets 404', async () => {
    assert.equal((await t.api('GET', `/api/sandboxes/${sbA}/registry`, bob.token)).status, 404);
    assert.equal((await t.api('GET', `/api/sandboxes/${sbA}/registry`, undefined)).status, 401);
    assert.equal((await t.api('GET', `/api/sandboxes/${sbA}/registry`, limitedA)).status, 200);
    assert.deepEqual((await report(sbB, bob.token)).images, []);
  });
});
