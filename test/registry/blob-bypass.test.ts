import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { createToken, revokeToken } from '../../accounts/index.ts';
import { startTestService, type TestService } from '../../harness/service.ts';
import { registryOwners, scansSettled } from '../helpers/registry-owners.ts';
import { gzip, LAYER_GZIP, makeTar, OciClient, privateKeyPem, sha256 } from '../../harness/oci.ts';
import { registryTraffic } from '../../harness/registry-traffic.ts';
import { KEPT_VERDICTS_MAX } from '../../registry/kept-verdicts.ts';
import { REGISTRY_VERDICT_HEADER } from '../../edge/dataplane/haproxy-config.ts';

/**
 * With HAProxy as the data plane, a blob's bytes go from HAProxy straight to the upstream registry
 * once the front, asked for that one request, allows it (docs/data-plane.md, registry); whatever
 * it refuses goes to the front, which answers it. Counted by HAProxy's own statistics: requests
 * its upstream backend carried, and requests it handed to Node's front.
 */
describe('registry blob bytes through HAProxy: the front decides each request, HAProxy carries the bytes', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bob: { id: string; token: string };
  let sbA: string;
  let sbB: string;
  let anon: OciClient;
  let asAlice: OciClient;
  let asBob: OciClient;

  const served = async () => (await registryTraffic(t))!;
  /** What `fn` answered, and how many requests HAProxy sent where meanwhile. */
  const through = async <T>(fn: () => Promise<T>) => {
    const before = await served();
    const answer = await fn();
    const now = await served();
    return { answer, upstream: now.upstream - before.upstream, front: now.front - before.front };
  };
  /**
   * Counts the store's repository lookups (what one decision reads) until `restore()`; with
   * `failFirst` the first one throws, as a store that is away would.
   */
  const repoReads = (opts: { failFirst?: boolean } = {}) => {
    const registry = t.service.store.registry;
    const getRepo = registry.getRepo;
    const spy = { count: 0, restore: () => { registry.getRepo = getRepo; } };
    registry.getRepo = async (name) => {
      if (spy.count++ === 0 && opts.failFirst) throw new Error('store away (test)');
      return getRepo.call(registry, name);
    };
    return spy;
  };
  const bearer = async (token: string) => {
    const res = await anon.request('GET', '/token?service=svc-registry', { auth: OciClient.basic(token) });
    assert.equal(res.status, 200, res.body.toString());
    return `Bearer ${JSON.parse(res.body.toString()).token as string}`;
  };
  const settled = (repo: string) => scansSettled(t, alice.token, repo);

  before(async () => {
    t = await startTestService({ dataPlane: 'haproxy' });
    ({ alice, bob, sbA, sbB, anon, asAlice, asBob } = await registryOwners(t, 'bp'));
  });
  after(async () => {
    anon?.close();
    await t?.close();
  });

  it("carries the owner's blob uploads and pulls to the upstream; upload starts and manifests go to the front", async () => {
    const repo = `${sbA}/app`;
    const layer = gzip(await makeTar([{ path: 'app/hello.txt', content: 'hello' }]));
    const push = await through(() => asAlice.pushBlob(repo, layer));
    assert.equal(push.answer.status, 201, push.answer.body);
    assert.deepEqual([push.upstream, push.front], [1, 1], 'the POST to the front, the PUT with the bytes to the upstream');

    const pull = await through(() => asAlice.request('GET', `/v2/${repo}/blobs/${sha256(layer)}`));
    assert.equal(pull.answer.status, 200);
    assert.ok(pull.answer.body.equals(layer));
    assert.equal(pull.answer.headers['docker-content-digest'], sha256(layer));
    assert.deepEqual([pull.upstream, pull.front], [1, 0]);
    const head = await through(() => asAlice.request('HEAD', `/v2/${repo}/blobs/${sha256(layer)}`, { auth: null }));
    assert.equal(head.answer.status, 401, 'HEAD without credentials: private');
    assert.deepEqual([head.upstream, head.front], [0, 1]);

    // docker's own way: POST, PATCH with the bytes, PUT ?digest= with none, each at the Location given
    const chunked = Buffer.concat([layer, Buffer.from('tail')]);
    const start = await asAlice.request('POST', `/v2/${repo}/blobs/uploads/`, { headers: { 'content-length': '0' } });
    assert.equal(start.status, 202);
    const patch = await through(() => asAlice.request('PATCH', String(start.headers.location), { headers: { 'content-type': 'application/octet-stream', 'content-length': String(chunked.length) }, body: chunked }));
    assert.equal(patch.answer.status, 202, patch.answer.body.toString());
    assert.equal(patch.upstream, 1);
    const location = String(patch.answer.headers.location);
    const put = await through(() => asAlice.request('PUT', `${location}${location.includes('?') ? '&' : '?'}digest=${sha256(chunked)}`, { headers: { 'content-length': '0' } }));
    assert.equal(put.answer.status, 201, put.answer.body.toString());
    assert.deepEqual([put.upstream, put.front], [1, 0]);

    const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: {}, rootfs: { type: 'layers', diff_ids: [] } }));
    assert.equal((await asAlice.pushBlob(repo, config)).status, 201);
    const manifest = { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length }, layers: [{ mediaType: LAYER_GZIP, digest: sha256(layer), size: layer.length }] };
    const m = await through(() => asAlice.pushManifest(repo, 'v1', manifest, manifest.mediaType));
    assert.equal(m.answer.status, 201, m.answer.body);
    assert.deepEqual([m.upstream, m.front], [0, 1], 'manifests are checked and recorded by the front');
  });

  it("never lets anyone but the owner pull a flagged image's blobs, by any repository's name", async () => {
    const repo = `${sbA}/flagged`;
    const secret = gzip(await makeTar([{ path: 'root/.ssh/deploy_key', content: privateKeyPem() }, { path: 'app/.env', content: 'DB_PASSWORD=hunter2hunter2\n' }]));
    assert.equal((await asAlice.pushImage(repo, 'v1', [{ blob: secret, mediaType: LAYER_GZIP }])).status, 201);
    const clean = gzip(await makeTar([{ path: 'app/main.sh', content: 'echo hi\n' }]));
    const publicRepo = `${sbA}/public`;
    assert.equal((await asAlice.pushImage(publicRepo, 'v1', [{ blob: clean, mediaType: LAYER_GZIP }])).status, 201);
    assert.equal((await settled(repo)).visibility, 'private');
    assert.equal((await settled(publicRepo)).visibility, 'public');
    const blob = sha256(secret);

    // [who, client, credentials, by which repository, status, sent to the upstream, to the front]
    const refused: Array<[string, OciClient, string | undefined, string, number, number, number]> = [
      ['anonymous', anon, undefined, repo, 401, 0, 1],
      ['another user (Basic)', asBob, undefined, repo, 404, 0, 1],
      ["another user's registry token", anon, await bearer(bob.token), repo, 404, 0, 1],
      ['anonymous, by the public repository', anon, undefined, publicRepo, 401, 0, 1],
      ['another user, by the public repository', asBob, undefined, publicRepo, 404, 0, 1],
      // bob may read his own repositories, so the request goes on; the upstream serves a blob only
      // by a repository that links it (a mount into bob's is refused by the front: registry-api)
      ['another user, by their own repository', asBob, undefined, `${sbB}/copy`, 404, 1, 0],
    ];
    for (const [who, client, auth, via, status, upstream, front] of refused) {
      for (const method of ['GET', 'HEAD']) {
        const r = await through(() => client.request(method, `/v2/${via}/blobs/${blob}`, auth ? { auth } : {}));
        assert.equal(r.answer.status, status, `${method} by ${who}`);
        assert.ok(!r.answer.body.includes(Buffer.from('hunter2')) && r.answer.headers['content-length'] !== String(secret.length), `${who}: no byte of the layer`);
        assert.deepEqual([r.upstream, r.front], [upstream, front], `${method} by ${who}: ${front ? 'answered by the front' : 'refused by the upstream'}`);
      }
    }
    // the public repository's own blob is anyone's, straight from the upstream
    const open = await through(() => anon.request('GET', `/v2/${publicRepo}/blobs/${sha256(clean)}`));
    assert.equal(open.answer.status, 200);
    assert.deepEqual([open.upstream, open.front], [1, 0]);
    const aliceBearer = await bearer(alice.token);
    const own = await through(() => asAlice.request('GET', `/v2/${repo}/blobs/${blob}`, { auth: aliceBearer }));
    assert.equal(own.answer.status, 200);
    assert.ok(own.answer.body.equals(secret));
    assert.deepEqual([own.upstream, own.front], [1, 0]);
  });

  it('sends nothing to the upstream for tampered, expired or revoked credentials, or into an upload of another user', async () => {
    const repo = `${sbA}/creds`;
    const layer = gzip(await makeTar([{ path: 'x', content: 'private bytes' }]));
    assert.equal((await asAlice.pushBlob(repo, layer)).status, 201);
    const path = `/v2/${repo}/blobs/${sha256(layer)}`;

    const good = await bearer(alice.token);
    const [body, mac] = good.slice('Bearer '.length).split('.') as [string, string];
    const tampered = `Bearer ${body}.${mac.slice(0, -2)}${mac.endsWith('AA') ? 'BB' : 'AA'}`;
    // a token the service signed itself (its key from the store), expired a minute ago
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString());
    const stale = Buffer.from(JSON.stringify({ ...claims, exp: Math.floor(Date.now() / 1000) - 60 })).toString('base64url');
    const key = Buffer.from((await t.service.store.serviceKeys.get('registry-token-key'))!, 'hex');
    const expired = `Bearer ${stale}.${createHmac('sha256', key).update(stale).digest('base64url')}`;
    const otherClaims = `Bearer ${Buffer.from(JSON.stringify({ ...claims, tid: 'x' })).toString('base64url')}.${mac}`;
    for (const [what, auth] of [['tampered signature', tampered], ['expired', expired], ['claims changed, signature kept', otherClaims]] as const) {
      const r = await through(() => anon.request('GET', path, { auth }));
      assert.equal(r.answer.status, 401, what);
      assert.deepEqual([r.upstream, r.front], [0, 1], `${what}: the front refused it, the upstream never saw it`);
    }

    // a revoked access token stops its registry token at the next request, whatever its expiry
    const { token: record, value } = await createToken(t.service.store, { userId: alice.id });
    const loggedIn = await bearer(value);
    assert.equal((await through(() => anon.request('GET', path, { auth: loggedIn }))).upstream, 1);
    await revokeToken(t.service.store, record.id);
    const revoked = await through(() => anon.request('GET', path, { auth: loggedIn }));
    assert.equal(revoked.answer.status, 401);
    assert.deepEqual([revoked.upstream, revoked.front], [0, 1]);

    // an upload session is the repository's: another user cannot write into it, its owner finishes it
    const start = await asAlice.request('POST', `/v2/${repo}/blobs/uploads/`, { headers: { 'content-length': '0' } });
    assert.equal(start.status, 202);
    const location = String(start.headers.location);
    const intruder = Buffer.from('not yours');
    const patch = await through(() => asBob.request('PATCH', location, { headers: { 'content-type': 'application/octet-stream', 'content-length': String(intruder.length) }, body: intruder }));
    assert.equal(patch.answer.status, 403);
    assert.deepEqual([patch.upstream, patch.front], [0, 1]);
    // bob's own repository's name on alice's session: the front lets bob write to his repository,
    // and the upstream refuses a session whose signed state names another one
    const moved = location.replace(`/v2/${repo}/`, `/v2/${sbB}/stolen/`);
    assert.notEqual(moved, location);
    const elsewhere = await asBob.request('PATCH', moved, { headers: { 'content-type': 'application/octet-stream', 'content-length': String(intruder.length) }, body: intruder });
    assert.ok(elsewhere.status >= 400, `HTTP ${elsewhere.status}: ${elsewhere.body.toString()}`);
    const done = await asAlice.request('PUT', `${location}${location.includes('?') ? '&' : '?'}digest=${sha256(layer)}`, { headers: { 'content-length': String(layer.length), 'content-type': 'application/octet-stream' }, body: layer });
    assert.equal(done.status, 201, done.body.toString());
  });

  it('decides a refused blob request once: the front answers it with the verdict it gave HAProxy; a client cannot name one', async () => {
    const repo = `${sbA}/once`;
    const layer = gzip(await makeTar([{ path: 'z', content: 'once' }]));
    assert.equal((await asAlice.pushBlob(repo, layer)).status, 201);
    const path = `/v2/${repo}/blobs/${sha256(layer)}`;
    // one decision's store reads, counted on a decision of its own
    const reads = repoReads();
    try {
      const asked = await t.service.registry.front.mayBypass('GET', path, OciClient.basic(bob.token));
      assert.equal(asked.bypass, false);
      const perDecision = reads.count;
      assert.ok(perDecision > 0);
      reads.count = 0;
      const refused = await through(() => asBob.request('GET', path));
      assert.equal(refused.answer.status, 404);
      assert.deepEqual([refused.upstream, refused.front], [0, 1], 'answered by the front');
      assert.equal(reads.count, perDecision, 'decided once (by HAProxy\'s question), not again by the front');
      // a verdict a client names (the one it cannot know, or any other) is dropped by HAProxy: decided afresh
      for (const named of [asked.verdict!, 'made-up']) {
        reads.count = 0;
        const r = await through(() => asBob.request('GET', path, { headers: { 'x-svc-verdict': named } }));
        assert.equal(r.answer.status, 404);
        assert.equal(reads.count, perDecision);
      }
      // the owner is not refused by a verdict kept for another
      reads.count = 0;
      const own = await through(() => asAlice.request('GET', path, { headers: { 'x-svc-verdict': asked.verdict! } }));
      assert.equal(own.answer.status, 200);
      assert.deepEqual([own.upstream, own.front], [1, 0]);
    } finally {
      reads.restore();
    }
  });

  it('keeps at most KEPT_VERDICTS_MAX verdicts: those of requests that never reach the front go, oldest first', async () => {
    const repo = `${sbA}/bounded`;
    const layer = gzip(await makeTar([{ path: 'b', content: 'bounded' }]));
    assert.equal((await asAlice.pushBlob(repo, layer)).status, 201);
    const path = `/v2/${repo}/blobs/${sha256(layer)}`;
    const front = t.service.registry.front;
    const authorization = OciClient.basic(bob.token);
    const reads = repoReads();
    /** Bob's request as HAProxy hands it to the front, naming `verdict`: its status and the store reads it cost. */
    const handed = async (verdict: string) => {
      reads.count = 0;
      const res = await front.app.inject({ method: 'GET', url: path, headers: { authorization, [REGISTRY_VERDICT_HEADER]: verdict } });
      return { status: res.statusCode, reads: reads.count };
    };
    try {
      reads.count = 0;
      const kept = await front.mayBypass('GET', path, authorization);
      const perDecision = reads.count;
      assert.ok(perDecision > 0);
      assert.deepEqual(await handed(kept.verdict!), { status: 404, reads: 0 }, 'a kept verdict is carried out, not decided again');
      const first = await front.mayBypass('GET', path, authorization);
      // refused requests whose own requests never come (here: a target Fastify refuses before any hook)
      const stray = `/v2/${repo}/blobs/%zz`;
      assert.equal((await front.app.inject({ method: 'GET', url: stray })).statusCode, 400, 'Fastify refuses it: no verdict is taken');
      for (let i = 0; i < KEPT_VERDICTS_MAX; i++) assert.ok((await front.mayBypass('GET', stray, undefined)).verdict);
      assert.deepEqual(await handed(first.verdict!), { status: 404, reads: perDecision }, 'the oldest verdict went: decided again');
    } finally {
      reads.restore();
    }
  });

  it('leaves a blob request to the front when the front cannot decide: slower, never open', async () => {
    const repo = `${sbA}/fallback`;
    const layer = gzip(await makeTar([{ path: 'y', content: 'fallback' }]));
    assert.equal((await asAlice.pushBlob(repo, layer)).status, 201);
    // the store fails the next lookup of a repository: HAProxy's question gets a 500
    const reads = repoReads({ failFirst: true });
    try {
      const other = await through(() => asBob.request('GET', `/v2/${repo}/blobs/${sha256(layer)}`));
      assert.equal(reads.count, 2, 'asked by HAProxy (failed), then by the front');
      assert.equal(other.answer.status, 404);
      assert.deepEqual([other.upstream, other.front], [0, 1], 'the front answered it');
    } finally {
      reads.restore();
    }
  });
});
