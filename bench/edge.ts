/**
 * Edge benchmark (design.md, "Tests": figures against a baseline measured in the same run).
 *
 *   npx tsx bench/edge.ts [--seconds 6] [--http-rounds 3] [--connections 50] [--passthrough-mb 200] [--rounds 4]
 *                         [--only http|passthrough] [--targets direct,edge,nginx] [--profile DIR] [--verbose]
 *                         [--load wrk|autocannon]
 *
 * 1. HTTP through the edge vs straight to the app vs nginx (TLS reverse proxy to the same app):
 *    requests/s with autocannon (N connections, keep-alive) and per-request latency (one
 *    connection, sequential requests, measured with hrtime so sub-millisecond differences show).
 * 2. Engine passthrough: bytes from a TLS server through `<sb>-engine.<domain>` vs a direct TLS
 *    connection to the same server.
 *
 * A bare Node TLS proxy (https + undici, nothing else) and a bare Node TCP pipe are measured too,
 * as the floor the platform sets, and socat as a TCP relay written in C (what leaving Node for the
 * passthrough bytes would reach).
 *
 * The service with HAProxy as its data plane (the default, docs/data-plane.md) is measured beside
 * the Node edge (SVC_DATA_PLANE=node, the reference): its CPU per request is Node's and HAProxy's together.
 *
 * Every server runs in its own process (app, edge, nginx with one worker). The load generator is
 * wrk (Debian's, one thread) pinned to the last CPU with every server pinned to the others, so
 * it neither caps the figures nor takes the proxies' CPU; without wrk (or with --load autocannon)
 * autocannon in this process. Traffic stays on loopback and every phase is bounded in time.
 * Targets (issue 21, for the HAProxy data plane): throughput >= 95 % of nginx, CPU per request
 * <= 1.25x nginx's, added p50 <= 0.1 ms over nginx, passthrough >= 95 % of direct TLS.
 */
import 'reflect-metadata';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { pino } from 'pino';
import { issueServerCert, loadOrCreateServiceCa } from '../edge/certs/service-ca.ts';
import type { EdgeBackend } from '../edge/backend.ts';
import { startEdge } from '../edge/index.ts';
import { freePort } from '../harness/ports.ts';
import { ensureNginx, ensureNginxStream, ensureTool, startNginxProxy, waitForPort, type NginxProxy } from './support/reference-tools.ts';

const SELF = fileURLToPath(import.meta.url);
const APP_HOST = 'svc-bench-web.localhost';
const ENGINE_HOST = 'svc-bench-engine.localhost';
const BODY = 'hello world\n';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** Children print one JSON line with their ports when ready. */
function announce(o: object): void {
  process.stdout.write(JSON.stringify(o) + '\n');
}

// ---------------------------------------------------------------------------------------------
// Roles run in child processes

