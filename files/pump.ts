import type { Readable, Writable } from 'node:stream';
import { errors } from '../core/errors.ts';

/**
 * Copies an upload's body into `dest` with backpressure and ends `dest` after the last byte, but
 * not before `closable` settles; resolves with the number of bytes. Past `limit` bytes it stops
 * with UploadTooLarge; a client that goes away, or a `dest` that closes first, stops it with
 * UploadIncomplete. On any stop `dest` is destroyed (once closable) and the rest of the body is
 * read and dropped, so the connection stays usable for the error reply. The body is read by hand
 * rather than piped: a refused upload must leave the client's connection alone.
 */
export function pump(body: Readable, dest: Writable, opts: { limit: number; declared?: number; closable?: Promise<unknown> }): Promise<number> {
  const { limit, declared } = opts;
  const closable = opts.closable ?? Promise.resolve();
  return new Promise((resolve, reject) => {
    let received = 0;
    let settled = false;
    const cleanup = () => {
      settled = true;
      for (const [emitter, event, listener] of listeners) emitter.off(event, listener);
      dest.on('error', () => undefined); // whatever it says now comes too late to matter
    };
    const stop = (err: Error) => {
      if (settled) return;
      cleanup();
      void closable.then(() => dest.destroy());
      body.resume(); // drop the rest
      reject(err);
    };
    const incomplete = () => new errors.UploadIncomplete(received, declared ?? 'the announced number of');
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) return stop(new errors.UploadTooLarge(limit));
      if (!dest.write(chunk)) {
        body.pause();
        dest.once('drain', () => { if (!settled) body.resume(); });
      }
    };
    const onEnd = () => {
      if ((body as { readableAborted?: boolean }).readableAborted) return stop(incomplete());
      body.off('close', onClose);
      void closable.then(() => dest.end(() => {
        if (settled) return;
        cleanup();
        resolve(received);
      }));
    };
    const onAbort = () => stop(incomplete());
    const onClose = () => { if (!body.readableEnded) stop(incomplete()); };
    const onDestClose = () => { if (!dest.writableFinished) stop(incomplete()); };
    const listeners: Array<[Readable | Writable, string, Parameters<Readable['on']>[1]]> = [
      [body, 'data', onData], [body, 'end', onEnd], [body, 'error', onAbort], [body, 'close', onClose],
      [dest, 'error', onAbort], [dest, 'close', onDestClose],
    ];
    for (const [emitter, event, listener] of listeners) emitter.on(event, listener);
  });
}
