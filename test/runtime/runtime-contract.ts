import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import tar from 'tar-stream';
import { RuntimeUnreachable, type Inspection, type SandboxRuntime } from '../../lifecycle/runtime/sandbox-runtime.ts';

/** What a runtime under contract brings to the suite. */
export interface ContractSubject {
  runtime: SandboxRuntime;
  /** The same kind of runtime whose engine cannot be asked (a socket that does not exist, a host that is away). */
  unreachable: SandboxRuntime;
  /** A sandbox name of this run (its resources carry this run's labels). */
  sandboxName(suffix: string): string;
  /** Removes what the run left. */
  cleanup(): Promise<void>;
}

/**
 * The promises of SandboxRuntime (lifecycle/runtime/sandbox-runtime.ts), run against each
 * implementation: test/runtime/docker-runtime.test.ts on the real sandbox engine,
 * test/runtime/memory-runtime.test.ts on the lifecycle's test double.
 */
export function runtimeContract(
  title: string,
  /**
   * `runsCommands`: commands really run inside the sandbox (a real engine). A test double does not:
   * the parts about exit codes, output, files and archive reads are left to the real runtimes.
   */
  opts: { runsCommands: boolean },
  subject: () => Promise<ContractSubject>,
): void {
  describe(`SandboxRuntime contract: ${title}`, () => {
    let s: ContractSubject;
    let name: string;
    const status = async (n = name) => (await s.runtime.inspect(n)).status;

    before(async () => {
      s = await subject();
      name = s.sandboxName('contract');
    });
    after(async () => {
      await s?.cleanup();
    });

    it('answers deep_sleep for a sandbox it has never made, and lists nothing of it', async () => {
      assert.equal(await status(s.sandboxName('never')), 'deep_sleep');
      assert.ok(!(await s.runtime.list()).some((c) => c.name === s.sandboxName('never')));
      assert.ok(!(await s.runtime.withVolumes()).includes(s.sandboxName('never')));
    });

    it('creates once however often asked (idempotent), and a created sandbox is not running', async () => {
      await s.runtime.create({ name, env: { SVC_SANDBOX: name } });
      await s.runtime.create({ name, env: { SVC_SANDBOX: name } });
      assert.equal(await status(), 'exited');
      assert.deepEqual((await s.runtime.list()).filter((c) => c.name === name), [{ name, running: false }]);
      assert.ok(!(await s.runtime.list({ running: true })).some((c) => c.name === name), 'not among the running');
      assert.ok((await s.runtime.withVolumes()).includes(name));
    });

    it('starts (twice: idempotent) to running with an address, and settles a running sandbox again', async () => {
      await s.runtime.start(name);
      await s.runtime.start(name);
      const state = await s.runtime.inspect(name);
      assert.equal(state.status, 'running');
      assert.ok('address' in state && state.address, 'a running sandbox has an address');
      assert.ok('startedAt' in state && state.startedAt);
      await s.runtime.settle(name);
      assert.deepEqual((await s.runtime.list()).filter((c) => c.name === name), [{ name, running: true }]);
      assert.deepEqual((await s.runtime.list({ running: true })).filter((c) => c.name === name), [{ name, running: true }]);
      const use = await s.runtime.resourceUse(name);
      assert.ok(use && use.cpuLimit > 0 && use.memoryLimitBytes > 0 && use.at > 0, 'a reading of a running sandbox, with its limits');
      assert.ok(await s.runtime.hostOf(name), 'names the host it runs on');
    });

    if (opts.runsCommands) it('runs commands: exit code, stdout and stderr apart, stdin in, and reads an archive of a path', async () => {
      const failed = await s.runtime.exec.run(name, ['sh', '-c', 'echo out; echo err >&2; exit 3']);
      assert.deepEqual([failed.exitCode, failed.stdout.toString(), failed.stderr], [3, 'out\n', 'err\n']);
      const fed = await s.runtime.exec.run(name, ['sh', '-c', 'cat > /root/contract.txt && cat /root/contract.txt'], 'kept over deep sleep\n');
      assert.deepEqual([fed.exitCode, fed.stdout.toString()], [0, 'kept over deep sleep\n']);
      const entries = await tarEntries(await s.runtime.exec.getArchive(name, '/root/contract.txt'));
      assert.deepEqual(entries, [{ name: 'contract.txt', text: 'kept over deep sleep\n' }]);
      const disk = await s.runtime.diskUse(name);
      assert.ok(disk.usedBytes > 0 && disk.freeBytes > 0 && disk.complete, 'its folders take room');
    });

    it('stops (twice: idempotent) to exited with the time it stopped', async () => {
      await s.runtime.stop(name);
      await s.runtime.stop(name);
      const state = await s.runtime.inspect(name);
      assert.equal(state.status, 'exited');
      assert.ok('finishedAt' in state && state.finishedAt && Date.parse(state.finishedAt) > 0, 'a stop time');
      assert.ok(!('address' in state && state.address), 'no address while stopped');
      assert.equal(await s.runtime.resourceUse(name), undefined, 'no reading while stopped');
    });

    it('takes down (twice: idempotent) to deep_sleep and keeps the volumes; a new container finds them', async () => {
      await s.runtime.takeDown(name);
      await s.runtime.takeDown(name);
      assert.equal(await status(), 'deep_sleep');
      assert.ok(!(await s.runtime.list()).some((c) => c.name === name), 'no container');
      assert.ok((await s.runtime.withVolumes()).includes(name), 'volumes kept');
      await s.runtime.create({ name, env: { SVC_SANDBOX: name } });
      await s.runtime.start(name);
      assert.equal(await status(), 'running');
      if (opts.runsCommands) assert.equal((await s.runtime.exec.run(name, ['cat', '/root/contract.txt'])).stdout.toString(), 'kept over deep sleep\n');
    });

    it('archives the persistent folders of a stopped sandbox into a folder', async () => {
      await s.runtime.stop(name);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-contract-archive-'));
      try {
        await s.runtime.archiveVolumes(name, path.join(dir, 'a'));
        const files = fs.readdirSync(path.join(dir, 'a')).sort();
        assert.ok(files.includes('root.tar.gz'), `root's folder archived (${files.join(', ')})`);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('removes the volumes (twice: idempotent) after a take-down: nothing of the sandbox is left', async () => {
      await s.runtime.takeDown(name);
      await s.runtime.removeVolumes(name);
      await s.runtime.removeVolumes(name);
      assert.equal(await status(), 'deep_sleep');
      assert.ok(!(await s.runtime.withVolumes()).includes(name), 'volumes gone');
      assert.ok(!(await s.runtime.list()).some((c) => c.name === name));
    });

    it('answers "unreachable" (never deep_sleep) when its engine cannot be asked, and every other call rejects with RuntimeUnreachable', async () => {
      const answer: Inspection = await s.unreachable.inspect(name);
      assert.equal(answer.status, 'unreachable');
      assert.ok('reason' in answer && answer.reason.length > 0, 'says why');
      assert.equal(await s.unreachable.hostOf(name), null, 'no host name from an engine that cannot be asked');
      for (const call of [
        () => s.unreachable.create({ name, env: {} }),
        () => s.unreachable.start(name),
        () => s.unreachable.stop(name),
        () => s.unreachable.takeDown(name),
        () => s.unreachable.removeVolumes(name),
        () => s.unreachable.list(),
        () => s.unreachable.withVolumes(),
        () => s.unreachable.ping(),
        () => s.unreachable.resourceUse(name),
        () => s.unreachable.exec.run(name, ['true']),
      ]) {
        await assert.rejects(call(), (err: unknown) => {
          assert.ok(err instanceof RuntimeUnreachable, `RuntimeUnreachable, not ${String(err)}`);
          assert.equal((err as RuntimeUnreachable).statusCode, 503);
          assert.equal((err as RuntimeUnreachable).code, 'SVC_BUSY');
          const { reason, message } = err as RuntimeUnreachable;
          assert.ok(reason.length > 0 && !message.includes(reason), `the reason (a host path or address) stays out of the message: ${message}`);
          return true;
        });
      }
    });
  });
}

/** The files of a tar stream, with their text. */
async function tarEntries(stream: Readable): Promise<Array<{ name: string; text: string }>> {
  const extract = tar.extract();
  const entries: Array<{ name: string; text: string }> = [];
  extract.on('entry', (header, body, next) => {
    const chunks: Buffer[] = [];
    body.on('data', (c: unknown) => void chunks.push(c as Buffer));
    body.on('end', () => {
      if (header.type === 'file') entries.push({ name: header.name, text: Buffer.concat(chunks).toString('utf8') });
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    extract.on('finish', resolve);
    extract.on('error', reject);
    stream.on('error', reject);
    stream.pipe(extract);
  });
  return entries;
}
