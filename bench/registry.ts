/**
 * bench/registry: the registry front and the scanner against baselines measured in the same run.
 *
 *  1. push and pull of a 200 MB blob through the service (with HAProxy: TLS ends in HAProxy, the
 *     front decides per request, HAProxy carries the bytes to the upstream; with the Node edge:
 *     edge TLS → front → upstream) versus
 *     straight to the upstream registry over its unix socket (plain HTTP; target: ≥ 90% of direct
 *     throughput), and versus the upstream behind a bare Node TLS relay in this process (the same
 *     TLS work the edge does, and nothing else: what "through the front" can reach at best), and
 *     versus nginx as a TLS reverse proxy to the upstream (one worker, bodies streamed both ways
 *     through 256 KiB buffers: what the usual C proxy reaches for the same TLS hop on this
 *     machine; target: the service ≥ 95% of it);
 *  2. scan throughput on a real Debian root filesystem layer (the sandbox image's debootstrap
 *     layer, gzip) versus plain `gunzip` of the same blob (target: ≥ 70% of gunzip's speed; the
 *     scanner alone, with a text tree against gitleaks too: bench/scanner.ts);
 *  3. time from the end of a 200 MB image push to its finished report (target: < 5 s).
 *
 * Usage: npm run bench:registry [-- --mb 200 --runs 3 --transfer-only]
 *        SVC_DATA_PLANE=node npm run bench:registry …   the service with the Node edge instead of HAProxy, same references
 */
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import { issueServerCert, loadOrCreateServiceCa, type SealedKeys } from '../edge/certs/service-ca.ts';
import { scanLayer } from '../scanner/layer-reader.ts';
import { startTestService } from '../harness/service.ts';
import { OciClient, sha256 } from '../harness/oci.ts';
import { finishedScan, registryPusher, tagUploadedLayer } from '../harness/registry-push.ts';
import { debianLayer } from './support/debian-layer.ts';
import { ensureNginx, ensureNginxStream, startNginxProxy, type NginxProxy } from './support/reference-tools.ts';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const MB = arg('mb', 200);
const RUNS = arg('runs', 3);
const TRANSFER_ONLY = process.argv.includes('--transfer-only');
const curl = async (args: string[]) => {
  const { stdout, stderr } = await promisify(execFile)('curl', args, { maxBuffer: 1 << 20 }).catch((e) => ({ stdout: String(e.stdout ?? ''), stderr: String(e.stderr ?? e.message) }));
  return { stdout: String(stdout), stderr: String(stderr) };
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-registry-'));

/** A gzip layer of random files, `mb` MB in all (random data: the gzip is about the same size). */
async function makeLayerFile(file: string, mb: number, seed: number): Promise<{ digest: string; size: number }> {
  const pack = tar.pack();
  const out = fs.createWriteStream(file);
  const gz = zlib.createGzip({ level: 1 });
  const done = new Promise<void>((resolve, reject) => out.on('finish', () => resolve()).on('error', reject));
  pack.pipe(gz).pipe(out);
  for (let i = 0; i < mb / 10; i++) {
    const data = randomBytes(10 * 1024 * 1024);
    data[0] = seed;
    await new Promise<void>((resolve, reject) => pack.entry({ name: `data/file-${i}.bin` }, data, (err) => (err ? reject(err) : resolve())));
  }
  pack.finalize();
  await done;
  const bytes = fs.readFileSync(file);
  return { digest: sha256(bytes), size: bytes.length };
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK']).stdout.toString().trim()) || 100;
/** CPU seconds (user + system) process `pid` has used so far (/proc/<pid>/stat, fields 14 and 15). */
function cpuSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}
/** A process and its children (nginx's master and its worker). */
const withChildren = (pid: number): number[] => [pid, ...fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)];

type Target = { url: string; curl: string[]; agent: http.Agent; headers: Record<string, string>; servername?: string; socketPath?: string };

/**
 * Monolithic upload of a file; the PUT that carries the bytes is timed and made by curl, in its own
 * process, so the client never shares the service's event loop (returns seconds).
 */
