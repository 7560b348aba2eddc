/**
 * File transfer figures (issue 5): upload and download of a 100 MB file through the file routes
 * (PUT/GET files/content, with curl as the client) against `docker cp` into and out of the same
 * sandbox container (the baseline, measured in the same run), and the service's memory during
 * the upload. The service runs in this process and the clients are separate processes, so this
 * process's RSS is the service's. RUNS alternating runs of each; medians, with the best runs.
 *
 *   npm run bench:files            (RUNS=5, SIZE_MB=100 by default)
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { SANDBOX_CLI } from '../harness/sandbox-engine.ts';
import { startTestService } from '../harness/service.ts';

const run = promisify(execFile);
const RUNS = Number(process.env.RUNS ?? 5);
const SIZE = Number(process.env.SIZE_MB ?? 100) * 1024 * 1024;
const MiB = 1024 * 1024;

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return (performance.now() - t0) / 1000;
}
const sha = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const rate = (seconds: number) => `${(SIZE / MiB / seconds).toFixed(0)} MiB/s`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-files-'));
const t = await startTestService({ filesMaxUpload: SIZE });
try {
  const owner = await t.user('bench');
  const created = await t.api('POST', '/api/sandboxes', owner.token, { name: `bench-files-${t.config.redisPrefix}`, idle_timeout: '1h' });
  if (created.status !== 201) throw new Error(`create failed: ${JSON.stringify(created.body)}`);
  const name: string = created.body.name;
  const file = path.join(tmp, 'payload.bin');
  fs.writeFileSync(file, randomBytes(SIZE));
  const digest = sha(file);
  const url = (p: string) => `${t.url}/api/sandboxes/${name}/files/content?path=${encodeURIComponent(p)}`;
  const auth = ['-H', `Authorization: Bearer ${owner.token}`];
  const curl = (args: string[]) => run('curl', ['-sS', '--fail-with-body', ...auth, ...args], { maxBuffer: 1024 * 1024 });

  // warm up both paths once
  await run('docker', [...SANDBOX_CLI, 'cp', file, `${name}:/root/warm.bin`]);
  await curl(['-T', file, url('/root/warm-api.bin')]);

  const cpUp: number[] = [];
  const cpDown: number[] = [];
  const apiUp: number[] = [];
  const apiDown: number[] = [];
  // alternate the two paths so that both see the same machine load
  for (let i = 0; i < RUNS; i++) {
    cpUp.push(await time(() => run('docker', [...SANDBOX_CLI, 'cp', file, `${name}:/root/cp.bin`])));
    apiUp.push(await time(() => curl(['-T', file, url('/root/api.bin')])));
    const cpOut = path.join(tmp, `cp-out-${i}.bin`);
    cpDown.push(await time(() => run('docker', [...SANDBOX_CLI, 'cp', `${name}:/root/cp.bin`, cpOut])));
    fs.rmSync(cpOut);
    const apiOut = path.join(tmp, `api-out-${i}.bin`);
    apiDown.push(await time(() => curl(['-o', apiOut, url('/root/api.bin')])));
    if (i === 0 && sha(apiOut) !== digest) throw new Error('download differs from the upload');
    fs.rmSync(apiOut);
  }

  // memory: one more upload, untimed, with this process's RSS sampled every 20 ms (rss() is cheap)
  (globalThis as { gc?: () => void }).gc?.();
  await new Promise((r) => setTimeout(r, 500));
  const idle = process.memoryUsage.rss();
  let peak = idle;
  const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage.rss()); }, 20);
  await curl(['-T', file, url('/root/api.bin')]);
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage.rss());
  const inside = (await run('docker', [...SANDBOX_CLI, 'exec', name, 'sha256sum', '/root/api.bin'])).stdout.split(' ')[0];
  if (inside !== digest) throw new Error('upload differs from the file');

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const best = (xs: number[]) => Math.min(...xs);
  console.log(`\nfiles bench: ${SIZE / MiB} MiB file, ${RUNS} alternating runs each (median; best in brackets)`);
  for (const [label, api, cp] of [['upload  ', apiUp, cpUp], ['download', apiDown, cpDown]] as const) {
    const ratio = median(cp) / median(api);
    console.log(`${label}  API ${rate(median(api)).padStart(10)} [${rate(best(api))}]   docker cp ${rate(median(cp)).padStart(10)} [${rate(best(cp))}]   ` +
      `ratio ${(ratio * 100).toFixed(0)}% of docker cp [best/best ${(best(cp) / best(api) * 100).toFixed(0)}%]; target >= 80%: ${ratio >= 0.8 ? 'met' : 'MISSED'}`);
  }
  const grew = (peak - idle) / MiB;
  console.log(`service memory during upload: idle RSS ${(idle / MiB).toFixed(0)} MiB, peak ${(peak / MiB).toFixed(0)} MiB, +${grew.toFixed(1)} MiB (${((peak - idle) / SIZE * 100).toFixed(1)}% of the file); target < 100 MiB: ${grew < 100 ? 'met' : 'MISSED'}`);
  console.log(`all runs (s): API up ${apiUp.map((x) => x.toFixed(2))}, cp up ${cpUp.map((x) => x.toFixed(2))}, API down ${apiDown.map((x) => x.toFixed(2))}, cp down ${cpDown.map((x) => x.toFixed(2))}`);
} finally {
  await t.close();
  fs.rmSync(tmp, { recursive: true, force: true });
}
