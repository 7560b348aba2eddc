import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { mapLimited } from '../../core/map-limited.ts';

describe('mapLimited', () => {
  it('keeps the order and never runs more than the limit at once', async () => {
    let running = 0;
    let most = 0;
    const out = await mapLimited([5, 1, 4, 2, 3, 0, 6, 7, 8, 9], 3, async (n) => {
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setImmediate(resolve));
      running--;
      return n * 2;
    });
    assert.deepEqual(out, [10, 2, 8, 4, 6, 0, 12, 14, 16, 18]);
    assert.equal(most, 3);
    assert.deepEqual(await mapLimited([], 8, async () => 1), []);
  });

  it('rejects with the first error', async () => {
    await assert.rejects(mapLimited([1, 2, 3], 2, async (n) => { if (n === 2) throw new Error('two'); return n; }), /two/);
  });
});
