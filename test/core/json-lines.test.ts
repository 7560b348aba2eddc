import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { onJsonLines } from '../../core/json-lines.ts';

/** Feeds `chunks` through onJsonLines and returns the values it passed on. */
async function values(chunks: Array<string | Buffer>, maxLine?: number): Promise<unknown[]> {
  const stream = new PassThrough();
  const out: unknown[] = [];
  onJsonLines(stream, (v) => out.push(v), maxLine);
  for (const c of chunks) stream.write(c);
  stream.end();
  await new Promise((resolve) => stream.on('end', resolve).resume());
  return out;
}

describe('onJsonLines (engine event streams)', () => {
  it('joins lines split between chunks, a multi-byte character too', async () => {
    const text = Buffer.from('{"a":1}\n{"name":"café"}\n');
    const at = text.indexOf('é') + 1; // inside the two bytes of é
    assert.deepEqual(await values([text.subarray(0, 3), text.subarray(3, at), text.subarray(at)]), [{ a: 1 }, { name: 'café' }]);
  });

  it('skips lines that are not JSON and goes on', async () => {
    assert.deepEqual(await values(['nonsense\n', '{"a":\n', '\n', '{"b":2}\n']), [{ b: 2 }]);
  });

  it('drops a line longer than the limit, whole, and keeps what follows', async () => {
    const long = `{"x":"${'y'.repeat(100)}"}`;
    assert.deepEqual(await values([long.slice(0, 60), long.slice(60, 120), `${long.slice(120)}\n{"ok":1}\n`], 50), [{ ok: 1 }]);
    assert.deepEqual(await values([`${long}\n{"ok":2}\n`], 50), [{ ok: 2 }]);
  });

  it('drops an endless line, chunk after chunk, and recovers at its end', async () => {
    const seen = await values([...Array.from({ length: 200 }, () => 'z'.repeat(1000)), '"tail"}\n', '{"after":1}\n'], 4096);
    assert.deepEqual(seen, [{ after: 1 }]);
  });
});
