import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { openEdgeSandbox, type EdgeSandbox } from '../../harness/edge-sandbox.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';
import { eventually, startTestService, type TestService } from '../../harness/service.ts';
import { delegateCgroups } from '../../lifecycle/runtime/cgroup-delegation.ts';

const FIXTURE = path.resolve('fixtures/busybox');
const run = promisify(execFile);

/**
 * A service killed while it hands a starting sandbox its cgroups (the userns runtime): the faults
 * suite's "SIGKILL as the container starts" once left the app address on the waiting page for good.
 * The sandbox's entrypoint waits for one folder (its pids cgroup, or the v2 tree) before its dockerd
 * starts; a hand-over cut after that folder but before the others let dockerd start without its
 * memory and CPU cgroups, and its restart of the app's container failed, never to be tried again.
 * Here the hand-over is cut right after the folder the entrypoint waits on (the service "killed"
 * there, and down meanwhile): the sandbox's dockerd, let on then, must restore the app's container
 * (it had all of its cgroups by then), and the restarted service must bring the app back to the edge.
 */
describe('a service killed mid-way through a sandbox\'s cgroup hand-over', () => {
  const docker = sandboxDocker();
  let t: TestService;
  let sb: EdgeSandbox;

  before(async () => {
    t = await startTestService({ wakeHoldMs: 0 });
    sb = await openEdgeSandbox(t, 'handover');
  });
  after(async () => {
    sb?.close();
    await t?.close();
  });

  it('leaves the entrypoint waiting for all of it: after a restart the app answers through the edge', async () => {
    assert.equal(t.config.sandboxRuntime, 'userns', 'the cgroup hand-over is the userns runtime\'s (the default)');
    await sb.cli.docker(['build', '-q', '-t', 'busybox-app', FIXTURE]);
    await sb.cli.docker(['run', '-d', '--name', 'web', '--label', 'tunnel.subdomain=web', '--restart', 'unless-stopped', '-p', '8080:8080', 'busybox-app', 'sh', '-c',
      'mkdir -p /www && echo the-app > /www/index.html && trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait']);
    await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('the-app'), 'the app through the edge', 60_000, 250);
    await t.service.lifecycle.sleep(sb.name, 'test');

    await t.restart(async () => {
      // the service is down: the container starts as a wake began it, and the hand-over is cut
      const container = docker.getContainer(sb.name);
      const since = new Date().toISOString();
      await container.start();
      const { State } = await container.inspect();
      const marker = await waitedOn(State.Pid);
      await assert.rejects(delegateCgroups(State.Pid, {
        chown: async (target, uid, gid) => {
          await fs.chown(target, uid, gid);
          if (target === marker) throw new Error('killed right after the folder the entrypoint waits on');
        },
      }), /killed/);
      // let on, the sandbox's dockerd restores its containers, then listens: on part of its cgroups
      // the app's fails for good ("mkdir /sys/fs/cgroup/cpuset/docker: permission denied", exit 126)
      await eventually(async () => (await sandboxLog(sb.name, since)).includes('API listen on'), 'the sandbox\'s dockerd', 60_000, 250);
      const { stdout } = await run('docker', [...SANDBOX_CLI, 'exec', sb.name, 'docker', 'inspect', '-f', '{{.State.Status}} {{.State.ExitCode}}', 'web']);
      assert.equal(stdout.trim(), 'running 0', 'the app\'s container as the sandbox\'s dockerd restored it');
    });
    await eventually(async () => (await sb.curl(`${sb.name}-web`)).includes('the-app'), 'the app after the restart', 60_000, 500);
  });
});

/** The host folder the sandbox's entrypoint waits on (sandbox-image/entrypoint.sh): its pids cgroup (v1), or its v2 cgroup. */
async function waitedOn(pid: number): Promise<string> {
  const lines = (await fs.readFile(`/proc/${pid}/cgroup`, 'utf8')).split('\n');
  const pids = lines.find((l) => /^\d+:pids:/.test(l));
  if (pids) return path.join('/sys/fs/cgroup/pids', pids.split(':')[2]!);
  return path.join('/sys/fs/cgroup', lines.find((l) => l.startsWith('0::'))!.slice(3));
}

/** The sandbox container's log since `since` (its entrypoint's and its dockerd's lines of this run). */
async function sandboxLog(name: string, since: string): Promise<string> {
  const { stdout, stderr } = await run('docker', [...SANDBOX_CLI, 'logs', '--since', since, name], { maxBuffer: 16 << 20 });
  return stdout + stderr;
}