async function uploadBlob(base: Target, repo: string, file: string, digest: string, size: number): Promise<number> {
  const start = await new Promise<{ status: number; location: string; text: string }>((resolve, reject) => {
    const u = new URL(`/v2/${repo}/blobs/uploads/`, base.url);
    const mod = u.protocol === 'https:' ? https : http;
    const r = mod.request(u, { method: 'POST', agent: base.agent, headers: { ...base.headers, 'content-length': '0' }, ...(base.servername ? { servername: base.servername } : {}), ...(base.socketPath ? { socketPath: base.socketPath } : {}) }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, location: String(res.headers.location), text }));
    });
    r.on('error', reject);
    r.end();
  });
  if (start.status !== 202) throw new Error(`upload start: ${start.status} ${start.text}`);
  const loc = start.location;
  const url = new URL(`${loc}${loc.includes('?') ? '&' : '?'}digest=${digest}`, base.url).toString();
  const t0 = performance.now();
  const r = await curl([...base.curl, '-sS', '-o', '/dev/null', '-w', '%{http_code}', '-X', 'PUT', '-H', 'content-type: application/octet-stream', '--data-binary', `@${file}`, url]);
  const seconds = (performance.now() - t0) / 1000;
  if (r.stdout !== '201') throw new Error(`upload: ${r.stdout} ${r.stderr}`);
  void size;
  return seconds;
}

async function downloadBlob(base: Target, repo: string, digest: string): Promise<number> {
  const url = new URL(`/v2/${repo}/blobs/${digest}`, base.url).toString();
  const t0 = performance.now();
  const r = await curl([...base.curl, '-sS', '-o', '/dev/null', '-w', '%{http_code}', url]);
  const seconds = (performance.now() - t0) / 1000;
  if (r.stdout !== '200') throw new Error(`download: ${r.stdout} ${r.stderr}`);
  return seconds;
}

/**
 * The TLS baseline: the upstream behind a bare TLS relay in this process (Node's TLS, the edge's
 * certificate and its 1 MiB socket buffer; bytes piped both ways, no HTTP parsing, no auth).
 */
