/**
 * Images built and pushed with the real docker CLI from inside a sandbox, through the service's
 * registry, and read back from the owner's report: what the scanner tests share. The sandbox's
 * own dockerd resolves `registry.svc.test` through one line added to the sandbox container's
 * /etc/hosts and trusts the service CA (as test/registry/docker-cli.test.ts explains).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { serviceCaPem } from '../../edge/index.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';
import { sandboxDocker, sandboxShell } from '../../harness/sandbox-engine.ts';

const run = promisify(execFile);
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
    const registry = `registry.${DOMAIN}:${t.service.edge.httpsPort}`;
    const sh = sandboxShell(() => sandbox);
    const info = await sandboxDocker().getContainer(sandbox).inspect();
    const gateway = Object.values(info.NetworkSettings.Networks)[0]?.Gateway;
    assert.ok(gateway, `the sandbox container ${sandbox} has no network gateway; cannot reach the edge from inside it`);
    const ca = (await serviceCaPem(t.config, t.service.store.serviceKeys))!;
    await sh(`echo "${gateway} registry.${DOMAIN}" >> /etc/hosts && mkdir -p /etc/docker/certs.d/${registry} && cat > /etc/docker/certs.d/${registry}/ca.crt`, ca);
    await eventually(async () => (await sh('docker info >/dev/null 2>&1', undefined, true)).code === 0, 'the inner engine', 60_000);
    await eventually(async () => !/no such host/.test((await sh(`docker pull ${registry}/probe/probe:none`, undefined, true)).out), `the inner dockerd to resolve registry.${DOMAIN}`, 30_000, 1000);
    const saved = await run('sh', ['-c', 'docker save svc-fixture-busybox:latest | base64 -w0'], { maxBuffer: 64 * 1024 * 1024 }).catch((err) => {
      throw new Error(`the fixture image svc-fixture-busybox:latest is missing on the host engine (run "npm run setup"): ${err.message}`);
    });
    await sh('base64 -d | docker load -q', saved.stdout);
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
