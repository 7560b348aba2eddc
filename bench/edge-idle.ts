/**
 * What the edge costs while nobody uses it, with N app routes in HAProxy's maps (issue 33: the route
 * mirror resolved every mirrored route again every 100 ms; now the backend's notices move the maps,
 * and a pass every EdgeTimeouts.routeRecheckMs catches what nobody tells).
 *
 *   npm run bench:edge-idle -- [--apps 500] [--seconds 20] [--rounds 2] [--baseline <git revision>]
 *
 * Each round starts an edge with HAProxy as its data plane in a child process, for this tree and,
 * with --baseline, for that revision's edge/ and core/ (extracted with `git archive` into a folder
 * under /tmp, beside node_modules of this tree), one after the other. Every child serves N app
 * names (one small app behind them all, the backend answering from memory), sends one request to
 * each through the edge so that each route is in HAProxy's map, checks that the map holds them all,
 * then sits idle and reports the CPU time its Node process and HAProxy used per second of idle
 * (HAProxy's from /proc, in 10-ms ticks). This tree is also read with no routes: the idle floor
 * (the activity poll, timers), which the routes' share is counted over. Printed: the median per
 * reading, and this tree's over the baseline's.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';

const SELF = fileURLToPath(import.meta.url);
const HERE = path.resolve(path.dirname(SELF), '..');
const DOMAIN = 'idle.test';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}

interface Reading {
  /** CPU ms per second of idle: the service's Node process, HAProxy. */
  node: number;
  haproxy: number;
  routes: number;
}

