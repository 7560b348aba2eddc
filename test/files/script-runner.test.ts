import assert from 'node:assert/strict';
import { PassThrough, Writable } from 'node:stream';
import { describe, it } from 'node:test';
import type { ExecProcess, ExecResult } from '../../lifecycle/runtime/sandbox-runtime.ts';
import { ScriptRunner, ShellGone } from '../../files/script-runner.ts';

/**
 * The pool logic of ScriptRunner (pure logic, so a stand-in shell speaks its protocol here; the
 * real shells run in test/files/file-routes.test.ts). The stand-in answers LIST with its
 * arguments, holds READ_TEXT for `holdMs`, and dies without answering DELETE.
 */
class FakeExec {
  spawned = 0;
  live = 0;
  failNext: Error | null = null;
  holdMs = 50;
  /** Bytes a hostile shell writes instead of answering READ_TEXT. */
  hostile: string | null = null;

  async start(): Promise<ExecProcess> {
    if (this.failNext) {
      const err = this.failNext;
      this.failNext = null;
      throw err;
    }
    this.spawned++;
    this.live++;
    const stdout = new PassThrough();
    let resolveDone!: (r: ExecResult) => void;
    const done = new Promise<ExecResult>((r) => (resolveDone = r));
    const exit = () => {
      if (stdout.writableEnded) return;
      this.live--;
      stdout.end();
      resolveDone({ exitCode: 0, stderr: '' });
    };
    let text = '';
    const stdin = new Writable({
      write: (chunk: Buffer, _enc, cb) => {
        text += chunk.toString();
        while (text.includes('\n')) {
          const lines = text.split('\n');
          const [op, n] = lines[0]!.split(' ');
          const argc = Number(n);
          if (lines.length < argc + 2) break;
          const args = lines.slice(1, 1 + argc);
          text = lines.slice(1 + argc).join('\n');
          const answer = (out: string) => stdout.write(`0 ${Buffer.byteLength(out)} 0\n${out}`);
          if (op === 'READ_TEXT' && this.hostile !== null) stdout.write(this.hostile);
          else if (op === 'DELETE') exit();
          else if (op === 'READ_TEXT') setTimeout(() => answer('late'), this.holdMs);
          else answer(args.join('|'));
        }
        cb();
      },
      final: (cb) => {
        exit();
        cb();
      },
    });
    return { stdout, stdin, done };
  }
}

describe('ScriptRunner pool', () => {
  it('answers many operations at once with at most N shells, in any order of completion', async () => {
    const exec = new FakeExec();
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 2, idleMs: 10_000 });
    const results = await Promise.all(Array.from({ length: 9 }, (_, i) =>
      runner.run('sb', i % 3 ? 'LIST' : 'READ_TEXT', ['/root', `a${i}`])));
    assert.deepEqual(results.map((r) => r.stdout.toString()), Array.from({ length: 9 }, (_, i) => (i % 3 ? `/root|a${i}` : 'late')));
    assert.equal(exec.spawned, 2);
    runner.close();
  });

  it('ends idle shells and starts a fresh one for the next operation', async () => {
    const exec = new FakeExec();
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 2, idleMs: 30 });
    assert.equal((await runner.run('sb', 'LIST', ['x'])).stdout.toString(), 'x');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(exec.live, 0, 'the idle shell ended');
    assert.equal((await runner.run('sb', 'LIST', ['y'])).stdout.toString(), 'y');
    assert.equal(exec.spawned, 2);
    runner.close();
  });

  it('a shell that dies during an operation fails that one (ShellGone); the next gets a new shell', async () => {
    const exec = new FakeExec();
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 1, idleMs: 10_000 });
    const dying = runner.run('sb', 'DELETE', ['/root', 'x']);
    const queued = runner.run('sb', 'LIST', ['after']);
    await assert.rejects(dying, ShellGone);
    assert.equal((await queued).stdout.toString(), 'after');
    assert.equal(exec.spawned, 2);
    runner.close();
  });

  it('a shell that cannot start fails the operation and those waiting, with the engine error', async () => {
    const exec = new FakeExec();
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 1, idleMs: 10_000 });
    exec.failNext = Object.assign(new Error('container not running'), { statusCode: 409 });
    const [first, waiting] = [runner.run('sb', 'LIST', ['x']), runner.run('sb', 'LIST', ['y'])];
    await assert.rejects(first, { statusCode: 409 });
    await assert.rejects(waiting, { statusCode: 409 });
    assert.equal(exec.spawned, 0);
    assert.equal((await runner.run('sb', 'LIST', ['ok'])).stdout.toString(), 'ok', 'a later operation starts a shell again');
    runner.close();
  });

  it('keeps sandboxes apart: each has its own shells', async () => {
    const exec = new FakeExec();
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 1, idleMs: 10_000 });
    await Promise.all([runner.run('a', 'LIST', ['1']), runner.run('b', 'LIST', ['2'])]);
    assert.equal(exec.spawned, 2);
    runner.close();
    await new Promise((r) => setImmediate(r));
    assert.equal(exec.live, 0, 'close ends every shell');
  });

  it('lends transfers shells of their own: slow transfers never hold up other operations', async () => {
    const exec = new FakeExec();
    exec.holdMs = 300;
    const runner = new ScriptRunner(exec, { shellsPerSandbox: 2, transfersPerSandbox: 2, idleMs: 10_000 });
    const done: string[] = [];
    const transfers = [1, 2, 3].map((i) => runner.run('sb', 'READ_TEXT', [`t${i}`], { transfer: true }).then(() => done.push(`t${i}`)));
    const others = [1, 2, 3].map((i) => runner.run('sb', 'LIST', [`o${i}`]).then(() => done.push(`o${i}`)));
    await Promise.all(others);
    assert.deepEqual(done, ['o1', 'o2', 'o3'], 'the other operations did not wait for the transfers');
    await Promise.all(transfers);
    // a shell each for the three transfers (up to 2 + 2 may start for them), and the two kept
    // for other operations beside those
    assert.equal(exec.spawned, 5);
    assert.equal((await runner.run('sb', 'READ_TEXT', ['t4'], { transfer: true })).stdout.toString(), 'late');
    assert.equal(exec.spawned, 5, 'a later transfer takes an idle shell');
    runner.close();
  });

  it('drops a shell that breaks the protocol: an endless header line, a huge declared answer, a garbled header', async () => {
    for (const [hostile, why] of [
      ['x'.repeat(5000), /longer than 4 KiB/],
      [`0 ${17 * 1024 * 1024} 0\n`, /more than 16 MiB/],
      ['0 -1 0\n', /not "<code> <out> <err>"/],
    ] as const) {
      const exec = new FakeExec();
      exec.hostile = hostile;
      const runner = new ScriptRunner(exec, { shellsPerSandbox: 1, idleMs: 10_000 });
      await assert.rejects(runner.run('sb', 'READ_TEXT', ['/root', 'x']), (err: Error) => err instanceof ShellGone && why.test(err.message));
      exec.hostile = null;
      assert.equal((await runner.run('sb', 'LIST', ['next'])).stdout.toString(), 'next', 'the next operation gets a new shell');
      assert.equal(exec.spawned, 2);
      runner.close();
    }
  });
});
