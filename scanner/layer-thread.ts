/**
 * One scan thread (run by layer-threads.ts through layer-thread-boot.mjs): scans the layers its
 * parent streams to it, one at a time, with the same reader and rules as the parent's thread would.
 * The parent sends a layer's bytes in chunks and waits for each chunk's acknowledgement, so at most
 * one chunk plus the stream's buffer is in flight.
 */
import { PassThrough } from 'node:stream';
import { parentPort, workerData } from 'node:worker_threads';
import { scanLayer } from './layer-reader.ts';
import { parseRules } from './operator-rules.ts';
import { builtInRules } from './rule-set.ts';
import type { ParentMessage, ThreadMessage, ThreadData } from './layer-threads.ts';

const { rulesSource } = workerData as ThreadData;
const rules = rulesSource === undefined ? builtInRules() : parseRules(rulesSource);
const port = parentPort!;
/** The scan under way: its number and the stream its bytes go into. */
let current: { scan: number; bytes: PassThrough } | undefined;

const send = (m: ThreadMessage) => port.postMessage(m);

port.on('message', (m: ParentMessage) => {
  if (m.type === 'scan') {
    const bytes = new PassThrough({ highWaterMark: 4 * 1024 * 1024 });
    const scan = { scan: m.scan, bytes };
    current = scan;
    scanLayer(bytes, { digest: m.digest, ...(m.limits ? { limits: m.limits } : {}), rules }).then(
      (result) => send({ scan: m.scan, type: 'done', result }),
      (err: Error) => send({ scan: m.scan, type: 'failed', name: err.name, message: err.message }),
    ).finally(() => {
      if (current === scan) current = undefined;
    });
    return;
  }
  if (current?.scan !== m.scan) return; // a late message of a scan that has ended
  const { bytes } = current;
  switch (m.type) {
    case 'chunk':
      if (bytes.destroyed || bytes.write(Buffer.from(m.chunk.buffer, m.chunk.byteOffset, m.chunk.byteLength))) send({ scan: m.scan, type: 'ack' });
      else bytes.once('drain', () => send({ scan: m.scan, type: 'ack' }));
      return;
    case 'end':
      bytes.end();
      return;
    case 'abort':
      bytes.destroy(new Error(m.message));
      return;
  }
});
