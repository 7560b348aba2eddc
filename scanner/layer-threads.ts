/**
 * Layer scans off the main thread: a small pool of worker threads, one layer at a time each, so a
 * large push's scan (inflating, tar walking, every rule over every line) does not hold up the API
 * and the edge that share the process. The blob is still read here (the upstream client lives in
 * this thread) and streamed to the thread in chunks, each acknowledged before the next is sent.
 * Same contract as `scanLayer`: bad content is a result, a failing source or a scan that cannot run
 * here (ScanEnvironmentError) rejects, and so does a thread that dies, so the job is retried.
 */
import type { Readable } from 'node:stream';
import { SHARE_ENV, Worker } from 'node:worker_threads';
import { ScanEnvironmentError, type LayerLimits, type LayerScanResult } from './layer-reader.ts';

export interface ThreadData { rulesSource: string | undefined }
/** Every message names its scan: a late one of a scan that has ended is dropped, never applied to the next. */
export type ParentMessage = { scan: number } & (
  | { type: 'scan'; digest: string; limits?: Partial<LayerLimits> }
  | { type: 'chunk'; chunk: Uint8Array }
  | { type: 'end' }
  | { type: 'abort'; message: string });
export type ThreadMessage = { scan: number } & (
  | { type: 'ack' }
  | { type: 'done'; result: LayerScanResult }
  | { type: 'failed'; name: string; message: string });

const BOOT = new URL('./layer-thread-boot.mjs', import.meta.url);

export class LayerThreads {
  private readonly idle: Worker[] = [];
  private readonly waiting: Array<(w: Worker) => void> = [];
  private readonly all = new Set<Worker>();
  private closed = false;
  private scans = 0;

  /** `size` threads at most, started when first needed; `rulesSource`: the operator's rules file text, if any. */
  constructor(private readonly size: number, private readonly rulesSource: string | undefined) {}

  async scan(source: Readable, opts: { digest: string; limits?: Partial<LayerLimits> }): Promise<LayerScanResult> {
    const worker = await this.take();
    let healthy = false;
    try {
      const result = await this.run(worker, source, opts);
      healthy = true;
      return result;
    } finally {
      this.give(worker, healthy);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.all].map((w) => w.terminate()));
    this.all.clear();
    this.idle.length = 0;
  }

  private run(worker: Worker, source: Readable, opts: { digest: string; limits?: Partial<LayerLimits> }): Promise<LayerScanResult> {
    const scan = ++this.scans;
    const post = (m: ParentMessage) => worker.postMessage(m);
    return new Promise<LayerScanResult>((resolve, reject) => {
      let acked: (() => void) | undefined;
      let settled = false;
      let sourceError: Error | undefined;
      const settle = (fn: () => void) => {
        settled = true;
        worker.off('message', onMessage);
        worker.off('error', onExit);
        worker.off('exit', onExit);
        source.destroy();
        acked?.(); // lets the sending loop see the end
        fn();
      };
      const onMessage = (m: ThreadMessage) => {
        if (m.scan !== scan) return;
        if (m.type === 'ack') return acked?.();
        if (m.type === 'done') return settle(() => (sourceError ? reject(sourceError) : resolve(m.result)));
        const err = sourceError ?? (m.name === 'ScanEnvironmentError' ? new ScanEnvironmentError(m.message) : Object.assign(new Error(m.message), { name: m.name }));
        settle(() => reject(err));
      };
      const onExit = (err: unknown) => settle(() => reject(err instanceof Error ? err : new Error(`the scan thread ended (${String(err)})`)));
      worker.on('message', onMessage);
      worker.once('error', onExit);
      worker.once('exit', onExit);
      post({ scan, type: 'scan', digest: opts.digest, ...(opts.limits ? { limits: opts.limits } : {}) });
      (async () => {
        for await (const chunk of source as AsyncIterable<Buffer>) {
          if (settled) return;
          const ack = new Promise<void>((r) => { acked = r; });
          post({ scan, type: 'chunk', chunk });
          await ack;
        }
        if (!settled) post({ scan, type: 'end' });
      })().catch((err: Error) => {
        if (settled) return; // the scan ended first (an unscannable layer stops reading): nothing to tell
        // the thread's scan then fails on its side; the source's own error is what the caller gets
        sourceError = err;
        post({ scan, type: 'abort', message: err.message });
      });
    });
  }

  private async take(): Promise<Worker> {
    if (this.closed) throw new Error('the scan threads are closed');
    const idle = this.idle.pop();
    if (idle) return idle;
    if (this.all.size < this.size) {
      // SHARE_ENV: the thread finds its tools (zstd) on the process's PATH as it is now, not as it was at its start
      const worker = new Worker(BOOT, { env: SHARE_ENV, workerData: { rulesSource: this.rulesSource } satisfies ThreadData });
      worker.unref(); // a scan in flight keeps the process up through its own handles, an idle thread does not
      this.all.add(worker);
      return worker;
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Back to the pool; a thread whose scan went wrong is replaced rather than trusted with the next layer. */
  private give(worker: Worker, healthy: boolean): void {
    if (!healthy) {
      this.all.delete(worker);
      void worker.terminate();
      const next = this.waiting.shift();
      if (next) void this.take().then(next);
      return;
    }
    const next = this.waiting.shift();
    if (next) next(worker);
    else this.idle.push(worker);
  }
}
