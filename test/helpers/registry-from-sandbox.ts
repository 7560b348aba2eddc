import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { serviceCaPem } from '../../edge/index.ts';
import { sandboxDocker, sandboxShell } from '../../harness/sandbox-engine.ts';
import { eventually, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);

/**
 * Points a sandbox's own docker CLI and engine at the service's registry as `registry.<domain>`:
 * one line in the sandbox container's /etc/hosts (the edge at its network's gateway), the service
 * CA trusted for that address, and the busybox fixture loaded (nothing is pulled from the internet).
 * Returns the registry's address (host:port) and the CA. The tests log in themselves.
 */
export async function registryFromSandbox(t: TestService, sandbox: string, domain: string): Promise<{ registry: string; ca: string }> {
  const sh = sandboxShell(() => sandbox);
  const registry = `registry.${domain}:${t.service.edge.httpsPort}`;
  const info = await sandboxDocker().getContainer(sandbox).inspect();
  const gateway = Object.values(info.NetworkSettings.Networks)[0]?.Gateway;
  assert.ok(gateway, `the sandbox container ${sandbox} has no network gateway; cannot reach the edge from inside it`);
  const ca = (await serviceCaPem(t.config, t.service.store.serviceKeys))!;
  await sh(`echo "${gateway} registry.${domain}" >> /etc/hosts && mkdir -p /etc/docker/certs.d/${registry} && cat > /etc/docker/certs.d/${registry}/ca.crt`, ca);
  await eventually(async () => (await sh('docker info >/dev/null 2>&1', undefined, true)).code === 0, 'the inner engine', 60_000);
  // Go's resolver re-reads /etc/hosts at most every 5 s: wait until the inner dockerd sees the line.
  await eventually(async () => !/no such host/.test((await sh(`docker pull ${registry}/probe/probe:none`, undefined, true)).out), `the inner dockerd to resolve registry.${domain}`, 30_000, 1000);
  const saved = await run('sh', ['-c', 'docker save svc-fixture-busybox:latest | base64 -w0'], { maxBuffer: 64 * 1024 * 1024 }).catch((err) => {
    throw new Error(`the fixture image svc-fixture-busybox:latest is missing on the host engine (run "npm run setup"): ${err.message}`);
  });
  await sh('base64 -d | docker load -q', saved.stdout);
  return { registry, ca };
}
