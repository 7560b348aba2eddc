/**
 * bench/scanner: the secret scanner with its full rule set against two baselines measured in the
 * same run, each as a ratio:
 *
 *  1. a Debian root filesystem layer (the sandbox image's debootstrap layer, gzip) through the layer
 *     reader, versus plain `gunzip` of the same blob (target: ≥ 70 % of gunzip's speed);
 *  2. a text-heavy tree (this machine's Python standard library and dist-packages, and the
 *     project's node_modules sources: about 175 MB of .py/.js/.ts/.json/.md…) as one tar layer,
 *     versus gitleaks 8.16 (`gitleaks detect --no-git`) on the same files in a folder
 *     (target: ≥ 3× gitleaks' speed).
 *
 * Usage: npm run bench:scanner [-- --runs 3 --mb 175]
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tar from 'tar-stream';
import { scanLayer } from '../scanner/layer-reader.ts';
import { builtInRules } from '../scanner/rule-set.ts';
import { sha256File, debianLayer } from './support/debian-layer.ts';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const RUNS = arg('runs', 3);
const TREE_MB = arg('mb', 175);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const TEXT = /\.(?:py|pyi|js|mjs|cjs|ts|mts|json|md|txt|ya?ml|toml|cfg|ini|html|css|go|rst|sh)$/;

/** Copies text source files from this machine into `dir` (up to `mb` MB) and packs the same files as a tar. */
async function textTree(dir: string, tarFile: string, mb: number): Promise<{ files: number; bytes: number }> {
  const roots = ['/usr/lib/python3', ...fs.readdirSync('/usr/lib').filter((d) => /^python3\.\d+$/.test(d)).map((d) => `/usr/lib/${d}`), path.resolve(import.meta.dirname, '../node_modules')];
  const pack = tar.pack();
  const out = fs.createWriteStream(tarFile);
  const done = new Promise<void>((resolve, reject) => out.on('finish', () => resolve()).on('error', reject));
  pack.pipe(out);
  let bytes = 0;
  let files = 0;
  const walk = async (root: string, rel: string): Promise<boolean> => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(path.join(root, rel), { withFileTypes: true });
    } catch {
      return true;
    }
    for (const e of entries) {
      const r = path.join(rel, e.name);
      if (e.isDirectory()) {
        if (!(await walk(root, r))) return false;
      } else if (e.isFile() && TEXT.test(e.name)) {
        const data = fs.readFileSync(path.join(root, r));
        if (data.length > 4 * 1024 * 1024) continue;
        const name = path.join(path.basename(root), r);
        fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
        fs.writeFileSync(path.join(dir, name), data);
        await new Promise<void>((resolve, reject) => pack.entry({ name }, data, (err) => (err ? reject(err) : resolve())));
        bytes += data.length;
        files += 1;
        if (bytes >= mb * 1e6) return false;
      }
    }
    return true;
  };
  for (const root of roots) if (!(await walk(root, ''))) break;
  pack.finalize();
  await done;
  return { files, bytes };
}

async function timeScan(file: string, digest: string): Promise<{ seconds: number; result: Awaited<ReturnType<typeof scanLayer>> }> {
  const t0 = performance.now();
  const result = await scanLayer(fs.createReadStream(file, { highWaterMark: 1 << 20 }), { digest });
  return { seconds: (performance.now() - t0) / 1000, result };
}

function timeCommand(cmd: string, args: string[]): number {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  if (r.status !== 0) throw new Error(`${cmd} failed: ${r.stderr}`);
  return (performance.now() - t0) / 1000;
}

async function main() {
  const rules = builtInRules();
  console.log(`bench/scanner: ${rules.rules.length} content rules, ${rules.general.automaton.keywords.length} keywords; ${RUNS} runs each, medians; ${os.cpus().length} cores, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-scanner-'));
  try {
    // 1. Debian rootfs layer vs gunzip, alternating so both see the same machine load.
    const debian = debianLayer(tmp);
    const debianDigest = await sha256File(debian);
    const gunzip: number[] = [];
    const scan: number[] = [];
    let last;
    for (let i = 0; i < RUNS; i++) {
      gunzip.push(timeCommand('sh', ['-c', 'gunzip -c "$1" > /dev/null', 'sh', debian]));
      const s = await timeScan(debian, debianDigest);
      scan.push(s.seconds);
      last = s.result;
    }
    const gz = fs.statSync(debian).size;
    console.log(`Debian rootfs layer (${(gz / 1e6).toFixed(0)} MB gzip, ${(last!.bytes / 1e6).toFixed(0)} MB tar, ${last!.entries} entries, ${last!.findings.length} findings): ` +
      `scan ${median(scan).toFixed(2)} s, gunzip ${median(gunzip).toFixed(2)} s → ${((median(gunzip) / median(scan)) * 100).toFixed(0)} % of gunzip's speed (target ≥ 70 %)`);

    // 2. Text-heavy tree vs gitleaks on the same files.
    const dir = path.join(tmp, 'tree');
    const tarFile = path.join(tmp, 'tree.tar');
    const tree = await textTree(dir, tarFile, TREE_MB);
    const treeDigest = await sha256File(tarFile);
    const ours: number[] = [];
    const theirs: number[] = [];
    let found = 0;
    for (let i = 0; i < RUNS; i++) {
      theirs.push(timeCommand('gitleaks', ['detect', '--no-git', '--no-banner', '--redact', '--exit-code', '0', '--log-level', 'error', '--source', dir, '--report-format', 'json', '--report-path', path.join(tmp, 'gitleaks.json')]));
      const s = await timeScan(tarFile, treeDigest);
      ours.push(s.seconds);
      found = s.result.findings.length;
    }
    const leaks = (JSON.parse(fs.readFileSync(path.join(tmp, 'gitleaks.json'), 'utf8')) as unknown[]).length;
    console.log(`text tree (${tree.files} files, ${(tree.bytes / 1e6).toFixed(0)} MB of Python/JS/TS/JSON/Markdown): svc scanner ${median(ours).toFixed(2)} s (${found} findings), ` +
      `gitleaks 8.16 ${median(theirs).toFixed(2)} s (${leaks} findings) → ${(median(theirs) / median(ours)).toFixed(1)}× gitleaks' speed (target ≥ 3×)`);
    console.log(`runs (s): scan ${scan.map((x) => x.toFixed(2)).join('/')}, gunzip ${gunzip.map((x) => x.toFixed(2)).join('/')}, tree ${ours.map((x) => x.toFixed(2)).join('/')}, gitleaks ${theirs.map((x) => x.toFixed(2)).join('/')}; load average after ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