async function roleApp(dir: string): Promise<void> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
    res.end(BODY);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  // A TLS server standing in for the inner dockerd: send N bytes on request ("N\n").
  const blob = tls.createServer({ cert: fs.readFileSync(path.join(dir, 'engine.pem')), key: fs.readFileSync(path.join(dir, 'engine-key.pem')) }, (s) => {
    s.once('data', (line: Buffer) => {
      let left = Number(line.toString().trim());
      const chunk = Buffer.alloc(64 * 1024, 'z');
      Readable.from(
        (function* () {
          while (left > 0) {
            const n = Math.min(left, chunk.length);
            left -= n;
            yield n === chunk.length ? chunk : chunk.subarray(0, n);
          }
        })(),
      ).pipe(s);
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => blob.listen(0, '127.0.0.1', r));
  announce({ http: (server.address() as net.AddressInfo).port, blob: (blob.address() as net.AddressInfo).port, pid: process.pid });
}

async function roleEdge(dir: string, appPort: number, blobPort: number, dataPlane: 'node' | 'haproxy'): Promise<void> {
  const backend: EdgeBackend = {
    resolveApp: async (label) =>
      label === 'svc-bench-web' ? { sandbox: 'svc-bench', status: 'running', target: { sandbox: 'svc-bench', host: '127.0.0.1', port: appPort } } : null,
    resolveSandbox: async (name) => (name === 'svc-bench' ? { status: 'running', address: '127.0.0.1' } : null),
    requestWake: async () => ({ running: Promise.resolve() }),
    recordActivity: () => {},
  };
  const edge = await startEdge({
    config: { domain: 'localhost', httpsPort: 0, httpPort: 0, dataDir: dir, tlsCertFile: undefined, tlsKeyFile: undefined },
    backend,
    logger: pino({ level: 'silent' }),
    host: '127.0.0.1',
    sandboxPorts: { engine: blobPort },
    dataPlane,
  });
  process.on('SIGTERM', () => void edge.close().then(() => process.exit(0))); // a clean exit writes the --cpu-prof profile
  announce({ https: edge.httpsPort, pid: process.pid, haproxy: edge.dataPlane?.pid ?? 0 });
}

/**
 * Reference point for HTTP: the smallest Node TLS reverse proxy (https server + undici, no
 * routing, no header rules, no activity): what the platform costs before the edge adds anything.
 */
async function roleNodeProxy(dir: string, appPort: number): Promise<void> {
  const { Pool } = await import('undici');
  const pool = new Pool(`http://127.0.0.1:${appPort}`, { pipelining: 1 });
  const server = https.createServer({ cert: fs.readFileSync(path.join(dir, 'web.pem')), key: fs.readFileSync(path.join(dir, 'web-key.pem')) }, (req, res) => {
    const headers: string[] = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (!/^(connection|keep-alive)$/i.test(req.rawHeaders[i])) headers.push(req.rawHeaders[i], req.rawHeaders[i + 1]); // undici refuses these
    }
    pool.dispatch(
      { path: req.url ?? '/', method: 'GET', headers, body: null },
      {
        onRequestStart: () => {}, // marks the handler as undici's new API
        onResponseStart: (_c, status, headers, msg) => void res.writeHead(status, msg, headers as http.OutgoingHttpHeaders),
        onResponseData: (c, chunk) => {
          if (!res.write(chunk)) {
            c.pause();
            res.once('drain', () => c.resume());
          }
        },
        onResponseEnd: () => void res.end(),
        onResponseError: () => void res.destroy(),
      },
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  announce({ port: (server.address() as net.AddressInfo).port, pid: process.pid });
}

/** Reference point: the simplest Node TCP relay (net + pipe), nothing else. */
async function rolePipe(blobPort: number): Promise<void> {
  const server = net.createServer({ allowHalfOpen: true }, (c) => {
    const u = net.connect({ port: blobPort, host: '127.0.0.1', allowHalfOpen: true });
    c.pipe(u);
    u.pipe(c);
    c.on('error', () => u.destroy());
    u.on('error', () => c.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  announce({ port: (server.address() as net.AddressInfo).port, pid: process.pid });
}

/** socat relaying a free loopback port to `targetPort` (256 KiB buffers); null without socat. */
async function startSocatRelay(targetPort: number): Promise<number | null> {
  const bin = ensureTool('socat', 'socat', '/usr/bin/socat');
  if (!bin) return null;
  const port = await freePort();
  void child(bin, ['-b', '262144', `TCP-LISTEN:${port},fork,reuseaddr,bind=127.0.0.1`, `TCP:127.0.0.1:${targetPort}`], false);
  await waitForPort(port);
  return port;
}

// ---------------------------------------------------------------------------------------------
// Orchestration

const children: ChildProcess[] = [];

function child(cmd: string, args: string[], waitForJson: boolean): Promise<Record<string, number>> {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(p);
  if (!waitForJson) return Promise.resolve({});
  return new Promise((resolve, reject) => {
    let out = '';
    p.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)));
    });
    p.once('exit', (code) => reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}`)));
  });
}

function tsxChild(...args: string[]) {
  return child(process.execPath, [...nodeFlags(args), '--import', 'tsx', SELF, ...args], true);
}

/** `--profile DIR` profiles the edge process (node --cpu-prof). */
function nodeFlags(args: string[]): string[] {
  const i = process.argv.indexOf('--profile');
  if (i < 0 || args[1] !== 'edge') return [];
  return ['--cpu-prof', `--cpu-prof-dir=${path.resolve(process.argv[i + 1])}`];
}

interface Target {
  name: string;
  port: number;
  tls: boolean;
  /** Processes doing the serving, for CPU time per request (Linux /proc). */
  pids: () => number[];
}

/** utime + stime of the processes, in ms (clock ticks are 10 ms). */
function cpuMs(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      /* gone */
    }
  }
  return ticks * 10;
}

function childPids(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The load generator's CPU, apart from every server's (pinned in main). */
const LOAD_CPU = os.cpus().length - 1;

/** wrk, one thread, on LOAD_CPU; latencies in ms. */
function wrk(t: Target, seconds: number, connections: number) {
  const url = t.tls ? `https://${APP_HOST}:${t.port}/` : `http://127.0.0.1:${t.port}/`;
  const out = execFileSync('taskset', ['-c', String(LOAD_CPU), 'wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '--latency', ...(t.tls ? [] : ['-H', `Host: ${APP_HOST}`]), url], { encoding: 'utf8' });
  const num = (re: RegExp) => Number(re.exec(out)?.[1] ?? NaN);
  const ms = (q: string) => {
    const m = new RegExp(`^\\s*${q}%\\s+([\\d.]+)(us|ms|s)$`, 'm').exec(out);
    return m ? Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1) : NaN;
  };
  const total = num(/(\d+) requests in/);
  const errors = num(/Non-2xx or 3xx responses: (\d+)/) || 0;
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return { rps: num(/Requests\/sec:\s+([\d.]+)/), total, p50: ms('50'), p99: ms('99'), errors: errors + (socketErrors ? socketErrors.slice(1).reduce((a, x) => a + Number(x), 0) : 0) };
}

const useWrk = !process.argv.includes('--load') ? ensureTool('wrk', 'wrk', '/usr/bin/wrk') !== null : process.argv[process.argv.indexOf('--load') + 1] === 'wrk';

async function throughput(t: Target, seconds: number, connections: number) {
  const pids = t.pids();
  const cpu0 = cpuMs(pids);
  const each0 = pids.map((p) => cpuMs([p]));
  if (useWrk) {
    const r = wrk(t, seconds, connections);
    const each = pids.map((p, i) => ((cpuMs([p]) - each0[i]) * 1000) / Math.max(1, r.total));
    return { rps: r.rps, p50: r.p50, p99: r.p99, errors: r.errors, cpuUsPerReq: ((cpuMs(pids) - cpu0) * 1000) / Math.max(1, r.total), each };
  }
  const r = await autocannon({
    url: `${t.tls ? 'https' : 'http'}://127.0.0.1:${t.port}/`,
    connections,
    duration: seconds,
    headers: { host: APP_HOST },
    ...(t.tls ? { servername: APP_HOST } : {}),
  } as autocannon.Options);
  const cpuUsPerReq = ((cpuMs(pids) - cpu0) * 1000) / Math.max(1, r.requests.total);
  const each = pids.map((p, i) => ((cpuMs([p]) - each0[i]) * 1000) / Math.max(1, r.requests.total));
  return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, errors: r.errors + r.non2xx, cpuUsPerReq, each };
}

/** One request, to check that a target really reaches the app (and not, say, a waiting page). */
function fetchOnce(t: Target): Promise<string> {
  const mod = t.tls ? https : http;
  return new Promise((resolve, reject) => {
    mod
      .get({ host: '127.0.0.1', port: t.port, path: '/', headers: { host: APP_HOST }, servername: APP_HOST, rejectUnauthorized: false, agent: false }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
}

/** One keep-alive connection, sequential requests: per-request latency in microseconds. */
async function latency(t: Target, seconds: number) {
  const agent = t.tls ? new https.Agent({ keepAlive: true, maxSockets: 1, rejectUnauthorized: false, servername: APP_HOST }) : new http.Agent({ keepAlive: true, maxSockets: 1 });
  const mod = t.tls ? https : http;
  const one = () =>
    new Promise<number>((resolve, reject) => {
      const t0 = process.hrtime.bigint();
      mod
        .get({ host: '127.0.0.1', port: t.port, path: '/', agent, headers: { host: APP_HOST } }, (res) => {
          res.resume();
          res.on('end', () => resolve(Number(process.hrtime.bigint() - t0) / 1000));
        })
        .on('error', reject);
    });
  for (let i = 0; i < 200; i++) await one(); // warm-up (JIT, TLS session, upstream keep-alive)
  const samples: number[] = [];
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) samples.push(await one());
  agent.destroy();
  samples.sort((a, b) => a - b);
  const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))];
  return { n: samples.length, p50: q(0.5), p99: q(0.99) };
}

async function download(port: number, bytes: number, ca: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let got = 0;
    const s = tls.connect({ host: '127.0.0.1', port, servername: ENGINE_HOST, ca }, () => s.write(`${bytes}\n`));
    s.on('data', (c: Buffer) => (got += c.length));
    s.on('end', () => {
      s.destroy();
      if (got !== bytes) return reject(new Error(`got ${got} of ${bytes} bytes`));
      resolve((bytes / (1024 * 1024)) / (Number(process.hrtime.bigint() - t0) / 1e9));
    });
    s.on('error', reject);
  });
}

async function main(): Promise<void> {
  const seconds = arg('seconds', 6);
  const connections = arg('connections', 50);
  const passMb = arg('passthrough-mb', 200);
  const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : null;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-edge-'));
  const cleanup = () => {
    for (const c of children) c.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.on('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  try {
    // Certificates: one CA; the edge makes its own from it, nginx and the engine stand-in get theirs.
    const ca = await loadOrCreateServiceCa(dir, 'localhost');
    for (const [file, name] of [['web', APP_HOST], ['engine', ENGINE_HOST]] as const) {
      const c = await issueServerCert(ca, [name]);
      fs.writeFileSync(path.join(dir, `${file}.pem`), c.certPem + ca.certPem);
      fs.writeFileSync(path.join(dir, `${file}-key.pem`), c.keyPem, { mode: 0o600 });
    }
    const app = await tsxChild('--role', 'app', dir);
    const edge = await tsxChild('--role', 'edge', dir, String(app.http), String(app.blob), 'node');
    const dp = await tsxChild('--role', 'edge', dir, String(app.http), String(app.blob), 'haproxy');
    const nginxBin = ensureNginx();
    const nginx = nginxBin
      ? await startNginxProxy(nginxBin, { dir, serverName: APP_HOST, certFile: path.join(dir, 'web.pem'), keyFile: path.join(dir, 'web-key.pem'), upstream: app.http })
      : null;
    if (nginx) children.push(nginx.process);
    // nginx doing the service's job on one port (SNI read, TLS relayed to the TLS listener): what
    // any data plane pays for engines' end-to-end TLS sharing the port with apps, nginx included
    const streamModule = nginxBin ? ensureNginxStream() : null;
    const nginxSplit = nginxBin && streamModule
      ? await startNginxProxy(nginxBin, {
        dir: path.join(dir, 'split'), serverName: APP_HOST, certFile: path.join(dir, 'web.pem'), keyFile: path.join(dir, 'web-key.pem'), upstream: app.http, onePortSplit: { streamModule },
      })
      : null;
    if (nginxSplit) children.push(nginxSplit.process);
    const nodeProxy = await tsxChild('--role', 'node-proxy', dir, String(app.http));

    const nginxPids = (n: NginxProxy | null) => (n ? [n.process.pid!, ...childPids(n.process.pid!)] : []);
    const serverPids = () => [app.pid, edge.pid, dp.pid, dp.haproxy, nodeProxy.pid, ...nginxPids(nginx), ...nginxPids(nginxSplit)];
    if (useWrk) {
      // every thread of every server on the CPUs below LOAD_CPU, wrk alone on LOAD_CPU
      for (const pid of serverPids()) execFileSync('taskset', ['-apc', `0-${Math.max(0, LOAD_CPU - 1)}`, String(pid)], { stdio: 'ignore' });
    }
    console.log(`# edge bench: ${os.cpus().length} CPUs, node ${process.version}, ${seconds} s per load run, ${connections} connections, ` +
      `load ${useWrk ? `wrk -t1 on CPU ${LOAD_CPU}, servers on CPU 0-${Math.max(0, LOAD_CPU - 1)}` : 'autocannon (this process)'}; load average at start ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    const targets: Target[] = [
      { name: 'direct (plain HTTP)', port: app.http, tls: false, pids: () => [app.pid] },
      { name: 'edge (TLS)', port: edge.https, tls: true, pids: () => [edge.pid] },
      { name: 'service+HAProxy (TLS)', port: dp.https, tls: true, pids: () => [dp.pid, dp.haproxy] },
      ...(nginx ? [{ name: 'nginx (TLS)', port: nginx.port, tls: true, pids: () => nginxPids(nginx) }] : []),
      ...(nginxSplit ? [{ name: 'nginx one-port split', port: nginxSplit.port, tls: true, pids: () => nginxPids(nginxSplit) }] : []),
      { name: 'bare Node proxy (TLS)', port: nodeProxy.port, tls: true, pids: () => [nodeProxy.pid] },
    ];
    const pick = process.argv.includes('--targets') ? process.argv[process.argv.indexOf('--targets') + 1].split(',') : null;
    if (pick) targets.splice(0, targets.length, ...targets.filter((t) => pick.some((p) => t.name.startsWith(p))));
    if (process.argv.includes('--verbose')) console.log(`# pids: app ${app.pid}, edge ${edge.pid}${nginx ? `, nginx ${nginx.process.pid!}` : ''}`);
    for (const t of targets) {
      const body = await fetchOnce(t);
      if (body !== BODY) throw new Error(`${t.name} answered ${JSON.stringify(body.slice(0, 80))} instead of the app`);
    }
    type Result = { rps: number; p50: number; p99: number; errors: number; cpuUsPerReq: number; each?: number[]; lat: { n: number; p50: number; p99: number } };
    const results: Record<string, Result> = {};
    // Rounds interleave the targets, so a burst of load from elsewhere hits them alike; medians kept.
    const httpRounds = arg('http-rounds', 3);
    const runs: Record<string, Result[]> = {};
    for (let round = 0; round < httpRounds; round++) {
      for (const t of only === 'passthrough' ? [] : targets) {
        // a connection of its own first: the HAProxy service mirrors a route Node resolved (again,
        // if it went unused for a while), and the measured connections then go to HAProxy
        await fetchOnce(t);
        await new Promise((r) => setTimeout(r, 50));
        const lat = await latency(t, Math.max(3, Math.floor(seconds / 2)));
        const thr = await throughput(t, seconds, connections);
        (runs[t.name] ??= []).push({ ...thr, lat });
      }
    }
    const median = (xs: number[]) => {
      const o = [...xs].sort((a, b) => a - b);
      const m = Math.floor(o.length / 2);
      return o.length % 2 ? o[m] : (o[m - 1] + o[m]) / 2;
    };
    for (const [name, rs] of Object.entries(runs)) {
      const r: Result = {
        rps: median(rs.map((x) => x.rps)),
        p50: median(rs.map((x) => x.p50)),
        p99: median(rs.map((x) => x.p99)),
        errors: rs.reduce((a, x) => a + x.errors, 0),
        cpuUsPerReq: median(rs.map((x) => x.cpuUsPerReq)),
        each: rs[0].each?.map((_, i) => median(rs.map((x) => x.each![i]))),
        lat: { n: median(rs.map((x) => x.lat.n)), p50: median(rs.map((x) => x.lat.p50)), p99: median(rs.map((x) => x.lat.p99)) },
      };
      results[name] = r;
      console.log(
        `${name.padEnd(22)} ${r.rps.toFixed(0).padStart(7)} req/s, ${r.cpuUsPerReq.toFixed(0).padStart(4)} us CPU/req  (under load p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, errors ${r.errors})` +
          `   1 conn: p50 ${r.lat.p50.toFixed(0)} us, p99 ${r.lat.p99.toFixed(0)} us` +
          (name.startsWith('service+HAProxy') && r.each ? `  [CPU/req: Node ${r.each[0].toFixed(1)} us, HAProxy ${r.each[1].toFixed(1)} us]` : ''),
      );
    }

    // Passthrough throughput: alternate direct and edge rounds after a warm-up of each, keep the
    // best of each (the first transfers on a fresh process run well below speed: JIT, TCP windows).
    let direct = 0;
    let through = 0;
    let piped = 0;
    let relayed = 0;
    let haproxied = 0;
    const rounds = arg('rounds', 4);
    if (only !== 'http') {
      // bulk bytes: every process may use every CPU again (as socat and the pipe, started now, do)
      if (useWrk) for (const pid of serverPids()) execFileSync('taskset', ['-apc', `0-${os.cpus().length - 1}`, String(pid)], { stdio: 'ignore' });
      const pipe = await tsxChild('--role', 'pipe', String(app.blob));
      const socat = await startSocatRelay(app.blob);
      const mb = passMb * 1024 * 1024;
      // the first engine connection to the HAProxy service goes through Node, which mirrors the route
      for (const port of [app.blob, edge.https, dp.https, pipe.port, ...(socat ? [socat] : [])]) await download(port, mb, ca.certPem);
      for (let i = 0; i < rounds; i++) {
        direct = Math.max(direct, await download(app.blob, mb, ca.certPem));
        through = Math.max(through, await download(edge.https, mb, ca.certPem));
        piped = Math.max(piped, await download(pipe.port, mb, ca.certPem));
        if (socat) relayed = Math.max(relayed, await download(socat, mb, ca.certPem));
        haproxied = Math.max(haproxied, await download(dp.https, mb, ca.certPem));
      }
      console.log(
        `passthrough ${passMb} MB: direct TLS ${direct.toFixed(0)} MB/s, through the edge ${through.toFixed(0)} MB/s, ` +
          `through a bare Node pipe ${piped.toFixed(0)} MB/s${socat ? `, through socat ${relayed.toFixed(0)} MB/s` : ''}, ` +
          `through the service+HAProxy ${haproxied.toFixed(0)} MB/s (best of ${rounds} after a warm-up)`,
      );
    }

    console.log('');
    if (only !== 'passthrough' && !pick) {
      const d = results['direct (plain HTTP)'];
      const e = results['edge (TLS)'];
      const n = results['nginx (TLS)'] ?? null;
      const addedP50 = (e.lat.p50 - d.lat.p50) / 1000;
      console.log(`added p50 latency (edge - direct, 1 connection): ${addedP50.toFixed(3)} ms   target < 1 ms: ${addedP50 < 1 ? 'ok' : 'MISSED'}`);
      if (n) {
        // Ratio per round (edge and nginx ran back to back), then the median: other load on the
        // machine comes and goes, and hits neighbours in time alike.
        const er = runs['edge (TLS)'];
        const nr = runs['nginx (TLS)'];
        const perRound = er.map((x, i) => x.rps / nr[i].rps);
        const ratio = median(perRound);
        if (perRound.length > 1) console.log(`throughput edge / nginx per round: ${perRound.map((x) => `${(x * 100).toFixed(0)} %`).join(', ')}`);
        console.log(`added p50 latency (nginx - direct, 1 connection): ${((n.lat.p50 - d.lat.p50) / 1000).toFixed(3)} ms`);
        console.log(`throughput edge / nginx: ${(ratio * 100).toFixed(0)} %   target >= 70 %: ${ratio >= 0.7 ? 'ok' : 'MISSED'}`);
        console.log(`CPU per request nginx / edge: ${((n.cpuUsPerReq / e.cpuUsPerReq) * 100).toFixed(0)} % (the same figure measured by CPU time, less sensitive to other load on the machine)`);
      } else {
        console.log('throughput edge / nginx: nginx not available');
      }
      console.log(`throughput edge / direct: ${((e.rps / d.rps) * 100).toFixed(0)} %`);
      const h = results['service+HAProxy (TLS)'];
      if (h && n) {
        const hr = median(runs['service+HAProxy (TLS)'].map((x, i) => x.rps / runs['nginx (TLS)'][i].rps));
        const cpu = h.cpuUsPerReq / n.cpuUsPerReq;
        const added = (h.lat.p50 - n.lat.p50) / 1000;
        console.log(`service+HAProxy / nginx: throughput ${(hr * 100).toFixed(0)} % (target >= 95 %: ${hr >= 0.95 ? 'ok' : 'MISSED'}), ` +
          `CPU per request ${cpu.toFixed(2)}x (target <= 1.25x: ${cpu <= 1.25 ? 'ok' : 'MISSED'}), p50 over nginx ${added.toFixed(3)} ms (target <= 0.1 ms: ${added <= 0.1 ? 'ok' : 'MISSED'}), ` +
          `p50 over direct ${((h.lat.p50 - d.lat.p50) / 1000).toFixed(3)} ms`);
        const s = results['nginx one-port split'];
        if (s) {
          console.log(`CPU per request, nginx one-port split / nginx: ${(s.cpuUsPerReq / n.cpuUsPerReq).toFixed(2)}x (the price of one port, paid by nginx too); ` +
            `service+HAProxy / nginx one-port split: ${(h.cpuUsPerReq / s.cpuUsPerReq).toFixed(2)}x`);
        }
      }
      const b = results['bare Node proxy (TLS)'];
      if (b) console.log(`CPU per request bare Node proxy / edge: ${((b.cpuUsPerReq / e.cpuUsPerReq) * 100).toFixed(0)} % (what routing, header rules, activity and pages cost on top of Node)`);
    }
    if (only !== 'http') {
      const pr = through / direct;
      console.log(`passthrough edge / direct: ${(pr * 100).toFixed(0)} %   target >= 90 %: ${pr >= 0.9 ? 'ok' : 'MISSED'}`);
      console.log(`passthrough edge / bare Node pipe: ${((through / piped) * 100).toFixed(0)} %`);
      if (relayed) console.log(`passthrough socat (C relay) / direct: ${((relayed / direct) * 100).toFixed(0)} %; edge / socat: ${((through / relayed) * 100).toFixed(0)} %`);
      const hp = haproxied / direct;
      console.log(`passthrough service+HAProxy / direct: ${(hp * 100).toFixed(0)} %   target >= 95 %: ${hp >= 0.95 ? 'ok' : 'MISSED'}` +
        `${relayed ? `; service+HAProxy / socat: ${((haproxied / relayed) * 100).toFixed(0)} %` : ''}`);
    }
    console.log(`# load average at the end: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  } finally {
    cleanup();
  }
}

const role = process.argv.indexOf('--role');
if (role > 0) {
  const [name, ...rest] = process.argv.slice(role + 1);
  if (name === 'app') await roleApp(rest[0]);
  else if (name === 'edge') await roleEdge(rest[0], Number(rest[1]), Number(rest[2]), rest[3] === 'haproxy' ? 'haproxy' : 'node');
  else if (name === 'pipe') await rolePipe(Number(rest[0]));
  else if (name === 'node-proxy') await roleNodeProxy(rest[0], Number(rest[1]));
  else throw new Error(`unknown role ${name}`);
} else {
  await main();
}
