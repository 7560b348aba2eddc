/**
 * Reads a whole body into memory when it is at most `limit` bytes; undefined when it is longer
 * (its sender, not us, decides the length, so nothing past the limit is kept). With `drainUpTo`,
 * bytes past the limit are read and dropped up to that many in all, so a client that is still
 * sending gets its answer rather than a reset. Leaving the loop early ends the body: the
 * iterator's return destroys a Node stream and cancels a web stream.
 */
export async function readBounded(body: AsyncIterable<Uint8Array> | null | undefined, limit: number, drainUpTo = limit): Promise<Buffer | undefined> {
  if (!body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += chunk.length;
    if (total > drainUpTo) break;
    if (total <= limit) chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  }
  return total > limit ? undefined : Buffer.concat(chunks, total);
}