/** One edge from the tree at `tree`, N routes in HAProxy's maps, idle for `seconds`. */
async function child(tree: string, apps: number, seconds: number): Promise<Reading> {
  const { startEdge } = await import(path.join(tree, 'edge/index.ts'));
  const { RuntimeApi } = await import(path.join(tree, 'edge/dataplane/runtime-api.ts'));
  const app = http.createServer((_req, res) => res.end('idle\n'));
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const port = (app.address() as { port: number }).port;
  const sandboxOf = (label: string) => label.replace(/-web$/, '');
  const backend = {
    async resolveApp(label: string) {
      const sandbox = sandboxOf(label);
      return { sandbox, status: 'running', target: { sandbox, host: '127.0.0.1', port } };
    },
    async resolveSandbox() {
      return { status: 'running', address: '127.0.0.1' };
    },
    async requestWake() {
      return { running: Promise.resolve() };
    },
    recordActivity() {},
  };
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-edge-idle-'));
  const edge = await startEdge({
    config: { domain: DOMAIN, httpsPort: 0, httpPort: 0, dataDir, tlsCertFile: undefined, tlsKeyFile: undefined },
    backend,
    host: '127.0.0.1',
    dataPlane: 'haproxy',
    logger: pino({ level: 'silent' }),
  });
  try {
    const agent = new https.Agent({ keepAlive: false, rejectUnauthorized: false });
    for (let i = 0; i < apps; i++) {
      const host = `svc-idle${i}-web.${DOMAIN}`;
      await new Promise<void>((resolve, reject) => {
        https.get({ host: '127.0.0.1', port: edge.httpsPort, servername: host, headers: { host }, agent, path: '/' }, (res) => {
          res.resume();
          res.on('end', resolve);
        }).on('error', reject);
      });
    }
    const api = new RuntimeApi(edge.dataPlane.files.adminSocket);
    const routes = async () => (await api.send(`show map ${edge.dataPlane.files.appsMap}`)).split('\n').filter((l: string) => l.includes(DOMAIN)).length;
    for (let i = 0; i < 100 && (await routes()) < apps; i++) await new Promise((r) => setTimeout(r, 50));
    const inMap = await routes();
    // settle: the requests' own work (certificates, writes) is done before the idle window
    await new Promise((r) => setTimeout(r, 2_000));
    const haproxyCpu = () => {
      const f = fs.readFileSync(`/proc/${edge.dataPlane.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime + stime, in clock ticks of 10 ms
    };
    const node0 = process.cpuUsage();
    const hap0 = haproxyCpu();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const took = (performance.now() - t0) / 1000;
    const node = process.cpuUsage(node0);
    return { node: (node.user + node.system) / 1000 / took, haproxy: (haproxyCpu() - hap0) / took, routes: inMap };
  } finally {
    await edge.close();
    app.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The revision's edge/ and core/ (what the edge imports) in a folder of their own, beside this tree's node_modules. */
function baselineTree(revision: string): string {
  const sha = execFileSync('git', ['rev-parse', '--short', revision], { cwd: HERE, encoding: 'utf8' }).trim();
  const dir = path.join(os.tmpdir(), `svc-edge-idle-${sha}`);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir);
  const tar = execFileSync('git', ['archive', sha, 'edge', 'core', 'package.json'], { cwd: HERE, maxBuffer: 64 * 1024 * 1024 });
  execFileSync('tar', ['-x', '-C', dir], { input: tar });
  fs.symlinkSync(path.join(HERE, 'node_modules'), path.join(dir, 'node_modules'));
  return dir;
}

function runChild(tree: string, apps: number, seconds: number): Promise<Reading> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...process.execArgv, SELF, '--child', tree, '--apps', String(apps), '--seconds', String(seconds)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').at(-1)!) as Reading) : reject(new Error(`child for ${tree} exited ${code}`))));
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const childTree = arg('child');
const apps = Number(arg('apps') ?? 500);
const seconds = Number(arg('seconds') ?? 20);
if (childTree) {
  process.stdout.write(JSON.stringify(await child(childTree, apps, seconds)) + '\n');
  process.exit(0);
}
const rounds = Number(arg('rounds') ?? 2);
const revision = arg('baseline');
/** What is read each round: this tree with its routes and with none (the idle floor: timers, the activity poll), and the baseline. */
const runs: Array<{ name: string; dir: string; apps: number }> = [
  { name: 'this tree', dir: HERE, apps },
  { name: 'this tree, no routes', dir: HERE, apps: 0 },
];
if (revision) runs.unshift({ name: `baseline ${revision}`, dir: baselineTree(revision), apps });
const readings = new Map<string, Reading[]>(runs.map((r) => [r.name, []]));
console.log(`edge idle: ${apps} app routes in HAProxy's maps, ${seconds} s idle per reading, ${rounds} rounds; load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
for (let round = 0; round < rounds; round++) {
  for (const run of runs) {
    const r = await runChild(run.dir, run.apps, seconds);
    readings.get(run.name)!.push(r);
    console.log(`  round ${round + 1} ${run.name}: Node ${r.node.toFixed(2)} ms CPU/s, HAProxy ${r.haproxy.toFixed(2)} ms CPU/s, ${r.routes} routes in the map`);
  }
}
const summary = new Map([...readings].map(([name, rs]) => [name, { node: median(rs.map((r) => r.node)), haproxy: median(rs.map((r) => r.haproxy)) }]));
for (const [name, s] of summary) console.log(`${name}: Node ${s.node.toFixed(2)} ms CPU per s idle, HAProxy ${s.haproxy.toFixed(2)} (median)`);
const floor = summary.get('this tree, no routes')!.node;
console.log(`the routes' share of Node's idle CPU (over the no-routes floor): this tree ${(summary.get('this tree')!.node - floor).toFixed(2)} ms/s`);
if (revision) {
  const now = summary.get('this tree')!;
  const before = summary.get(`baseline ${revision}`)!;
  console.log(`  baseline ${(before.node - floor).toFixed(2)} ms/s`);
  console.log(`ratio (this tree / baseline): Node ${(now.node / before.node).toFixed(2)}×, Node + HAProxy ${((now.node + now.haproxy) / (before.node + before.haproxy)).toFixed(2)}×`);
}
console.log(`load average after: ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
if (revision) fs.rmSync(runs[0]!.dir, { recursive: true, force: true });
