import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pollUntil } from '../../core/poll.ts';

describe('pollUntil (waits for a tool, an engine, a registry)', () => {
  it('returns once an attempt says true, after failures and thrown errors', async () => {
    let n = 0;
    await pollUntil('never', async () => {
      n += 1;
      if (n === 1) throw new Error('refused');
      return n >= 3 || `try ${n}`;
    }, { timeoutMs: 60_000, everyMs: 5 });
    assert.equal(n, 3);
  });

  it('gives up after its time with what the last attempt said', async () => {
    await assert.rejects(
      pollUntil('the tool did not answer', async () => 'answered 502', { timeoutMs: 50, firstMs: 1, everyMs: 10 }),
      { message: 'the tool did not answer within 0.05 s (answered 502)' },
    );
    await assert.rejects(
      pollUntil('no answer', async () => { throw new Error('ECONNREFUSED'); }, { timeoutMs: 20, everyMs: 5 }),
      { message: 'no answer within 0.02 s (ECONNREFUSED)' },
    );
  });
});
