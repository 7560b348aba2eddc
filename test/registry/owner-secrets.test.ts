import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { registryFromSandbox } from '../helpers/registry-from-sandbox.ts';
import { sandboxShell } from '../../harness/sandbox-engine.ts';

const DOMAIN = 'svc.test';
/** Dictionary words: no rule flags them (the clean control image proves it); only the owner's keyed hash knows them. */
const PHRASE = 'velvet lantern orchard quietly';

/**
 * Issue 35: the registry finds the owner's own secret values (by their keyed hash) in images pushed
 * with the real docker CLI from inside a sandbox (how, as in docker-cli.test.ts), names the secret,
 * its file and layer, and keeps the image private; a near value is no match.
 */
describe("the owner's secrets in pushed images", () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let sb: string;
  let registry: string;

  const sh = sandboxShell(() => sb);
  const build = async (dir: string, tag: string, dockerfile: string, files: Record<string, string> = {}) => {
    await sh(`rm -rf ${dir} && mkdir -p ${dir}`);
    for (const [name, content] of Object.entries(files)) await sh(`mkdir -p $(dirname ${dir}/${name}) && cat > ${dir}/${name}`, content);
    await sh(`cat > ${dir}/Dockerfile && DOCKER_BUILDKIT=0 docker build -q -t ${registry}/${sb}/${tag} ${dir}`, dockerfile);
  };
  const image = (name: string) =>
    eventually(async () => {
      const res = await t.api('GET', `/api/sandboxes/${sb}/registry`, alice.token);
      assert.equal(res.status, 200, answerOf(res));
      const img = res.body.images.find((i: { name: string }) => i.name === `${sb}/${name}`);
      return img && img.versions.every((v: { scan: { state: string } }) => v.scan.state !== 'pending' && v.scan.state !== 'scanning') ? img : undefined;
    }, `scans of ${name}`, 120_000);

  before(async () => {
    t = await startTestService({ domain: DOMAIN });
    alice = await t.user('alice');
    const created = await t.api('POST', '/api/sandboxes', alice.token, { name: `osec-${t.config.redisPrefix}` });
    assert.equal(created.status, 201, answerOf(created));
    sb = created.body.name;
    ({ registry } = await registryFromSandbox(t, sb, DOMAIN));
    assert.match((await sh(`docker login ${registry} -u alice --password-stdin`, alice.token)).out, /Login Succeeded/);
    const put = await t.api('PUT', '/api/me/secrets/DB_PASSWORD', alice.token, { value: PHRASE });
    assert.equal(put.status, 201, answerOf(put));
  });
  after(async () => t?.close());

  it('names the secret, its file, line and layer, and keeps the image private; a near value and a clean image are no match', async () => {
    const config = `import os\n\nGREETING = "${PHRASE}"\nDEBUG = False\n`;
    const near = `GREETING = "${PHRASE}s"\nOTHER = "velvet lantern orchard quiet"\nTHIRD = "x${PHRASE}"\n`;
    await build('/tmp/o-leak', 'web:leak', 'FROM svc-fixture-busybox:latest\nRUN mkdir -p /app && echo one > /app/one.txt\nCOPY app/config.py /app/config.py\n', { 'app/config.py': config });
    await build('/tmp/o-near', 'web:near', 'FROM svc-fixture-busybox:latest\nCOPY app/config.py /app/config.py\n', { 'app/config.py': near });
    await build('/tmp/o-env', 'env:leak', `FROM svc-fixture-busybox:latest\nENV MOTTO="${PHRASE}"\n`);
    for (const tag of ['web:leak', 'web:near', 'env:leak']) {
      const pushed = await sh(`docker push -q ${registry}/${sb}/${tag} 2>&1`);
      assert.doesNotMatch(pushed.out, /denied|unauthorized/i, pushed.out);
    }
    const web = await image('web');
    assert.equal(web.visibility, 'private');
    const leak = web.versions.find((v: { tags: string[] }) => v.tags.includes('leak'));
    assert.equal(leak.scan.state, 'flagged');
    // the busybox fixture's layers, then the RUN, then the COPY: the file is in the last layer
    const layers = (await sh(`docker image inspect -f '{{len .RootFS.Layers}}' ${registry}/${sb}/web:leak`)).out.trim();
    assert.deepEqual(leak.findings.map((f: Record<string, unknown>) => [f.rule, f.secret, f.path, f.line, f.layer_index, f.message]), [
      ['owner-secret', 'DB_PASSWORD', 'app/config.py', 3, Number(layers), `your secret DB_PASSWORD is in app/config.py:3, layer ${layers}`],
    ], 'found by the owner-secret match alone: no rule flags the phrase');
    const nearVersion = web.versions.find((v: { tags: string[] }) => v.tags.includes('near'));
    assert.equal(nearVersion.scan.state, 'clean', JSON.stringify(nearVersion.findings));
    const env = await image('env');
    assert.equal(env.visibility, 'private');
    // the classic builder records ENV in the config's Env and in its history
    const envFindings = env.versions[0].findings.map((f: Record<string, unknown>) => `${f.rule} ${f.secret} ${f.path}`);
    assert.equal(envFindings.length, 2, envFindings.join('\n'));
    assert.equal(envFindings[0], 'owner-secret DB_PASSWORD config:Env/MOTTO');
    assert.match(envFindings[1], /^owner-secret DB_PASSWORD config:history\[\d+\]$/);
    const body = JSON.stringify((await t.api('GET', `/api/sandboxes/${sb}/registry`, alice.token)).body);
    assert.ok(!body.includes('lantern'), 'the report never shows the value');
  });
});
