import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ExecProcess, SandboxExecutor } from '../../lifecycle/runtime/sandbox-runtime.ts';
import { ScriptRunner } from '../../files/script-runner.ts';

/**
 * The real file scripts in real shells (dash, as in the sandbox image) on a folder of this
 * machine, run as root like in a sandbox: races between operations of one sandbox, which the
 * route tests meet only now and then under load.
 */
function localExec(env: NodeJS.ProcessEnv = process.env): Pick<SandboxExecutor, 'start'> {
  return {
    async start(_sandbox, cmd): Promise<ExecProcess> {
      const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['pipe', 'pipe', 'pipe'], env });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const done = new Promise<{ exitCode: number; stderr: string }>((resolve) =>
        child.on('close', (code) => resolve({ exitCode: code ?? -1, stderr })));
      return { stdout: child.stdout, stdin: child.stdin, done };
    },
  };
}

describe('file scripts under concurrent operations', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'svc-scripts-race-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('MKDIR counts a folder made by another operation between its check and its mkdir as existing', async () => {
    // forces the interleaving: this mkdir lets "another operation" make the folder first
    const bin = join(root, 'bin');
    await mkdir(bin);
    await writeFile(join(bin, 'mkdir'), '#!/bin/sh\nfor a; do last=$a; done\n/bin/mkdir -- "$last"\nexec /bin/mkdir "$@"\n');
    await chmod(join(bin, 'mkdir'), 0o755);
    const top = join(root, 'forced');
    await mkdir(top);
    const runner = new ScriptRunner(localExec({ ...process.env, PATH: `${bin}:${process.env.PATH}` }));
    try {
      const r = await runner.run('sb', 'MKDIR', [top, 'new', 'child']);
      assert.equal(r.exitCode, 0, `MKDIR failed: ${r.stderr}`);
      assert.ok((await stat(join(top, 'new', 'child'))).isDirectory());
    } finally {
      runner.close();
    }
  });

  it('MKDIR of folders under the same new parent, four at once, all succeed (40 rounds)', async () => {
    const top = join(root, 'concurrent');
    await mkdir(top);
    const runner = new ScriptRunner(localExec(), { shellsPerSandbox: 4 });
    try {
      for (let round = 0; round < 40; round++) {
        const results = await Promise.all([0, 1, 2, 3].map((i) => runner.run('sb', 'MKDIR', [top, `p${round}`, 'q', `c${i}`])));
        results.forEach((r, i) => assert.equal(r.exitCode, 0, `round ${round}, operation ${i}: exit ${r.exitCode} ${r.stderr}`));
        for (const i of [0, 1, 2, 3]) assert.ok((await stat(join(top, `p${round}`, 'q', `c${i}`))).isDirectory());
      }
    } finally {
      runner.close();
    }
  });
});
