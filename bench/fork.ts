/**
 * Fork figures (issue 35): a running sandbox with SIZE MB in its volumes (random bytes in /root beside its
 * inner engine's data and a built image), forked through the API; the time is from the POST until
 * `docker ps` answers through the fork's own engine address (the docker CLI with its certificates, over
 * the public TLS port). The baselines, alternating with it in the same run: `cp -a` on the host of the
 * same volumes' folders into a folder on the same file system (no pause, no container, no start; not
 * synced, as the fork's copy is not), and a plain create of an empty sandbox timed the same way (what a
 * fork adds to its copy). Each size RUNS times; the forks are removed between runs.
 *
 *   npm run bench:fork            (SIZES=100,1000 MB, RUNS=3 by default)
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { setQuotas } from '../accounts/quotas.ts';
import { EngineCli } from '../harness/engine-cli.ts';
import { sandboxDocker } from '../harness/sandbox-engine.ts';
import { startTestService } from '../harness/service.ts';
import { resourceNames } from '../lifecycle/names.ts';

const run = promisify(execFile);
const SIZES = (process.env.SIZES ?? '100,1000').split(',').map(Number);
const RUNS = Number(process.env.RUNS ?? 3);
const FIXTURE = path.resolve('fixtures/busybox');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const s = (x: number) => `${x.toFixed(2)} s`;

const t = await startTestService({ wakeHoldMs: 0 });
const docker = sandboxDocker();
const scratch = fs.mkdtempSync('/var/lib/svc-sandbox-docker/bench-fork-');
try {
  const owner = await t.user('bench');
  await setQuotas(t.service.store, `bench-${t.config.redisPrefix}`, { max_sandboxes: 100, max_running: 100 });
  const created = await t.api('POST', '/api/sandboxes', owner.token, { name: `bfk-${t.config.redisPrefix}`, idle_timeout: '1h' });
  if (created.status !== 201) throw new Error(`create failed: ${JSON.stringify(created.body)}`);
  const source: string = created.body.name;
  const cli = new EngineCli(created.body.engine_access.host, '127.0.0.1', t.config.httpsPort, created.body);
  await cli.docker(['build', '-q', '-t', 'bench-app:1', FIXTURE]);
  await cli.docker(['run', '-d', '--name', 'keeper', '--restart', 'unless-stopped', 'bench-app:1', 'sleep', '1d']);
  cli.dispose();
  const folders = await Promise.all(Object.values(resourceNames(source).volumes).map(async (v) => (await docker.getVolume(v).inspect()).Mountpoint));

  const rows: Array<{ mb: number; forks: number[]; cps: number[]; creates: number[] }> = [];
  /** POST (fork or create) until docker ps answers through the new sandbox's engine address; then it goes. */
  const timed = async (post: () => Promise<{ status: number; body: any }>): Promise<number> => {
    const t0 = performance.now();
    const made = await post();
    if (made.status !== 201) throw new Error(`failed: ${JSON.stringify(made.body)}`);
    const madeCli = new EngineCli(made.body.engine_access.host, '127.0.0.1', t.config.httpsPort, made.body);
    await madeCli.docker(['ps']);
    const took = (performance.now() - t0) / 1000;
    madeCli.dispose();
    await t.service.lifecycle.sleep(made.body.name, 'bench'); // its app watcher goes too (its address is the next one's)
    await t.service.runtime.takeDown(made.body.name);
    await t.service.runtime.removeVolumes(made.body.name);
    return took;
  };
  let n = 0;
  for (const size of SIZES) {
    const inner = await t.service.runtime.exec.run(source, ['sh', '-c', 'du -scb /root /home /srv /opt /var/lib/docker | tail -n1']);
    const rest = Number(/^(\d+)/.exec(inner.stdout.toString())![1]) - (await fileSize(source, '/root/payload'));
    const payload = Math.max(0, size * 1_000_000 - rest);
    await t.service.runtime.exec.run(source, ['sh', '-c', `head -c ${payload} /dev/urandom > /root/payload && sync`]);
    const row = { mb: size, forks: [] as number[], cps: [] as number[], creates: [] as number[] };
    for (let i = 0; i < RUNS; i++) {
      const target = path.join(scratch, String(i));
      const c0 = performance.now();
      await run('bash', ['-c', `mkdir -p ${target} && for f in ${folders.join(' ')}; do mkdir -p ${target}/$(basename $(dirname $f)) && cp -a $f/. ${target}/$(basename $(dirname $f))/; done`]);
      row.cps.push((performance.now() - c0) / 1000);
      fs.rmSync(target, { recursive: true, force: true });

      row.forks.push(await timed(() => t.api('POST', `/api/sandboxes/${source}/fork`, owner.token, { name: `bfk${++n}-${t.config.redisPrefix}` })));
      row.creates.push(await timed(() => t.api('POST', '/api/sandboxes', owner.token, { name: `bcr${++n}-${t.config.redisPrefix}`, idle_timeout: '1h' })));
    }
    rows.push(row);
  }
  console.log(`fork of a running sandbox (its inner engine with an image and a running container), POST until docker ps answers through the fork's engine address; baselines cp -a of the same volume folders on the host, and a create of an empty sandbox to docker ps; ${RUNS} runs each, alternating`);
  console.log(`load average: ${fs.readFileSync('/proc/loadavg', 'utf8').trim()} (machine shared with other work)`);
  for (const r of rows) {
    console.log(`  ${r.mb} MB: fork ${r.forks.map(s).join(', ')}; cp -a ${r.cps.map(s).join(', ')}; create ${r.creates.map(s).join(', ')}`);
    console.log(`    median fork ${s(median(r.forks))} = ${(median(r.forks) / median(r.cps)).toFixed(2)} x cp -a (${s(median(r.cps))}); fork minus cp -a ${s(median(r.forks) - median(r.cps))}, a create ${s(median(r.creates))}`);
  }
  if (rows.length > 1) {
    const [a, b] = [rows[0]!, rows.at(-1)!];
    const perGb = (xs: (r: typeof a) => number[]) => (median(xs(b)) - median(xs(a))) / ((b.mb - a.mb) / 1000);
    console.log(`growth from ${a.mb} to ${b.mb} MB: fork ${perGb((r) => r.forks).toFixed(2)} s per GB, cp -a ${perGb((r) => r.cps).toFixed(2)} s per GB`);
  }
} finally {
  fs.rmSync(scratch, { recursive: true, force: true });
  await t.close();
}

async function fileSize(sandbox: string, file: string): Promise<number> {
  const r = await t.service.runtime.exec.run(sandbox, ['sh', '-c', `stat -c %s ${file} 2>/dev/null || echo 0`]);
  return Number(r.stdout.toString().trim()) || 0;
}
