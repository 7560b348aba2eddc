import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { registryFromSandbox } from '../helpers/registry-from-sandbox.ts';
import { OciClient, privateKeyPem } from '../../harness/oci.ts';
import { registryTraffic } from '../../harness/registry-traffic.ts';
import { sandboxShell } from '../../harness/sandbox-engine.ts';


/**
 * The real docker CLI and a real Docker daemon against the registry at registry.<domain>.
 *
 * The pushes are made from INSIDE a sandbox: its own dockerd (docker.io 26, Go) resolves
 * `registry.svc.test` through the sandbox container's /etc/hosts (one line added by this test:
 * the host's address on the sandbox network, where the edge listens) and trusts the service CA
 * from /etc/docker/certs.d/registry.svc.test:<port>/ca.crt, read on every push. Not *.localhost:
 * Go's resolver since 1.22 answers every name under localhost with loopback, whatever /etc/hosts
 * says. The host dockerd is never touched (it must not be restarted), and the machine's /etc/hosts
 * is never edited.
 */
const DOMAIN = 'svc.test';

describe('registry with the real docker CLI (pushing from inside a sandbox)', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let sb: string;
  let registry: string;
  let oci: OciClient;

  /** Runs a shell script in the sandbox container (where the inner docker CLI and engine live). */
  const sh = sandboxShell(() => sb);
  const build = async (dir: string, tag: string, dockerfile: string, files: Record<string, string> = {}) => {
    await sh(`rm -rf ${dir} && mkdir -p ${dir}`);
    for (const [name, content] of Object.entries(files)) await sh(`cat > ${dir}/${name}`, content);
    await sh(`cat > ${dir}/Dockerfile && DOCKER_BUILDKIT=0 docker build -q -t ${registry}/${sb}/${tag} ${dir}`, dockerfile);
  };
  const report = async () => {
    const res = await t.api('GET', `/api/sandboxes/${sb}/registry`, alice.token);
    assert.equal(res.status, 200, answerOf(res));
    return res.body as { images: Array<{ name: string; visibility: string; reason: string; versions: Array<{ digest: string; tags: string[]; kind: string; platform?: string; scan: { state: string }; findings: Array<{ path: string; rule: string; layer: string }> }> }> };
  };
  const settledImage = (name: string) =>
    eventually(async () => {
      const img = (await report()).images.find((i) => i.name === `${sb}/${name}`);
      return img && img.versions.every((v) => v.scan.state !== 'pending' && v.scan.state !== 'scanning') ? img : undefined;
    }, `scans of ${name}`, 60_000);

  before(async () => {
    t = await startTestService({ domain: DOMAIN });
    alice = await t.user('alice');
    const created = await t.api('POST', '/api/sandboxes', alice.token, { name: `dcli-${t.config.redisPrefix}` });
    assert.equal(created.status, 201, answerOf(created));
    sb = created.body.name;
    const port = t.service.edge.httpsPort;
    let ca: string;
    ({ registry, ca } = await registryFromSandbox(t, sb, DOMAIN));
    oci = new OciClient({ port, host: `registry.${DOMAIN}`, ca, auth: OciClient.basic(alice.token) });
  });
  after(async () => {
    oci?.close();
    await t?.close();
  });

  it('docker login takes the access token as password and refuses a wrong one', async () => {
    const bad = await sh(`docker login ${registry} -u alice --password-stdin`, 'svc_' + 'x'.repeat(43), true);
    assert.notEqual(bad.code, 0);
    assert.match(bad.out, /unauthorized|unknown or revoked/i);
    const ok = await sh(`docker login ${registry} -u alice --password-stdin`, alice.token);
    assert.match(ok.out, /Login Succeeded/);
  });

  it('pushes a clean image and flagged ones; the report shows each finding and the rule keeps the image private', async () => {
    await build('/tmp/b-clean', 'app:clean', 'FROM svc-fixture-busybox:latest\nRUN mkdir -p /app && echo hello > /app/hello.txt\n');
    await build('/tmp/b-env', 'app:envfile', 'FROM svc-fixture-busybox:latest\nRUN mkdir -p /app && echo DB_PASSWORD=hunter2hunter2 > /app/.env\n');
    await build('/tmp/b-key', 'keys:deleted', 'FROM svc-fixture-busybox:latest\nCOPY deploy_key /root/.ssh/deploy_key\nRUN rm /root/.ssh/deploy_key\n', { deploy_key: privateKeyPem() });
    const token = 'ghp_' + 'aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5';
    await build('/tmp/b-tok', 'tokens:env', `FROM svc-fixture-busybox:latest\nENV GITHUB_TOKEN=${token}\n`);
    const before = await registryTraffic(t);
    for (const tag of ['app:clean', 'app:envfile', 'keys:deleted', 'tokens:env']) {
      const pushed = await sh(`docker push -q ${registry}/${sb}/${tag} 2>&1 || docker push ${registry}/${sb}/${tag}`);
      assert.doesNotMatch(pushed.out, /denied|unauthorized/i, pushed.out);
    }
    const afterPush = await registryTraffic(t);
    // with HAProxy, each new layer's PATCH and PUT (and the HEADs for known ones) went from it to the upstream
    if (before && afterPush) assert.ok(afterPush.upstream - before.upstream >= 8, `uploads carried by HAProxy: ${JSON.stringify({ before, afterPush })}`);
    const app = await settledImage('app');
    assert.equal(app.visibility, 'private');
    assert.equal(app.versions.find((v) => v.tags.includes('clean'))!.scan.state, 'clean');
    const env = app.versions.find((v) => v.tags.includes('envfile'))!;
    assert.equal(env.scan.state, 'flagged');
    assert.deepEqual(env.findings.map((f) => [f.path, f.rule]), [['app/.env', 'env-file']]);
    const keys = await settledImage('keys');
    assert.deepEqual(keys.versions[0]!.findings.map((f) => [f.path, f.rule]), [['root/.ssh/deploy_key', 'private-key']], 'a key deleted by a later layer still counts');
    const tokens = await settledImage('tokens');
    assert.ok(tokens.versions[0]!.findings.some((f) => f.path === 'config:Env/GITHUB_TOKEN' && f.rule === 'github-token'), JSON.stringify(tokens.versions[0]!.findings));
    assert.ok(!JSON.stringify(await report()).includes(token), 'the report never shows the secret');
  });

  it('pulls: the owner always; anonymous only once every version is clean (after the flagged one is deleted)', async () => {
    const clean = `${registry}/${sb}/app:clean`;
    await sh(`docker rmi -f ${clean} >/dev/null`);
    const before = await registryTraffic(t);
    await sh(`docker pull -q ${clean}`);
    const afterPull = await registryTraffic(t);
    if (before && afterPull) {
      // with HAProxy (the default), the layers came from it, the manifest from the front
      assert.ok(afterPull.upstream - before.upstream >= 2, `layers carried by HAProxy: ${JSON.stringify({ before, afterPull })}`);
      assert.ok(afterPull.front > before.front, 'the manifest from the front');
    }
    await sh(`docker rmi -f ${clean} >/dev/null && docker logout ${registry}`);
    const beforeRefused = await registryTraffic(t);
    const refused = await sh(`docker pull ${clean}`, undefined, true);
    assert.notEqual(refused.code, 0, 'anonymous pull of a private image is refused');
    assert.match(refused.out, /unauthorized|denied|authentication required/i);
    assert.equal((await registryTraffic(t))?.upstream, beforeRefused?.upstream, 'nothing of it reached the upstream');

    const env = (await settledImage('app')).versions.find((v) => v.tags.includes('envfile'))!;
    const del = await oci.request('DELETE', `/v2/${sb}/app/manifests/${env.digest}`);
    assert.equal(del.status, 202);
    const app = await settledImage('app');
    assert.equal(app.visibility, 'public', app.reason);
    const pulled = await sh(`docker pull ${clean}`);
    assert.match(pulled.out, /Downloaded newer image|Image is up to date/);
    const stillPrivate = await sh(`docker pull ${registry}/${sb}/keys:deleted`, undefined, true);
    assert.notEqual(stillPrivate.code, 0);
  });

  it('pushes a multi-platform index made with docker manifest create', async () => {
    await sh(`docker login ${registry} -u alice --password-stdin`, alice.token);
    await build('/tmp/b-amd', 'multi:amd64', 'FROM svc-fixture-busybox:latest\nRUN echo amd64 > /arch\n');
    await build('/tmp/b-arm', 'multi:arm64', 'FROM svc-fixture-busybox:latest\nRUN echo arm64 > /arch && mkdir -p /srv && echo X=1 > /srv/prod.env\n');
    await sh(`docker push -q ${registry}/${sb}/multi:amd64 && docker push -q ${registry}/${sb}/multi:arm64`);
    const list = `${registry}/${sb}/multi:latest`;
    await sh(`docker manifest create ${list} ${registry}/${sb}/multi:amd64 ${registry}/${sb}/multi:arm64 && docker manifest annotate --arch arm64 ${list} ${registry}/${sb}/multi:arm64 && docker manifest push ${list}`);
    const multi = await settledImage('multi');
    const index = multi.versions.find((v) => v.tags.includes('latest'))!;
    assert.equal(index.kind, 'index');
    assert.equal(index.scan.state, 'flagged');
    assert.deepEqual(index.findings.map((f) => [f.path, f.rule]), [['srv/prod.env', 'env-file']]);
    assert.equal(multi.visibility, 'private');
  });
});
