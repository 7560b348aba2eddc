import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { eventually, type TestService } from '../../harness/service.ts';
import { MOVE_STALE_MS } from '../../lifecycle/move.ts';
import type { MoveRecord } from '../../store/index.ts';
import { svcCli } from './svc-cli.ts';

const run = promisify(execFile);

/** The engine of test host i, as a test reaches it on this machine (scripts/test-hosts.sh). */
export const hostDocker = (i: number, ...args: string[]) => run('docker', ['-H', `unix:///run/svc-host-${i}.sock`, ...args]);

/** A sandbox's volumes (names) and containers (ids) on test host i, one per line. */
export const volumesOn = async (i: number, name: string) => (await hostDocker(i, 'volume', 'ls', '-q', '--filter', `label=svc.sandbox=${name}`)).stdout.trim();
export const containersOn = async (i: number, name: string) => (await hostDocker(i, 'ps', '-aq', '--filter', `label=svc.sandbox=${name}`)).stdout.trim();

/** What the move tests ask of a test service: a script run in a sandbox, where a sandbox is placed, `npx svc …`. */
export function moveTools(t: () => TestService) {
  return {
    /** Runs `script` in the sandbox (sh -c) and answers its stdout; a non-zero exit fails the test. */
    exec: async (name: string, script: string) => {
      const r = await t().service.runtime.exec.run(name, ['sh', '-c', script]);
      assert.equal(r.exitCode, 0, r.stderr);
      return r.stdout.toString().trim();
    },
    placement: async (name: string) => (await t().service.store.hosts.placementOf(name)) ?? 'local',
    cli: (...args: string[]) => svcCli(t().config, ...args),
  };
}

/**
 * Writes the heartbeat of `sandbox`'s move back by MOVE_STALE_MS (and a second), as a mover that
 * stopped renewing it that long ago leaves it: a reconcile pass reads nothing else to take a move over
 * (lifecycle/move.ts, recoverMoves), so a test need not wait the 30 s. For a mover that is killed or
 * stopped: the write is the store's compare-and-set, tried again if a renewal sent just before the
 * stop lands first. Answers the move as it was.
 */
export async function ageMove(t: TestService, sandbox: string): Promise<MoveRecord> {
  return eventually(async () => {
    const found = (await t.service.store.hosts.moves()).find((m) => m.move.sandbox === sandbox);
    assert.ok(found, `a move of ${sandbox} is recorded`);
    const aged: MoveRecord = { ...found.move, heartbeat_at: new Date(Date.now() - MOVE_STALE_MS - 1000).toISOString() };
    return (await t.service.store.hosts.updateMove(found.raw, aged)) ? found.move : undefined;
  }, `the heartbeat of ${sandbox}'s move written back`, 10_000, 100);
}
