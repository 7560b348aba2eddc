// A fork bomb and a memory hog in one sandbox leave the others and the service responsive (issue 13,
// item 4): each sandbox container has memory, CPU and PID limits that bind everything inside it.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineCli } from '../../harness/engine-cli.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';
import { answerOf, eventually, startTestService, type TestService } from '../../harness/service.ts';

const run = promisify(execFile);
const MEMORY_MB = 256;
const PIDS = 400;

describe('limits: one sandbox cannot starve the others or the service', () => {
  let t: TestService;
  let alice: { id: string; token: string };
  let bomber: string;
  let server: string;
  let dir: string;
  let ca: string;
  const docker = sandboxDocker();

  before(async () => {
    t = await startTestService({ sandboxMemoryMb: MEMORY_MB, sandboxPids: PIDS, sandboxCpus: 1 });
    alice = await t.user('alice');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-limits-'));
    ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, (await t.api('GET', '/ca.pem', undefined)).body);
    const made = [];
    for (const n of ['bomb', 'web']) {
      const res = await t.api('POST', '/api/sandboxes', alice.token, { name: `lim${n}-${t.config.redisPrefix}`, idle_timeout: '1h' });
      assert.equal(res.status, 201, answerOf(res));
      made.push(res.body);
    }
    [bomber, server] = [made[0].name, made[1].name];
    const cli = new EngineCli(made[1].engine_access.host, '127.0.0.1', t.config.httpsPort, made[1]);
    try {
      await cli.docker(['build', '-q', '-t', 'web', path.resolve('fixtures/busybox')]);
      await cli.docker(['run', '-d', '--label', 'tunnel.subdomain=web', '-p', '8080:8080', 'web', 'sh', '-c', 'mkdir -p /w && echo up > /w/index.html && exec httpd -f -p 8080 -h /w']);
    } finally {
      cli.dispose();
    }
  });
  after(async () => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
    await t?.close();
  });

  /** `count` requests to the other sandbox's app through the edge; latencies in ms, failures counted. */
  async function sample(count: number): Promise<{ ms: number[]; failed: number }> {
    const host = `${server}-web.${t.config.domain}`;
    const ms: number[] = [];
    let failed = 0;
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      const { stdout } = await run('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '10', '--cacert', ca,
        '--resolve', `${host}:${t.config.httpsPort}:127.0.0.1`, `https://${host}:${t.config.httpsPort}/`]).catch(() => ({ stdout: 'error' }));
      ms.push(performance.now() - t0);
      if (stdout !== '200') failed++;
    }
    return { ms, failed };
  }
  const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!.toFixed(1);

  it('a fork bomb and a memory hog hit their own limits while the other sandbox and the API answer', { timeout: 300_000 }, async () => {
    await eventually(async () => (await sample(1)).failed === 0, 'the other sandbox serving', 60_000, 500);
    const before = await sample(30);
    assert.equal(before.failed, 0);

    const { Id } = await docker.getContainer(bomber).inspect();
    // the sandbox container's own cgroups on the host (below the sandbox engine's cgroup parent)
    const cg = (ctrl: string, file: string) => Number(fs.readFileSync(`/sys/fs/cgroup/${ctrl}/svc-sandboxes/${Id}/${file}`, 'utf8'));
    // started in the background: both run until the sandbox is stopped
    const bomb = run('docker', [...SANDBOX_CLI, 'exec', '-d', bomber, 'bash', '-c',
      'bomb() { bomb | bomb & }; bomb; sleep 1000'], { timeout: 30_000 }).catch(() => undefined);
    const hog = run('docker', [...SANDBOX_CLI, 'exec', '-d', bomber, 'sh', '-c',
      `head -c ${MEMORY_MB * 4}m /dev/zero | tail > /dev/null`], { timeout: 30_000 }).catch(() => undefined);
    await Promise.all([bomb, hog]);
    await eventually(async () => cg('pids', 'pids.current') >= PIDS - 5, 'the fork bomb filling its PID limit', 60_000, 200);

    const during = await sample(30);
    const api = await t.api('GET', '/api/sandboxes', alice.token);
    const pidsPeak = cg('pids', 'pids.current');
    const memPeak = cg('memory', 'memory.max_usage_in_bytes') / 1024 / 1024;
    console.log(`limits: bomb held ${pidsPeak} processes (limit ${PIDS}); memory peak ${memPeak.toFixed(0)} MiB (limit ${MEMORY_MB}); ` +
      `other sandbox through the edge p50/p99 before ${pct(before.ms, 0.5)}/${pct(before.ms, 0.99)} ms, during ${pct(during.ms, 0.5)}/${pct(during.ms, 0.99)} ms`);
    assert.equal(during.failed, 0, 'every request to the other sandbox answered');
    assert.equal(api.status, 200, 'the API answers');
    assert.ok(pidsPeak <= PIDS, `pids ${pidsPeak}`);
    assert.ok(memPeak <= MEMORY_MB + 1, `memory ${memPeak} MiB`);

    // stopping the sandbox ends the bomb; it comes back like any sandbox
    assert.ok((await t.api('DELETE', `/api/sandboxes/${bomber}`, alice.token)).status < 300);
  });
});
