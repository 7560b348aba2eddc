import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import type Docker from 'dockerode';
import { MAX_LINE, SandboxLogStream, type LogEvent } from '../../logs/log-stream.ts';
import { within } from '../helpers/within.ts';

/**
 * Issue 14, hole 2: the sandbox's engine and containers choose every byte of the log stream.
 * A stand-in engine (pure logic; the real engine runs in log-stream.test.ts) sends what a hostile
 * one could: an event that is not JSON, a line that never ends, a frame declaring 4 GiB.
 */
const ID = 'abcdef012345'.padEnd(64, '0');
const at = (s: number) => new Date(1_700_000_000_000 + s * 1000).toISOString();
const frame = (kind: 1 | 2, text: string | Buffer, declared?: number) => {
  const body = Buffer.from(text);
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(declared ?? body.length, 4);
  return Buffer.concat([head, body]);
};

/**
 * The engine writes `events` (after the stream has attached), then the container's `log` to its
 * end, then ends its event stream: the log stream then releases every line it holds and is gone.
 */
function engine(log: Buffer[], events: string[] = []): Docker {
  const eventStream = new PassThrough();
  return {
    getEvents: async () => eventStream,
    listContainers: async () => [{ Id: ID }],
    getContainer: () => ({
      inspect: async () => ({ Id: ID, Name: '/web', Config: { Labels: {}, Tty: false } }),
      logs: async () => {
        // the events go first, so the log's lines come after the stream has met them
        for (const e of events) eventStream.write(e);
        const out = new PassThrough();
        for (const f of log) out.write(f);
        out.end();
        out.once('end', () => eventStream.end());
        return out;
      },
    }),
  } as unknown as Docker;
}

async function collect(docker: Docker): Promise<LogEvent[]> {
  const logs: LogEvent[] = [];
  return within(10_000, 'the log stream to end', (done, fail) => {
    const stream = new SandboxLogStream(docker, { log: (e) => logs.push(e), container: () => undefined, gone: () => done(logs) }, { holdMs: 0, since: 1n });
    stream.start().catch(fail);
    return () => stream.stop();
  });
}

describe('log stream against a hostile engine', () => {
  it('skips engine events that are not JSON or have fields of the wrong type, and keeps streaming', async () => {
    const events = ['not json\n', '{"id": 5, "Action": "start"}\n', '{"id": "' + 'f'.repeat(64) + '", "Action": ["start"]}\n', 'x'.repeat(100_000)];
    const logs = await collect(engine([frame(1, `${at(1)} still here\n`)], events));
    assert.deepEqual(logs.map((l) => l.line), ['still here']);
  });

  it(`cuts a line at ${MAX_LINE / 1024} KiB and drops the rest of it`, async () => {
    const long = 'a'.repeat(3 * MAX_LINE);
    const logs = await collect(engine([frame(1, `${at(1)} ${long.slice(0, MAX_LINE)}`), frame(1, `${long.slice(MAX_LINE)}\n${at(2)} next\n`)]));
    assert.deepEqual(logs.map((l) => l.line.length), [MAX_LINE - at(1).length - 1, 4]);
    assert.equal(logs[1]!.line, 'next');
  });

  it('reads a frame that declares 4 GiB as it comes, instead of waiting for all of it', async () => {
    const logs = await collect(engine([frame(1, `${at(1)} inside a huge frame\n`, 0xffffffff)]));
    assert.deepEqual(logs.map((l) => l.line), ['inside a huge frame']);
  });

  it('keeps a character split across two frames whole', async () => {
    const bytes = Buffer.from(`${at(1)} café\n`);
    const split = bytes.indexOf(0xc3) + 1;
    const logs = await collect(engine([frame(1, bytes.subarray(0, split)), frame(1, bytes.subarray(split))]));
    assert.deepEqual(logs.map((l) => l.line), ['café']);
  });
});
