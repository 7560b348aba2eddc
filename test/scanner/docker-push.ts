/**
 * Images built and pushed with the real docker CLI from inside a sandbox, through the service's
 * registry, and read back from the owner's report: what the scanner tests share. The sandbox's
 * own dockerd resolves `registry.svc.test` through one line added to the sandbox container's
 * /etc/hosts and trusts the service CA (as test/registry/docker-cli.test.ts explains).
 */
import assert from 'node:assert/strict';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { registryFromSandbox } from '../helpers/registry-from-sandbox.ts';
import { sandboxShell } from '../../harness/sandbox-engine.ts';

const DOMAIN = 'svc.test';

export type ReportFinding = { path: string; rule: string; layer: string; line?: number; confidence?: 'low' };
export type ReportVersion = { digest: string; tags: string[]; scan: { state: string; reason?: string }; findings: ReportFinding[] };
export type ReportImage = { name: string; visibility: string; reason: string; versions: ReportVersion[] };

export interface PushSandbox {
  t: TestService;
  sandbox: string;
  /** Builds `tag` from a Dockerfile and files (name → bytes) in the sandbox, pushes it, and waits for its scan. */
  push(tag: string, dockerfile: string, files?: Record<string, Buffer | string>): Promise<ReportImage>;
  /** The owner's report of every image. */
  report(): Promise<ReportImage[]>;
  close(): Promise<void>;
}

/** Starts a service, a user with a sandbox, and the sandbox's docker CLI logged in to the registry. */
export async function pushSandbox(label: string): Promise<PushSandbox> {
  const t = await startTestService({ domain: DOMAIN });
  try {
    const alice = await t.user('alice');
    const created = await t.api('POST', '/api/sandboxes', alice.token, { name: `${label}-${t.config.redisPrefix}` });
    assert.equal(created.status, 201, answerOf(created));
    const sandbox: string = created.body.name;
    const { registry } = await registryFromSandbox(t, sandbox, DOMAIN);
    const sh = sandboxShell(() => sandbox);
    await sh(`docker login ${registry} -u alice --password-stdin`, alice.token);

    const report = async (): Promise<ReportImage[]> => {
      const res = await t.api('GET', `/api/sandboxes/${sandbox}/registry`, alice.token);
      assert.equal(res.status, 200, answerOf(res));
      return res.body.images as ReportImage[];
    };
    return {
      t,
      sandbox,
      report,
      async push(tag, dockerfile, files = {}) {
        const dir = `/tmp/build-${tag.replace(/[^a-z0-9]/gi, '-')}`;
        await sh(`rm -rf ${dir} && mkdir -p ${dir}`);
        for (const [name, content] of Object.entries(files)) await sh(`mkdir -p "$(dirname ${dir}/${name})" && base64 -d > ${dir}/${name}`, Buffer.from(content).toString('base64'));
        await sh(`cat > ${dir}/Dockerfile && DOCKER_BUILDKIT=0 docker build -q -t ${registry}/${sandbox}/${tag} ${dir} >/dev/null`, dockerfile);
        await sh(`docker push -q ${registry}/${sandbox}/${tag} >/dev/null 2>&1 || docker push ${registry}/${sandbox}/${tag}`);
        const name = `${sandbox}/${tag.split(':')[0]}`;
        const wanted = tag.split(':')[1] ?? 'latest';
        return eventually(async () => {
          const img = (await report()).find((i) => i.name === name);
          const v = img?.versions.find((x) => x.tags.includes(wanted));
          return img && v && v.scan.state !== 'pending' && v.scan.state !== 'scanning' ? { ...img, versions: [v] } : undefined;
        }, `the scan of ${tag}`, 120_000);
      },
      close: () => t.close(),
    };
  } catch (err) {
    await t.close();
    throw err;
  }
}
