import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SAMPLE_EVERY_MS, SandboxUsage, type UsageSource } from '../../lifecycle/usage.ts';
import type { DiskUse, ResourceUse } from '../../lifecycle/runtime/sandbox-runtime.ts';

/** An engine of readings made up here (pure logic: the real engine is read in test/ui/terminal.test.ts). */
function fakeEngine(clock: { now: number }) {
  const calls = { resources: 0, disk: 0 };
  let cpuNs = 5e9;
  let running = true;
  const source: UsageSource = {
    async resourceUse(): Promise<ResourceUse | undefined> {
      calls.resources++;
      if (!running) return undefined;
      cpuNs += 0.25e9; // a quarter of a core-second between readings
      return { at: clock.now, cpuNs, cpuLimit: 2, memoryBytes: 100 << 20, memoryLimitBytes: 2048 << 20 };
    },
    async diskUse(): Promise<DiskUse> {
      calls.disk++;
      return { usedBytes: 42 << 20, freeBytes: 10 << 30, complete: true };
    },
  };
  return { source, calls, stop: () => { running = false; }, restart: () => { cpuNs = 0; } };
}

describe('sandbox usage sampler', () => {
  it('takes a second reading for the first rate, then one per period however many panels ask', async () => {
    const clock = { now: 1_000_000 };
    const engine = fakeEngine(clock);
    // the real clock moves 500 ms during the second reading; the made-up one by a second per reading
    const usage = new SandboxUsage({ ...engine.source, resourceUse: async (n, s) => { clock.now += 1000; return engine.source.resourceUse(n, s); } }, () => clock.now);
    const first = await usage.read('svc-a');
    assert.equal(engine.calls.resources, 2, 'a rate needs two readings');
    assert.equal(first.cpu.cores, 0.25);
    assert.equal(first.cpu.limit, 2);
    assert.equal(first.memory.bytes, 100 << 20);
    assert.deepEqual(first.disk && { used: first.disk.usedBytes, complete: first.disk.complete }, { used: 42 << 20, complete: true });
    assert.equal(first.history.length, 1);

    await Promise.all([usage.read('svc-a'), usage.read('svc-a'), usage.read('svc-a')]);
    assert.equal(engine.calls.resources, 2, 'within the period the last reading is shared');
    clock.now += SAMPLE_EVERY_MS;
    const [a, b] = await Promise.all([usage.read('svc-a'), usage.read('svc-a')]);
    assert.equal(engine.calls.resources, 3, 'one reading for two panels');
    assert.equal(a.history.length, 2);
    assert.equal(b.history.length, 2);
    assert.equal(engine.calls.disk, 1, 'disk use is measured once a minute at most');
  });

  it('starts the rate again when the CPU count goes back (a restarted sandbox), and keeps 10 minutes', async () => {
    const clock = { now: 1_000_000 };
    const engine = fakeEngine(clock);
    const usage = new SandboxUsage({ ...engine.source, resourceUse: async (n, s) => { clock.now += 1000; return engine.source.resourceUse(n, s); } }, () => clock.now);
    await usage.read('svc-a');
    engine.restart();
    clock.now += SAMPLE_EVERY_MS;
    const after = await usage.read('svc-a');
    assert.equal(after.cpu.cores, 0.25, 'no negative rate across a restart');
    for (let i = 0; i < 400; i++) {
      clock.now += 5_000;
      await usage.read('svc-a');
    }
    const { history } = await usage.read('svc-a');
    assert.ok(history.length <= 300, `${history.length} points`);
    assert.ok(history.at(-1)!.at - history[0]!.at <= 10 * 60_000, 'the last 10 minutes only');
  });

  it('answers 409 for a sandbox that does not run', async () => {
    const clock = { now: 1_000_000 };
    const engine = fakeEngine(clock);
    const usage = new SandboxUsage(engine.source, () => clock.now);
    engine.stop();
    await assert.rejects(usage.read('svc-a'), (err: Error & { code?: string; statusCode?: number }) => err.code === 'SVC_SANDBOX_NOT_RUNNING' && err.statusCode === 409);
  });

  it('keeps its cadence by its own clock, whatever time the engine reports (skewed, or Go\'s zero time)', async () => {
    const clock = { now: 1_000_000 };
    const engine = fakeEngine(clock);
    const zeroTime = Date.parse('0001-01-01T00:00:00Z');
    const usage = new SandboxUsage({ ...engine.source, resourceUse: async (n, s) => { clock.now += 1000; const r = await engine.source.resourceUse(n, s); return r && { ...r, at: zeroTime }; } }, () => clock.now);
    const first = await usage.read('svc-a');
    assert.equal(first.cpu.cores, 0.25, 'the rate falls back to this clock when the engine\'s did not move');
    await usage.read('svc-a');
    await usage.read('svc-a');
    assert.equal(engine.calls.resources, 2, 'reads within the period share the last reading');
    clock.now += SAMPLE_EVERY_MS;
    await usage.read('svc-a');
    assert.equal(engine.calls.resources, 3);
  });

  it('starts no new disk scan within the minute after one that failed, and shows a cut-off one', async () => {
    const clock = { now: 1_000_000 };
    const engine = fakeEngine(clock);
    let fail = true;
    const usage = new SandboxUsage({
      ...engine.source,
      diskUse: async () => {
        engine.calls.disk++;
        if (fail) throw new Error('could not read the disk use');
        return { usedBytes: 0, freeBytes: 10 << 30, complete: false };
      },
    }, () => clock.now);
    assert.equal((await usage.read('svc-a')).disk, null);
    clock.now += SAMPLE_EVERY_MS;
    assert.equal((await usage.read('svc-a')).disk, null);
    assert.equal(engine.calls.disk, 1, 'one scan a minute, failed or not');
    fail = false;
    clock.now += 60_000;
    const later = await usage.read('svc-a');
    assert.equal(engine.calls.disk, 2);
    assert.deepEqual(later.disk && { used: later.disk.usedBytes, complete: later.disk.complete }, { used: 0, complete: false });
  });
});
