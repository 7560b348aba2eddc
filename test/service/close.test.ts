import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';

/** What the process may still hold after the service closed: its own stdio (and the pipes to us). */
const STDIO = new Set(['PipeWrap', 'TTYWrap']);
/** A process whose service closed has this long to end by itself. */
const EXIT_WITHIN_MS = 15_000;

test('the service leaves nothing running after close: the process ends by itself', { timeout: 600_000 }, async () => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/service/close-child.ts'], {
    env: { ...process.env, LOG_LEVEL: 'silent' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  let leftAt = 0;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const left = await new Promise<string[] | undefined>((resolve) => {
    child.stdout.on('data', () => {
      const m = /^left (.*)$/m.exec(out);
      if (m && !leftAt) { leftAt = Date.now(); resolve(JSON.parse(m[1]!)); }
    });
    child.once('exit', () => resolve(undefined));
  });
  assert.ok(left, `the child ended before closing (steps: ${stepsOf(out)}):\n${err.slice(-4000)}`);
  const code = await Promise.race([exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), EXIT_WITHIN_MS).unref())]);
  if (code === 'hung') child.kill('SIGKILL');
  const ours = left.filter((r) => !STDIO.has(r));
  assert.deepEqual(ours, [], `handles left after close: ${left.join(', ')}`);
  assert.notEqual(code, 'hung', `the process did not end within ${EXIT_WITHIN_MS} ms of the close`);
  assert.equal(code, 0, `the child failed:\n${err.slice(-4000)}`);
});

function stepsOf(out: string): string {
  return [...out.matchAll(/^step (.*)$/gm)].map((m) => m[1]).join(' → ') || 'none';
}
