import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { it } from 'node:test';
import { freePort } from '../../harness/ports.ts';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const HOLDER = path.join(import.meta.dirname, 'port-holder.ts');

/** A service process holding the port open: resolves once its rule is in. */
async function holder(port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', HOLDER, String(port)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => { if (d.toString().includes('open')) resolve(); });
    child.once('exit', (code) => reject(new Error(`the holder exited (${code}) before opening the port`)));
  });
  return child;
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.stdin!.end();
  await exited;
}

/** Rules of the sandboxes' input chain that let them reach `port`. */
async function rules(port: number): Promise<string[]> {
  const { stdout } = await run('iptables', ['-w', '5', '-S', 'SVC-SANDBOX-IN']);
  return stdout.split('\n').filter((l) => l.includes(`--dport ${port} `) && l.endsWith('-j ACCEPT'));
}

it('the public port stays open to sandboxes while any service process that serves it runs; one killed leaves nothing behind', async () => {
  const port = await freePort();
  const first = await holder(port);
  const second = await holder(port);
  try {
    assert.equal((await rules(port)).length, 2, 'one rule per process');
    await stop(first);
    assert.equal((await rules(port)).length, 1, 'the first process stopping leaves the second one\'s port open');
    second.kill('SIGKILL');
    await new Promise((resolve) => second.once('exit', resolve));
    const third = await holder(port); // the next start clears the killed process's rule
    assert.equal((await rules(port)).length, 1);
    await stop(third);
    assert.deepEqual(await rules(port), [], 'no rule left once every process is gone');
  } finally {
    for (const c of [first, second]) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
});
