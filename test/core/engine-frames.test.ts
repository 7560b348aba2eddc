import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FrameReader } from '../../core/engine-frames.ts';

const frame = (kind: number, text: string) => {
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(Buffer.byteLength(text), 4);
  return Buffer.concat([head, Buffer.from(text)]);
};

/** The payloads read from `bytes` pushed in pieces of `size`, joined per stream. */
function read(bytes: Buffer, size: number): Record<number, string> {
  const out: Record<number, string> = {};
  const reader = new FrameReader((kind, payload) => { out[kind] = (out[kind] ?? '') + payload.toString(); });
  for (let i = 0; i < bytes.length; i += size) reader.push(bytes.subarray(i, i + size));
  return out;
}

describe('FrameReader (the engine multiplexed stream)', () => {
  it('reads the frames of both streams however the chunks cut them, headers included', () => {
    const bytes = Buffer.concat([frame(1, 'out one\n'), frame(2, 'err\n'), frame(1, ''), frame(1, 'out two\n')]);
    for (const size of [1, 3, 7, 8, 9, bytes.length]) {
      assert.deepEqual(read(bytes, size), { 1: 'out one\nout two\n', 2: 'err\n' }, `chunks of ${size}`);
    }
  });

  it('passes a frame that declares 4 GiB on as its bytes arrive, holding none', () => {
    const head = Buffer.alloc(8);
    head[0] = 1;
    head.writeUInt32BE(0xffffffff, 4);
    const seen: number[] = [];
    const reader = new FrameReader((_kind, payload) => seen.push(payload.length));
    reader.push(Buffer.concat([head, Buffer.alloc(1000)]));
    reader.push(Buffer.alloc(5000));
    assert.deepEqual(seen, [1000, 5000]);
  });
});
