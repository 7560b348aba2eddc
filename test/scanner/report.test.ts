import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { serviceCaPem } from '../../edge/index.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { gzip, LAYER_GZIP, makeTar, OciClient, privateKeyPem } from '../../harness/oci.ts';

type Finding = { path: string; layer: string; rule: string; line?: number; fingerprint?: string; vendored?: boolean };

/**
 * The report an owner reads (GET /api/sandboxes/:name/registry) after pushes through the real
 * registry front: each finding names its rule, file, layer and line, and a fingerprint, so one
 * secret in two versions (moved to another file and line, and in the Env) is recognisably one;
 * a package's fixture says it is vendored; the secret itself is nowhere in the report.
 */
describe('scan report', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let sandbox: string;
  let client: OciClient;

  before(async () => {
    t = await startTestService();
    alice = await t.user('alice');
    const created = await t.api('POST', '/api/sandboxes', alice.token, { name: `report-${t.config.redisPrefix}` });
    assert.equal(created.status, 201, answerOf(created));
    sandbox = created.body.name;
    const ca = (await serviceCaPem(t.config, t.service.store.serviceKeys))!;
    client = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca, auth: OciClient.basic(alice.token) });
  });
  after(async () => {
    client?.close();
    await t?.close();
  });

  it('names rule, path, layer, line and fingerprint; one secret has one fingerprint across versions', async () => {
    const stripe = `sk_live_${'Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1'}`;
    const v1 = gzip(await makeTar([
      { path: 'app/config.py', content: `import os\n\nSTRIPE_KEY = "${stripe}"\n` },
      { path: 'app/node_modules/pkg/test/fixture.pem', content: privateKeyPem() },
    ]));
    const v2 = gzip(await makeTar([{ path: 'srv/settings.yaml', content: `app:\n  name: shop\n  billing:\n    provider: stripe\n    key: ${stripe}\n` }]));
    const repo = `${sandbox}/shop`;
    const p1 = await client.pushImage(repo, 'v1', [{ blob: v1, mediaType: LAYER_GZIP }], { env: ['PATH=/bin', `STRIPE_KEY=${stripe}`] });
    const p2 = await client.pushImage(repo, 'v2', [{ blob: v2, mediaType: LAYER_GZIP }]);
    assert.equal(p1.status, 201);
    assert.equal(p2.status, 201);

    const image = await eventually(async () => {
      const res = await t.api('GET', `/api/sandboxes/${sandbox}/registry`, alice.token);
      assert.equal(res.status, 200, answerOf(res));
      const img = (res.body.images as Array<{ name: string; visibility: string; versions: Array<{ digest: string; scan: { state: string }; findings: Finding[] }> }>).find((i) => i.name === repo);
      return img && img.versions.length === 2 && img.versions.every((v) => v.scan.state === 'flagged') ? img : undefined;
    }, 'both versions scanned', 30_000);
    assert.equal(image.visibility, 'private');
    assert.ok(!JSON.stringify(image).includes(stripe.slice(8)), 'the secret is not in the report');

    const of = (digest: string) => image.versions.find((v) => v.digest === digest)!.findings;
    const first = of(p1.digest);
    const second = of(p2.digest);
    const inFile = first.find((f) => f.path === 'app/config.py')!;
    assert.deepEqual({ ...inFile, fingerprint: undefined, layer: undefined }, { path: 'app/config.py', rule: 'stripe-secret-key', line: 3, fingerprint: undefined, layer: undefined });
    assert.match(inFile.layer, /^sha256:[a-f0-9]{64}$/);
    assert.match(inFile.fingerprint!, /^[a-f0-9]{16}$/);
    const inEnv = first.find((f) => f.path === 'config:Env/STRIPE_KEY')!;
    assert.equal(inEnv.fingerprint, inFile.fingerprint, 'the same secret in the Env');
    const moved = second.find((f) => f.rule === 'stripe-secret-key')!;
    assert.deepEqual([moved.path, moved.line, moved.fingerprint], ['srv/settings.yaml', 5, inFile.fingerprint], 'the same secret in the next version');
    assert.notEqual(moved.layer, inFile.layer);
    const vendored = first.find((f) => f.path.includes('node_modules'))!;
    assert.deepEqual([vendored.rule, vendored.vendored], ['private-key', true]);
    assert.equal(inFile.vendored, undefined);
  });
});
