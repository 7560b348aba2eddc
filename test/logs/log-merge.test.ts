import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import type Docker from 'dockerode';
import { SandboxLogStream, type LogEvent } from '../../logs/log-stream.ts';
import { within } from '../helpers/within.ts';

/**
 * The merge and resume logic of SandboxLogStream (pure logic, so a stand-in engine serves one
 * container's log here; the real engine runs in log-stream.test.ts). The engine may write a line
 * of one stream after a newer line of the other, which is what the stand-in does.
 */
const ID = 'abcdef012345'.padEnd(64, '0');
const T0 = 1_700_000_000n * 1_000_000_000n;
const at = (ms: number) => {
  const ns = T0 + BigInt(ms) * 1_000_000n;
  return `${new Date(Number(ns / 1_000_000n)).toISOString().slice(0, 19)}.${String(ns % 1_000_000_000n).padStart(9, '0')}Z`;
};
const frame = (kind: 1 | 2, text: string) => {
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(Buffer.byteLength(text), 4);
  return Buffer.concat([head, Buffer.from(text)]);
};

/** stdout tick 1 (t=0), stderr warn (t=20), then stdout tick 2 (t=10): written after the newer stderr line. */
const LOG = [frame(1, `${at(0)} tick 1\n`), frame(2, `${at(20)} warn\n`), frame(1, `${at(10)} tick 2\n`), frame(1, `${at(10)} tick 3\n`)];

/** `logsRead`: called once the container's log has been read to its end. */
function engine(events = new PassThrough(), logsRead?: () => void): Docker {
  return {
    getEvents: async () => events,
    listContainers: async () => [{ Id: ID }],
    getContainer: () => ({
      inspect: async () => ({ Id: ID, Name: '/web', Config: { Labels: {}, Tty: false } }),
      logs: async (opts: { since?: string }) => {
        const since = opts.since ? BigInt(opts.since.replace('.', '')) : 0n;
        const out = new PassThrough();
        // the engine filters by time, not by position in the file
        for (const f of LOG) {
          const ts = f.toString('utf8', 8).split(' ')[0]!;
          const ns = BigInt(Date.parse(ts.slice(0, 19) + 'Z')) * 1_000_000n + BigInt(ts.slice(20, 29));
          if (ns >= since) out.write(f);
        }
        out.end();
        if (logsRead) out.once('end', logsRead);
        return out;
      },
    }),
  } as unknown as Docker;
}

/**
 * Every line the stream releases for a replay of LOG: once the log has been read, the engine's
 * event stream ends, which makes the log stream release what it holds and say it is gone.
 */
async function collect(opts: ConstructorParameters<typeof SandboxLogStream>[2]): Promise<LogEvent[]> {
  const logs: LogEvent[] = [];
  const events = new PassThrough();
  return within(10_000, 'the log stream to end', (done, fail) => {
    const stream = new SandboxLogStream(engine(events, () => events.end()), { log: (e) => logs.push(e), container: () => undefined, gone: () => done(logs) }, { holdMs: 0, ...opts });
    stream.start().catch(fail);
    return () => stream.stop();
  });
}

describe('log stream merge', () => {
  it('keeps a line that the engine wrote after a newer line of the other stream', async () => {
    const logs = await collect({ since: T0 });
    assert.deepEqual(logs.map((l) => l.line).sort(), ['tick 1', 'tick 2', 'tick 3', 'warn']);
    assert.deepEqual(logs.map((l) => l.line), ['tick 1', 'tick 2', 'tick 3', 'warn'], 'released in time order');
    assert.equal(new Set(logs.map((l) => l.id)).size, 4, 'ids are unique');
  });

  it('resumes after any id with the lines after it, of both streams', async () => {
    const all = await collect({ since: T0 });
    assert.equal(all.length, 4);
    for (let i = 0; i < all.length; i++) {
      const [ns, container, n] = all[i]!.id.split('-');
      const resumed = await collect({ after: { ns: BigInt(ns!), container: container!, n: Number(n) } });
      assert.deepEqual(resumed.map((l) => l.id), all.slice(i + 1).map((l) => l.id), `after ${all[i]!.line}`);
    }
  });

  it("skips what the sandbox's engine writes that is not a container event, and goes on", async () => {
    const events = new PassThrough();
    const seen: Array<{ action: string; container: string }> = [];
    await within(10_000, 'two container events', (done, fail) => {
      const stream = new SandboxLogStream(engine(events), { log: () => undefined, container: (e) => { if (seen.push(e) === 2) done(undefined); }, gone: () => undefined }, { holdMs: 0 });
      stream.start().then(() => {
        events.write('not json\n{"id":7,"Action":"die"}\n{"id":"' + ID + '","Action":"die","timeNano":1e300,"Actor":{"Attributes":{"name":{"x":1}}}}\n');
        events.write(`${'x'.repeat(100_000)}\n{"id":"${ID}","Action":"die","Actor":{"Attributes":{"name":"web"}}}\n`);
      }, fail);
      return () => stream.stop();
    });
    assert.deepEqual(seen.map((e) => [e.action, e.container]), [['stop', ID.slice(0, 12)], ['stop', 'web']]);
  });
});
