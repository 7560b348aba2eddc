import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.ts';
import { DockerRuntime } from '../../lifecycle/runtime/docker-runtime.ts';
import { ImageSync } from '../../lifecycle/runtime/image-sync.ts';
import { runtimeOptions } from '../../lifecycle/runtime/open-docker-runtime.ts';
import { SANDBOX_CLI, sandboxDocker } from '../../harness/sandbox-engine.ts';

const run = promisify(execFile);

/**
 * lifecycle/runtime/image-sync.ts between two real engines of this machine: the main engine plays
 * the service's machine (it builds the "sandbox image"), the sandbox engine plays a runner host.
 */
describe('the sandbox image on runner hosts (ImageSync)', () => {
  const image = `svc-image-sync-${randomBytes(3).toString('hex')}:latest`;
  const options = { ...runtimeOptions(loadConfig(), pino({ level: 'silent' })), image, hostDuties: false };
  const here = new DockerRuntime(new Docker(), options);
  const runner = new DockerRuntime(sandboxDocker(), options);
  const sync = new ImageSync(here, pino({ level: 'silent' }));
  const build = async (mark: string) => {
    await run('sh', ['-c', `printf 'FROM svc-fixture-busybox\\nLABEL svc.test.build=${mark}\\n' | docker build -q -t ${image} -`]);
    return (await here.imageId(image))!;
  };
  after(async () => {
    await run('docker', ['image', 'rm', '-f', image]).catch(() => undefined);
    await run('docker', [...SANDBOX_CLI, 'image', 'rm', '-f', image]).catch(() => undefined);
  });

  it('copies this machine\'s build to a host that lacks it, then leaves the host alone while the builds match', async () => {
    const first = await build('one');
    assert.equal(await runner.imageId(image), undefined);
    assert.equal(await sync.ensure('runner', runner), 'copied');
    assert.equal(await runner.imageId(image), first, 'the same build, under the same name');
    assert.equal(await sync.ensure('runner', runner), 'in-step');
  });

  it('replaces a host\'s older build after this machine\'s image is rebuilt; concurrent asks share one copy', async () => {
    const second = await build('two');
    const answers = await Promise.all([sync.ensure('runner', runner), sync.ensure('runner', runner), sync.ensure('runner', runner)]);
    assert.deepEqual(answers, ['copied', 'copied', 'copied'], 'three callers, one copy');
    assert.equal(await runner.imageId(image), second);
  });

  it('copies nothing when this machine lacks the image (the create then fails as it would here)', async () => {
    const absent = new DockerRuntime(new Docker(), { ...options, image: `${image}-absent` });
    assert.equal(await new ImageSync(absent, pino({ level: 'silent' })).ensure('runner', runner), 'missing-here');
  });
});
