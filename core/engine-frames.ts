/**
 * Reads the engine's multiplexed stream (exec and logs without a TTY): frames of an 8-byte header
 * (stream 1 stdout or 2 stderr, 3 zero bytes, big-endian length) and a payload. Payloads are passed
 * on as slices of the chunks as they come, never collected or copied: a frame may declare up to 4 GiB.
 */
export class FrameReader {
  private readonly header = Buffer.alloc(8);
  private headerFill = 0;
  private kind = 0;
  private remaining = 0;

  constructor(private readonly onPayload: (kind: number, payload: Buffer) => void) {}

  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.remaining === 0) {
        const take = Math.min(8 - this.headerFill, chunk.length - at);
        chunk.copy(this.header, this.headerFill, at, at + take);
        this.headerFill += take;
        at += take;
        if (this.headerFill < 8) return;
        this.headerFill = 0;
        this.kind = this.header[0]!;
        this.remaining = this.header.readUInt32BE(4);
        continue;
      }
      const take = Math.min(this.remaining, chunk.length - at);
      const payload = chunk.subarray(at, at + take);
      at += take;
      this.remaining -= take;
      this.onPayload(this.kind, payload);
    }
  }
}
