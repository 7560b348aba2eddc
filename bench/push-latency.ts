/**
 * bench/push-latency: does the API keep answering while a large image is pushed and scanned (issue 32 §4)?
 * The API's latency (GET /api/sandboxes/<name>, one request after another, 20 ms apart) is measured
 * twice in one service: at rest (the baseline), then from the start of a text-heavy layer's upload
 * (this machine's Python standard library and the project's node_modules sources, repeated under new
 * folder names until the layer holds --mb MB of text; gzip level 1) until that image's scan report is
 * finished. Text is what the scanner works hardest on: every line is read by the rules and the generic
 * assignment rule. Prints p50/p99 of both phases and their ratio.
 *
 * Usage: npm run bench:push-latency [-- --mb 1024]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { createHash } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { startTestService } from '../harness/service.ts';
import { OciClient } from '../harness/oci.ts';
import { finishedScan, registryPusher, tagUploadedLayer } from '../harness/registry-push.ts';

const MB = Number(process.argv[process.argv.indexOf('--mb') + 1] || 1024);
const TEXT = /\.(py|js|mjs|cjs|ts|json|md|txt|cfg|ini|ya?ml|toml|sh)$/;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-push-latency-'));
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;

/** The source files read once; the layer repeats them under round-numbered folders. */
function textFiles(): Array<{ name: string; data: Buffer }> {
  const roots = [...fs.readdirSync('/usr/lib').filter((d) => /^python3(\.\d+)?$/.test(d)).map((d) => `/usr/lib/${d}`), path.resolve(import.meta.dirname, '../node_modules')];
  const files: Array<{ name: string; data: Buffer }> = [];
  const walk = (dir: string): void => {
    let entries: fs.Dirent[];
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && TEXT.test(e.name)) {
        const data = fs.readFileSync(p);
        if (data.length <= 1 << 20) files.push({ name: p.slice(1), data });
      }
    }
  };
  for (const r of roots) walk(r);
  return files;
}

async function textLayer(file: string): Promise<{ digest: string; size: number; textBytes: number }> {
  const files = textFiles();
  const pack = tar.pack();
  const hash = createHash('sha256');
  let size = 0;
  const gz = zlib.createGzip({ level: 1 });
  gz.on('data', (c: Buffer) => { hash.update(c); size += c.length; });
  const written = pipeline(pack, gz, fs.createWriteStream(file));
  let textBytes = 0;
  for (let round = 0; textBytes < MB * 1e6; round++) {
    for (const f of files) {
      // tar-stream's entry callback is the back-pressure: one entry written before the next
      await new Promise<void>((resolve, reject) => pack.entry({ name: `r${round}/${f.name}` }, f.data, (err) => (err ? reject(err) : resolve())));
      textBytes += f.data.length;
      if (textBytes >= MB * 1e6) break;
    }
  }
  pack.finalize();
  await written;
  return { digest: `sha256:${hash.digest('hex')}`, size, textBytes };
}

async function main() {
  console.log(`bench/push-latency: a ${MB} MB text layer (${os.cpus().length} cores, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')})`);
  const layerFile = path.join(tmp, 'layer.tar.gz');
  const t0 = performance.now();
  const layer = await textLayer(layerFile);
  console.log(`# layer made: ${(layer.textBytes / 1e6).toFixed(0)} MB of text, ${(layer.size / 1e6).toFixed(0)} MB gzip, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const t = await startTestService();
  try {
    const { token, sandbox: sb, ca } = await registryPusher(t);
    const client = new OciClient({ port: t.service.edge.httpsPort, host: `registry.${t.config.domain}`, ca, auth: OciClient.basic(token) });

    const sample = async (until: () => boolean, min: number): Promise<number[]> => {
      const times: number[] = [];
      while (times.length < min || !until()) {
        const s = performance.now();
        const res = await t.api('GET', `/api/sandboxes/${sb}`, token);
        if (res.status !== 200) throw new Error(`GET record: ${res.status}`);
        times.push(performance.now() - s);
        await new Promise((r) => setTimeout(r, 20));
      }
      return times;
    };
    const atRest = await sample(() => true, 200);

    let done = false;
    const pushStart = performance.now();
    const push = (async () => {
      const start = await client.request('POST', `/v2/${sb}/image/blobs/uploads/`, { headers: { 'content-length': '0' } });
      if (start.status !== 202) throw new Error(`upload start: ${start.status}`);
      const location = String(start.headers.location);
      const put = await client.request('PUT', `${location}${location.includes('?') ? '&' : '?'}digest=${encodeURIComponent(layer.digest)}`, {
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(layer.size) },
        body: fs.createReadStream(layerFile, { highWaterMark: 1 << 20 }),
      });
      if (put.status !== 201) throw new Error(`upload: ${put.status} ${put.body}`);
      const uploaded = performance.now();
      const digest = await tagUploadedLayer(client, `${sb}/image`, 'v1', layer, ['PATH=/bin']);
      const scan = await finishedScan(t, token, `${sb}/image`, digest, 200);
      return { uploadS: (uploaded - pushStart) / 1000, reportS: (performance.now() - uploaded) / 1000, state: scan.state, reason: scan.reason ?? scan.layers?.map((l) => l.reason).filter(Boolean).join('; ') };
    })().finally(() => { done = true; });
    const [during, result] = await Promise.all([sample(() => done, 1), push]);

    const p = (xs: number[]) => `p50 ${pct(xs, 0.5).toFixed(1)} ms, p99 ${pct(xs, 0.99).toFixed(1)} ms, max ${Math.max(...xs).toFixed(0)} ms (${xs.length} requests)`;
    console.log(`push: upload ${result.uploadS.toFixed(1)} s, then report ${result.reportS.toFixed(1)} s (${result.state}${result.reason ? `: ${result.reason}` : ''})`);
    console.log(`API at rest:            ${p(atRest)}`);
    console.log(`API during push + scan: ${p(during)}`);
    console.log(`ratio (during / at rest): p50 ${(pct(during, 0.5) / pct(atRest, 0.5)).toFixed(2)}×, p99 ${(pct(during, 0.99) / pct(atRest, 0.99)).toFixed(2)}×`);
    console.log(`load average after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    client.close();
  } finally {
    await t.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
