import { StringDecoder } from 'node:string_decoder';

/** Longest line kept by default: an engine event is a few KB. */
const MAX_LINE_CHARS = 64 * 1024;

/**
 * Calls `onValue` with each JSON value of a stream that carries one per line (an engine's event
 * stream, whose bytes a sandbox may write). A line longer than `maxLine` is dropped, not held, up to
 * its newline; a line that is not JSON is skipped; neither ends the stream.
 */
export function onJsonLines(stream: NodeJS.ReadableStream, onValue: (value: unknown) => void, maxLine = MAX_LINE_CHARS): void {
  const decoder = new StringDecoder('utf8'); // a character split between chunks stays whole
  let pending = '';
  let dropping = false; // inside a line that outgrew maxLine: skipped up to its end
  stream.on('data', (chunk: Buffer | string) => {
    const lines = (pending + (typeof chunk === 'string' ? chunk : decoder.write(chunk))).split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      const skip = dropping || line.length > maxLine || !line.trim();
      dropping = false;
      if (skip) continue;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        continue;
      }
      onValue(value);
    }
    if (pending.length > maxLine) {
      pending = '';
      dropping = true;
    }
  });
}
