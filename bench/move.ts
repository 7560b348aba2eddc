/**
 * Move figures (issue 20): a sandbox with SIZE_MB of files (random bytes, in /root) beside its inner
 * engine's own data, moved between two test hosts (scripts/test-hosts.sh) by the move svc hosts
 * evacuate runs (lifecycle/move.ts: take down, tar through this process, check both sides' digests,
 * commit, remove the source's copy), back and forth RUNS times. The baseline, alternating with it in
 * the same run: a plain `tar | tar` of the same volumes between the same two engines with the docker
 * CLI (one pipe, no service in between, nothing checked), into scratch volumes.
 *
 *   npm run bench:move            (RUNS=3, SIZE_MB=100 by default)
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { startTestService } from '../harness/service.ts';
import { testHostsDown, testHostsUp } from '../harness/test-hosts.ts';
import type { MoveProgress } from '../lifecycle/index.ts';

const run = promisify(execFile);
const RUNS = Number(process.env.RUNS ?? 3);
const SIZE_MB = Number(process.env.SIZE_MB ?? 100);
const VOLUMES = ['root', 'home', 'srv', 'opt', 'docker'];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const s = (x: number) => `${x.toFixed(2)} s`;

const t = await startTestService({ wakeHoldMs: 0 });
const bash = (script: string) => run('bash', ['-c', `set -o pipefail; ${script}`], { maxBuffer: 1 << 22 });
try {
  await testHostsUp(2, t.config);
  await t.service.store.hosts.put({ ...((await t.service.store.hosts.get('local')) ?? { name: 'local', created_at: new Date().toISOString() }), drained_at: new Date().toISOString() });
  const owner = await t.user('bench');
  const name = `svc-bench-move-${t.config.redisPrefix}`;
  await t.service.store.hosts.place(name, 'test-1');
  const created = await t.api('POST', '/api/sandboxes', owner.token, { name, idle_timeout: '1h' });
  if (created.status !== 201) throw new Error(`create failed: ${JSON.stringify(created.body)}`);
  await t.service.runtime.exec.run(name, ['sh', '-c', `head -c ${SIZE_MB * 1_000_000} /dev/urandom > /root/payload`]);
  const du = await t.service.runtime.exec.run(name, ['sh', '-c', 'du -scb /root /home /srv /opt /var/lib/docker | tail -n1']);
  const volumeBytes = Number(/^(\d+)/.exec(du.stdout.toString())![1]);
  const hosts = t.service.runtime.hosts!;
  const mover = t.service.lifecycle.mover();

  const moves: Array<{ total: number; copy: number; verify: number; bytes: number }> = [];
  const baselines: number[] = [];
  let at = 1;
  for (let i = 0; i < RUNS; i++) {
    const to = at === 1 ? 2 : 1;
    // the baseline first, from the same volumes on the same engine, into scratch volumes on the other
    const vols = VOLUMES.map((v) => `${name}-${v}`);
    const scratch = VOLUMES.map((v) => `bench-copy-${t.config.redisPrefix}-${v}`);
    const src = `docker -H unix:///run/svc-host-${at}.sock`;
    const dst = `docker -H unix:///run/svc-host-${to}.sock`;
    const image = t.config.sandboxImage;
    const t0 = performance.now();
    await bash(`${src} run --rm --network none --entrypoint tar ${vols.map((v, k) => `-v ${v}:/v/${VOLUMES[k]}`).join(' ')} ${image} -C /v --numeric-owner --xattrs '--xattrs-include=*' -c --sparse -f - . `
      + `| ${dst} run --rm -i --network none --entrypoint tar ${scratch.map((v, k) => `-v ${v}:/v/${VOLUMES[k]}`).join(' ')} ${image} -C /v --numeric-owner --xattrs '--xattrs-include=*' -x -f -`);
    baselines.push((performance.now() - t0) / 1000);
    await bash(`${dst} volume rm ${scratch.join(' ')}`);

    const events: Array<MoveProgress & { at: number }> = [];
    const m0 = performance.now();
    const done = await hosts.move(mover, name, { to: `test-${to}`, onProgress: (p) => events.push({ ...p, at: performance.now() }) });
    const total = (performance.now() - m0) / 1000;
    const verifying = events.find((e) => e.phase === 'verifying');
    const firstByte = events.find((e) => e.phase === 'copying');
    moves.push({
      total,
      copy: verifying && firstByte ? (verifying.at - m0) / 1000 : NaN,
      verify: verifying ? (events.at(-1)!.at - verifying.at) / 1000 : NaN,
      bytes: done.bytes,
    });
    at = to;
  }
  const load = fs.readFileSync('/proc/loadavg', 'utf8').trim();
  console.log(`move of a sandbox with ${(volumeBytes / 1e6).toFixed(0)} MB in its volumes (${SIZE_MB} MB of it random), between two test hosts, ${RUNS} runs each way alternating`);
  console.log(`load average: ${load}`);
  console.log(`runs, move (total / up to the check / check and commit):`);
  for (const m of moves) console.log(`  ${s(m.total)}  (${s(m.copy)} / ${s(m.verify)}), ${(m.bytes / 1e6).toFixed(0)} MB through the service`);
  console.log(`runs, baseline tar | tar between the same engines: ${baselines.map(s).join(', ')}`);
  const ratio = median(moves.map((m) => m.total)) / median(baselines);
  console.log(`median: move ${s(median(moves.map((m) => m.total)))}, baseline ${s(median(baselines))}, ratio ${ratio.toFixed(2)}`);
} finally {
  await t.close();
  await testHostsDown();
}
