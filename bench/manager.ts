/**
 * Management tool figures (issue 11), each with a baseline measured in the same run:
 *   1. create of a manager sandbox until GET <manager_url>/api/status answers JSON through the edge
 *      (target under 10 s), next to the create of a default sandbox;
 *   2. a stack deploy through the tool (POST create/standalone/string) versus `docker compose up -d`
 *      of the same text straight on the sandbox's engine (through port 443, as a user runs it);
 *      target: the tool at least 80 % of compose's speed;
 *   3. memory of the idle tool (target under 60 MB), from the engine's stats of its container.
 * Medians over RUNS runs (3 by default).
 *
 *   npm run bench:manager      (SVC_MANAGER_IMAGE picks the tool's image)
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { EngineCli } from '../harness/engine-cli.ts';
import { startTestService } from '../harness/service.ts';

const run = promisify(execFile);
const RUNS = Number(process.env.RUNS ?? 3);
const FIXTURE = path.resolve('fixtures/busybox');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

async function main(): Promise<void> {
  const t = await startTestService(process.env.SVC_MANAGER_IMAGE ? { managerImage: process.env.SVC_MANAGER_IMAGE } : {});
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-manager-'));
  const clis: EngineCli[] = [];
  try {
    const user = await t.user('bench');
    const ca = (await t.api('GET', '/ca.pem', undefined)).body as string;
    const port = t.config.httpsPort;
    /** One request through the edge, the tool's name resolved to this machine. */
    const edge = (url: string, method = 'GET', headers: Record<string, string> = {}, body?: string) =>
      new Promise<{ status: number; type: string; text: string }>((resolve, reject) => {
        const u = new URL(url);
        const req = https.request({ host: '127.0.0.1', servername: u.hostname, port, path: u.pathname + u.search, method, ca, headers: { host: u.host, ...headers } }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), text }));
        });
        req.setTimeout(300_000, () => req.destroy(new Error('no answer in 300 s')));
        req.on('error', reject);
        req.end(body);
      });
    const statusJson = async (url: string) => {
      for (;;) {
        const r = await edge(`${url}/api/status`).catch(() => null);
        if (r?.status === 200 && r.type.includes('application/json')) return;
        await new Promise((res) => setTimeout(res, 50));
      }
    };

    // 1. create
    const plain: number[] = [];
    const manager: number[] = [];
    let last: { name: string; url: string; password: string; certs: any } | undefined;
    for (let i = 0; i < RUNS; i++) {
      let t0 = performance.now();
      const p = await t.api('POST', '/api/sandboxes', user.token, { name: `bp${i}-${t.config.redisPrefix}` });
      if (p.status !== 201) throw new Error(`default create: ${JSON.stringify(p.body)}`);
      plain.push(performance.now() - t0);
      t0 = performance.now();
      const m = await t.api('POST', '/api/sandboxes', user.token, { name: `bm${i}-${t.config.redisPrefix}`, template: 'manager' });
      if (m.status !== 201) throw new Error(`manager create: ${JSON.stringify(m.body)}`);
      await statusJson(m.body.extras.manager_url);
      manager.push(performance.now() - t0);
      last = { name: m.body.name, url: m.body.extras.manager_url, password: m.body.extras.manager_password, certs: m.body };
      await t.api('DELETE', `/api/sandboxes/${p.body.name}`, user.token);
      if (i < RUNS - 1) await t.api('DELETE', `/api/sandboxes/${m.body.name}`, user.token);
    }
    console.log(`create until /api/status answers JSON: ${secs(median(manager))} (default create ${secs(median(plain))}, ${(median(manager) / median(plain)).toFixed(1)}x; target < 10 s)`);

    // 2. deploy: the tool versus compose on the engine, alternating
    const sb = last!;
    const jwt = JSON.parse((await edge(`${sb.url}/api/auth`, 'POST', { 'content-type': 'application/json' }, JSON.stringify({ username: 'admin', password: sb.password }))).text).jwt as string;
    const auth = { authorization: `Bearer ${jwt}` };
    const tar = path.join(dir, 'ctx.tar');
    await run('tar', ['-C', FIXTURE, '-cf', tar, 'Dockerfile', '.build/rootfs']);
    const built = await new Promise<string>((resolve, reject) => {
      const u = new URL(`${sb.url}/api/endpoints/1/docker/build?t=bench-app:1`);
      const req = https.request({ host: '127.0.0.1', servername: u.hostname, port, path: u.pathname + u.search, method: 'POST', ca, headers: { host: u.host, ...auth, 'content-type': 'application/x-tar' } }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve(text));
      });
      req.on('error', reject);
      fs.createReadStream(tar).pipe(req);
    });
    if (!/Successfully tagged/.test(built)) throw new Error(`build failed: ${built.slice(-300)}`);
    const text = 'services:\n' + ['a', 'b', 'c'].map((s) => `  ${s}:\n    image: bench-app:1\n    init: true\n    command: ["sleep", "3600"]\n`).join('');
    const file = path.join(dir, 'compose.yml');
    fs.writeFileSync(file, text);
    const cli = new EngineCli(sb.certs.engine_access.host, '127.0.0.1', port, sb.certs);
    clis.push(cli);
    const viaTool: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      let t0 = performance.now();
      const r = await edge(`${sb.url}/api/stacks/create/standalone/string?endpointId=1`, 'POST', { ...auth, 'content-type': 'application/json' }, JSON.stringify({ name: `tool${i}`, stackFileContent: text }));
      if (r.status !== 200) throw new Error(`deploy through the tool: ${r.text}`);
      viaTool.push(performance.now() - t0);
      t0 = performance.now();
      await cli.docker(['compose', '-p', `direct${i}`, '-f', file, 'up', '-d'], { timeoutMs: 300_000 });
      direct.push(performance.now() - t0);
    }
    const speed = median(direct) / median(viaTool);
    console.log(`stack deploy (3 services): through the tool ${secs(median(viaTool))}, docker compose up -d on the engine ${secs(median(direct))}: the tool at ${(speed * 100).toFixed(0)} % of compose's speed (target >= 80 %)`);

    // 3. idle memory
    await new Promise((r) => setTimeout(r, 5_000));
    const stats = JSON.parse((await edge(`${sb.url}/api/endpoints/1/docker/containers/manager-manager-1/stats?stream=false`, 'GET', auth)).text);
    const m = stats.memory_stats;
    const inactive = m.stats?.inactive_file ?? m.stats?.total_inactive_file ?? 0;
    const mib = (m.usage - inactive) / 1024 / 1024;
    console.log(`idle tool memory: ${mib.toFixed(1)} MiB (${((mib * 1.048576) / 60 * 100).toFixed(0)} % of the 60 MB target)`);
  } finally {
    for (const cli of clis) cli.dispose();
    fs.rmSync(dir, { recursive: true, force: true });
    await t.close();
  }
}

main().then(() => process.exit(0), (err) => {
  console.error(err);
  process.exit(1);
});