async function tlsRelay(upstreamSocket: string, secureContext: tls.SecureContext): Promise<net.Server> {
  const server = net.createServer((raw) => {
    // highWaterMark: as the edge sets it for the registry route (edge/edge.ts); not in @types/node.
    const socket = new tls.TLSSocket(raw, { isServer: true, secureContext, highWaterMark: 1024 * 1024 } as tls.TLSSocketOptions);
    const upstream = net.connect(upstreamSocket);
    socket.pipe(upstream).on('error', () => socket.destroy());
    upstream.pipe(socket).on('error', () => upstream.destroy());
    socket.on('error', () => upstream.destroy());
    upstream.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return server;
}

/**
 * nginx as a TLS proxy to the upstream with a certificate of the service CA; null without nginx.
 * `split`: with the service's one-port shape in front (SNI read, TLS relayed over a unix socket).
 */
async function nginxInFront(dataDir: string, domain: string, host: string, upstreamSocket: string, caKeys: SealedKeys, split = false): Promise<NginxProxy | null> {
  const bin = ensureNginx();
  const streamModule = split ? ensureNginxStream() : null;
  if (!bin || (split && !streamModule)) {
    console.log(`# nginx${split ? "'s stream module" : ''} could not be installed: no such nginx figures`);
    return null;
  }
  const ca = await loadOrCreateServiceCa(dataDir, domain, caKeys);
  const c = await issueServerCert(ca, [host]);
  const certFile = path.join(tmp, 'nginx-cert.pem');
  const keyFile = path.join(tmp, 'nginx-key.pem');
  fs.writeFileSync(certFile, c.certPem + ca.certPem);
  fs.writeFileSync(keyFile, c.keyPem, { mode: 0o600 });
  // Buffers large enough not to hold nginx back (its defaults read a body 4–16 KiB at a time):
  // uploads streamed through a 1 MiB body buffer, downloads through 16 × 256 KiB, never to disk.
  const location = 'client_max_body_size 0; proxy_request_buffering off; client_body_buffer_size 1m; ' +
    'proxy_buffering on; proxy_buffer_size 256k; proxy_buffers 16 256k; proxy_busy_buffers_size 512k; proxy_max_temp_file_size 0;';
  return startNginxProxy(bin, {
    dir: split ? path.join(tmp, 'split') : tmp, serverName: host, certFile, keyFile, upstream: upstreamSocket, location,
    ...(streamModule ? { onePortSplit: { streamModule } } : {}),
  });
}

async function main() {
  console.log(`bench/registry: ${MB} MB blobs, ${RUNS} runs each, medians (${os.cpus().length} cores, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')})`);
  const t = await startTestService(); // HAProxy, unless SVC_DATA_PLANE=node
  console.log(`# the service: ${t.config.dataPlane === 'haproxy' ? 'HAProxy owns the port, blob bytes go from it to the upstream (SVC_DATA_PLANE=node for the Node edge)' : 'the Node edge (SVC_DATA_PLANE=node)'}`);
  try {
    const { token, sandbox: sb, ca } = await registryPusher(t);
    const caFile = path.join(tmp, 'ca.pem');
    fs.writeFileSync(caFile, ca);
    const host = `registry.${t.config.domain}`;
    const port = t.service.edge.httpsPort;
    const loopback: net.LookupFunction = (_h, o, cb) => (o as { all?: boolean }).all ? (cb as any)(null, [{ address: '127.0.0.1', family: 4 }]) : (cb as any)(null, '127.0.0.1', 4);
    const front: Target = {
      url: `https://${host}:${port}`,
      curl: ['--resolve', `${host}:${port}:127.0.0.1`, '--cacert', caFile, '-u', `bench:${token}`],
      agent: new https.Agent({ keepAlive: true, ca, servername: host, lookup: loopback }),
      headers: { authorization: OciClient.basic(token) },
      servername: host,
    };
    // The upstream listens only on a unix socket (the front's alone); root reaches it.
    const socketPath = t.service.registry.upstream.socketPath!;
    const direct: Target = { url: t.service.registry.upstream.url, curl: ['--unix-socket', socketPath], agent: new http.Agent({ keepAlive: true }), headers: {}, socketPath };
    const relay = await tlsRelay(socketPath, await t.service.edge.certificates.contextFor(host));
    const relayPort = (relay.address() as net.AddressInfo).port;
    const viaTls: Target = {
      url: `https://${host}:${relayPort}`,
      curl: ['--resolve', `${host}:${relayPort}:127.0.0.1`, '--cacert', caFile],
      agent: new https.Agent({ keepAlive: true, ca, servername: host, lookup: loopback }),
      headers: {},
      servername: host,
    };
    const nginx = await nginxInFront(t.config.dataDir, t.config.domain, host, socketPath, t.service.store.serviceKeys);
    const nginxSplit = await nginxInFront(t.config.dataDir, t.config.domain, host, socketPath, t.service.store.serviceKeys, true);
    const via = (n: NginxProxy | null): Target | null => n && {
      url: `https://${host}:${n.port}`,
      curl: ['--resolve', `${host}:${n.port}:127.0.0.1`, '--cacert', caFile],
      agent: new https.Agent({ keepAlive: true, ca, servername: host, lookup: loopback }),
      headers: {},
      servername: host,
    };
    const viaNginx = via(nginx);
    const viaSplit = via(nginxSplit);

    // 1. push / pull throughput. One fresh blob per round, pushed by each path to its own
    // repository and pulled back; the order of the paths rotates from round to round.
    const blobs = [];
    for (let i = 0; i < RUNS + 1; i++) {
      const file = path.join(tmp, `blob-${i}.tar.gz`);
      blobs.push({ file, ...(await makeLayerFile(file, MB, i)) });
    }
    type PathName = 'front' | 'direct' | 'tls' | 'nginx' | 'split';
    const paths: Partial<Record<PathName, { target: Target; repo: string }>> = {
      front: { target: front, repo: `${sb}/front` },
      direct: { target: direct, repo: `${sb}/direct` },
      tls: { target: viaTls, repo: `${sb}/tls` },
      ...(viaNginx ? { nginx: { target: viaNginx, repo: `${sb}/nginx` } } : {}),
      ...(viaSplit ? { split: { target: viaSplit, repo: `${sb}/split` } } : {}),
    };
    const order = Object.keys(paths) as PathName[];
    const none = (): Record<PathName, number[]> => ({ front: [], direct: [], tls: [], nginx: [], split: [] });
    const push = none();
    const pull = none();
    // CPU the proxy spends per transfer (the upstream's and curl's are the same on every path):
    // nginx's master and worker; the service's HAProxy, or with the Node edge this process; with
    // HAProxy, this process (the service's Node: its decision per request, the upload's start, and
    // its background work, such as the data plane's polls every second) is counted apart
    const haproxyPid = t.service.edge.dataPlane?.pid;
    const cpu = (name: PathName): number => {
      if (name === 'front') return cpuSeconds(haproxyPid ?? process.pid);
      const n = name === 'nginx' ? nginx : name === 'split' ? nginxSplit : null;
      if (n?.process.pid) return withChildren(n.process.pid).reduce((sum, pid) => sum + cpuSeconds(pid), 0);
      return NaN;
    };
    const cpuPush = none();
    const cpuPull = none();
    const nodeShare: number[] = []; // of the service's, this process's
    const timed = async (name: PathName, into: Record<PathName, number[]>, transfer: () => Promise<number>): Promise<number> => {
      const before = cpu(name);
      const nodeBefore = cpuSeconds(process.pid);
      const seconds = await transfer();
      into[name].push(cpu(name) - before);
      if (name === 'front' && haproxyPid) nodeShare.push(cpuSeconds(process.pid) - nodeBefore);
      return seconds;
    };
    for (let i = 0; i < RUNS; i++) {
      const b = blobs[i]!;
      const round = [...order.slice(i % order.length), ...order.slice(0, i % order.length)];
      for (const name of round) push[name].push(await timed(name, cpuPush, () => uploadBlob(paths[name]!.target, `${paths[name]!.repo}-${i}`, b.file, b.digest, b.size)));
      for (const name of round) pull[name].push(await timed(name, cpuPull, () => downloadBlob(paths[name]!.target, `${paths[name]!.repo}-${i}`, b.digest)));
    }
    const size = blobs[0]!.size / 1e6;
    const rate = (s: number) => `${(size / s).toFixed(0)} MB/s`;
    const pct = (baseline: number[], measured: number[]) => `${((median(baseline) / median(measured)) * 100).toFixed(0)}%`;
    const runs = (xs: number[]) => xs.map((x) => (size / x).toFixed(0)).join('/');
    for (const [what, m] of [['push', push], ['pull', pull]] as const) {
      console.log(
        `${what} ${size.toFixed(0)} MB: service ${rate(median(m.front))}, direct ${rate(median(m.direct))}, TLS relay ${rate(median(m.tls))} ` +
          `→ ${pct(m.direct, m.front)} of direct (target ≥ 90%), ${pct(m.tls, m.front)} of the TLS relay` +
          (m.nginx.length ? `; nginx TLS proxy ${rate(median(m.nginx))}: service at ${pct(m.nginx, m.front)} of nginx (target ≥ 95%), nginx at ${pct(m.direct, m.nginx)} of direct` : '') +
          (m.split.length ? `; nginx one-port split ${rate(median(m.split))}: service at ${pct(m.split, m.front)} of it` : '') +
          ` (runs MB/s: service ${runs(m.front)}, direct ${runs(m.direct)}, TLS relay ${runs(m.tls)}${m.nginx.length ? `, nginx ${runs(m.nginx)}` : ''})`,
      );
    }
    const ms = (xs: number[]) => `${(median(xs) * 1000).toFixed(0)} ms`;
    for (const [what, c] of [['push', cpuPush], ['pull', cpuPull]] as const) {
      if (!c.nginx.length) continue;
      console.log(`${what} CPU of the proxy per ${size.toFixed(0)} MB (medians): ${haproxyPid ? "the service's HAProxy" : "the service's Node"} ${ms(c.front)}, nginx ${ms(c.nginx)} → ${(median(c.front) / median(c.nginx)).toFixed(2)}× nginx's ` +
        `(runs ms: service ${c.front.map((x) => (x * 1000).toFixed(0)).join('/')}, nginx ${c.nginx.map((x) => (x * 1000).toFixed(0)).join('/')})` +
        (c.split.length ? `; nginx one-port split ${ms(c.split)}: ${(median(c.split) / median(c.nginx)).toFixed(2)}× nginx's (the price of one port), the service ${(median(c.front) / median(c.split)).toFixed(2)}× it` : ''));
    }
    if (nodeShare.length) console.log(`besides, the service's Node (this process) per transfer, push/pull by round: ${nodeShare.map((x) => (x * 1000).toFixed(0)).join('/')} ms`);
    relay.close();
    viaTls.agent.destroy();
    for (const n of [nginx, nginxSplit]) n?.process.kill('SIGTERM');
    for (const v of [viaNginx, viaSplit]) v?.agent.destroy();
    if (TRANSFER_ONLY) {
      front.agent.destroy();
      direct.agent.destroy();
      console.log(`load average after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
      return;
    }

    // 2. scan throughput vs gunzip on a real Debian rootfs layer
    const debian = debianLayer(tmp);
    const debianBytes = fs.statSync(debian).size;
    const debianDigest = sha256(fs.readFileSync(debian));
    const gunzip: number[] = [];
    const scan: number[] = [];
    let last;
    for (let i = 0; i < RUNS; i++) {
      let t0 = performance.now();
      const r = spawnSync('sh', ['-c', 'gunzip -c "$1" > /dev/null', 'sh', debian]);
      if (r.status !== 0) throw new Error('gunzip failed');
      gunzip.push((performance.now() - t0) / 1000);
      t0 = performance.now();
      last = await scanLayer(fs.createReadStream(debian, { highWaterMark: 1 << 20 }), { digest: debianDigest });
      scan.push((performance.now() - t0) / 1000);
    }
    const scanRatio = median(gunzip) / median(scan);
    console.log(`scan of a Debian rootfs layer (${(debianBytes / 1e6).toFixed(0)} MB gzip, ${(last!.bytes / 1e6).toFixed(0)} MB tar, ${last!.entries} entries, ${last!.state}): ` +
      `scan ${median(scan).toFixed(2)} s, gunzip ${median(gunzip).toFixed(2)} s → ${(scanRatio * 100).toFixed(0)}% of gunzip's speed (target ≥ 70%)`);

    // 3. end of push → finished report, for a 200 MB image
    const reportTimes: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const layer = blobs[RUNS]!; // fresh blob: never pushed or scanned before
      const blob = i === 0 ? layer : { file: path.join(tmp, `img-${i}.tar.gz`), ...(await makeLayerFile(path.join(tmp, `img-${i}.tar.gz`), MB, 100 + i)) };
      await uploadBlob(front, `${sb}/image`, blob.file, blob.digest, blob.size);
      const client = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca, auth: OciClient.basic(token) });
      const digest = await tagUploadedLayer(client, `${sb}/image`, `v${i}`, blob, [`RUN=${i}`]);
      const t0 = performance.now();
      await finishedScan(t, token, `${sb}/image`, digest, 20);
      reportTimes.push((performance.now() - t0) / 1000);
      client.close();
    }
    console.log(`end of a ${MB} MB push → finished report: ${median(reportTimes).toFixed(2)} s (runs: ${reportTimes.map((x) => x.toFixed(2)).join(', ')}; target < 5 s)`);
    console.log(`load average after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    front.agent.destroy();
    direct.agent.destroy();
  } finally {
    await t.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
