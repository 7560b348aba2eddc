/**
 * bench/owner-secrets: what the search for an owner's own secrets (issue 35, scanner/owner-secrets.ts)
 * adds to the scan of a push, as a ratio against the rules' scan of the same layer in the same run:
 * a text-heavy layer (this machine's Python standard library and the project's node_modules sources,
 * as files in one tar) read by the layer reader with the full rule set (the baseline), then by the
 * owner-secret search with 20 secrets of 8 to 64 bytes (keyed hashes as the store keeps them) and
 * with 100 (an account's limit). The rules' scan itself is unchanged: this search runs only for
 * owners who keep secrets.
 *
 * Usage: npx tsx bench/owner-secrets.ts [--mb 60]
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tar from 'tar-stream';
import { scanLayer } from '../scanner/layer-reader.ts';
import { secretsInLayer, type SecretLookup } from '../scanner/owner-secrets.ts';
import { halfSipHash8 } from '../core/half-siphash.ts';

const TEXT = /\.(py|js|mjs|cjs|ts|json|md|txt|cfg|ini|ya?ml|toml|sh)$/;
const MB = Number(process.argv[process.argv.indexOf('--mb') + 1] || 60);

async function textLayer(file: string): Promise<number> {
  const roots = [...fs.readdirSync('/usr/lib').filter((d) => /^python3(\.\d+)?$/.test(d)).map((d) => `/usr/lib/${d}`), path.resolve(import.meta.dirname, '../node_modules')];
  const pack = tar.pack();
  const done = new Promise<void>((resolve, reject) => pack.pipe(fs.createWriteStream(file)).on('finish', () => resolve()).on('error', reject));
  let bytes = 0;
  const walk = (dir: string): boolean => {
    let entries: fs.Dirent[];
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return true; }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) { if (!walk(p)) return false; continue; }
      if (!e.isFile() || !TEXT.test(e.name)) continue;
      const data = fs.readFileSync(p);
      if (data.length > 4 * 1024 * 1024) continue;
      pack.entry({ name: p.slice(1) }, data);
      bytes += data.length;
      if (bytes >= MB * 1e6) return false;
    }
    return true;
  };
  for (const root of roots) if (!walk(root)) break;
  pack.finalize();
  await done;
  return bytes;
}

/** A lookup as accounts/secrets.ts makes it (HalfSipHash fingerprints of 8 bytes, HMAC-SHA256), random keys, values of 8..64 bytes. */
function lookupOf(count: number): SecretLookup {
  const key = randomBytes(32);
  const [k0, k1] = [randomBytes(4).readInt32LE(0), randomBytes(4).readInt32LE(0)];
  const hash = (v: Buffer | string) => createHmac('sha256', key).update(v).digest('base64url');
  const head = (b: Uint8Array, at: number) => halfSipHash8(k0, k1, b, at);
  const values = Array.from({ length: count }, (_, i) => Buffer.from(randomBytes(48).toString('base64url').slice(0, 8 + ((i * 7) % 57))));
  const names = new Map(values.map((v, i) => [hash(v), `SECRET_${i}`]));
  const lengthsByHead = new Map<number, number[]>();
  for (const v of values) lengthsByHead.set(head(v, 0), [...(lengthsByHead.get(head(v, 0)) ?? []), v.length]);
  return { headBytes: 8, head, lengthsByHead, find: (c) => names.get(hash(c)) };
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-owner-secrets-'));
try {
  const file = path.join(tmp, 'layer.tar');
  const bytes = await textLayer(file);
  const digest = `sha256:${createHash('sha256').update(fs.readFileSync(file)).digest('hex')}`;
  const time = async (work: () => Promise<unknown>) => { const t0 = performance.now(); await work(); return (performance.now() - t0) / 1000; };
  const rules = await time(() => scanLayer(fs.createReadStream(file, { highWaterMark: 1 << 20 }), { digest }));
  const runs: Array<[number, number]> = [];
  for (const count of [20, 100]) {
    const lookup = lookupOf(count);
    runs.push([count, await time(() => secretsInLayer(fs.createReadStream(file, { highWaterMark: 1 << 20 }), lookup))]);
  }
  console.log(`bench/owner-secrets: ${(bytes / 1e6).toFixed(0)} MB of text in one tar layer; ${os.cpus().length} cores, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`  rules' scan (baseline): ${rules.toFixed(2)} s (${(bytes / 1e6 / rules).toFixed(0)} MB/s)`);
  for (const [count, s] of runs) console.log(`  owner-secret search, ${count} secrets: ${s.toFixed(2)} s (${(bytes / 1e6 / s).toFixed(0)} MB/s), ${(s / rules).toFixed(2)}× the rules' scan`);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
