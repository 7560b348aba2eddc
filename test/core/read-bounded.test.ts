import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import { readBounded } from '../../core/read-bounded.ts';

/** A Node stream of `count` chunks of `size` bytes, counting what was pulled from it. */
function chunks(count: number, size: number): { stream: Readable; pulled: () => number } {
  let n = 0;
  const stream = new Readable({
    read() {
      if (n === count) return this.push(null);
      n += 1;
      this.push(Buffer.alloc(size, n));
    },
  });
  return { stream, pulled: () => n };
}

describe('readBounded (a body read into memory, at most a limit)', () => {
  it('returns every byte of a body at or under the limit, and an empty buffer for no body', async () => {
    const { stream } = chunks(4, 10);
    const bytes = await readBounded(stream, 40);
    assert.equal(bytes!.length, 40);
    assert.deepEqual([...new Set(bytes)], [1, 2, 3, 4]);
    assert.equal((await readBounded(undefined, 10))!.length, 0);
  });

  it('answers undefined past the limit and stops reading there (the stream is destroyed)', async () => {
    const { stream, pulled } = chunks(1000, 10);
    assert.equal(await readBounded(stream, 25), undefined);
    assert.ok(pulled() < 10, `pulled ${pulled()} chunks`);
    assert.equal(stream.destroyed, true);
  });

  it('with drainUpTo, reads and drops the rest up to that many bytes, then stops', async () => {
    const whole = chunks(8, 10);
    assert.equal(await readBounded(whole.stream, 25, 100), undefined);
    assert.equal(whole.pulled(), 8, 'a sender within the drain is read to its end');
    const endless = chunks(1000, 10);
    assert.equal(await readBounded(endless.stream, 25, 100), undefined);
    assert.ok(endless.pulled() < 20, `pulled ${endless.pulled()} chunks`);
    assert.equal(endless.stream.destroyed, true);
  });

  it('cancels a web stream (a fetch body) it leaves early', async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      pull: (c) => c.enqueue(new Uint8Array(64)),
      cancel: () => { cancelled = true; },
    });
    assert.equal(await readBounded(body as unknown as AsyncIterable<Uint8Array>, 100), undefined);
    assert.equal(cancelled, true);
  });
});
