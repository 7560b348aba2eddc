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
 * What the generic assignment rule costs: the Debian layer and the tree scanned without it (the
 * provider rules alone), the tree also renamed out of its package folders (where the generic rule
 * does not run) so that it reads as an owner's code. What archives cost: the same tree with each
 * package packed as a .tgz (npm) or a .zip (Python: a wheel's format) in the layer, against the
 * tree as plain files.
 *
 * Usage: npm run bench:scanner [-- --runs 3 --mb 175]
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import yazl from 'yazl';
import { scanLayer } from '../scanner/layer-reader.ts';
import { PROVIDER_RULES } from '../scanner/provider-rules.ts';
import { builtInRules, RuleSet } from '../scanner/rule-set.ts';
import { sha256File, debianLayer } from './support/debian-layer.ts';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const RUNS = arg('runs', 3);
const TREE_MB = arg('mb', 175);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const percentMore = (a: number, b: number) => `${(((a - b) / b) * 100).toFixed(0)} % more time`;
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

const providerOnly = new RuleSet(PROVIDER_RULES);

/** Package folders renamed so that the files read as an owner's code. */
const asOwnCode = (name: string) => name.replace(/(^|\/)node_modules\//g, '$1node_mods/').replace(/(^|\/)(dist|site)-packages\//g, '$1$2_pkgs/');

/**
 * Repacks the tree's tar: renamed as an owner's code, or with each package (the first three parts of
 * its path) packed as one archive, .zip for Python's, .tgz for the rest. Returns the new tar's digest.
 */
async function repack(tarFile: string, out: string, how: 'own-code' | 'archives'): Promise<string> {
  const pack = tar.pack();
  const written = new Promise<void>((resolve, reject) => pack.pipe(fs.createWriteStream(out)).on('finish', () => resolve()).on('error', reject));
  const add = (name: string, data: Buffer) => new Promise<void>((resolve, reject) => pack.entry({ name }, data, (err) => (err ? reject(err) : resolve())));
  const groups = new Map<string, Array<{ name: string; data: Buffer }>>();
  const extract = tar.extract();
  fs.createReadStream(tarFile).pipe(extract as unknown as NodeJS.WritableStream);
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const chunk of entry as AsyncIterable<Buffer>) chunks.push(chunk);
    const data = Buffer.concat(chunks);
    const parts = entry.header.name.split('/');
    if (how === 'own-code') await add(asOwnCode(entry.header.name), data);
    else if (parts.length <= 3) await add(entry.header.name, data);
    else {
      const group = parts.slice(0, 3).join('/');
      groups.set(group, [...(groups.get(group) ?? []), { name: parts.slice(3).join('/'), data }]);
    }
  }
  for (const [group, files] of groups) {
    if (group.startsWith('python3')) {
      const zip = new yazl.ZipFile();
      for (const f of files) zip.addBuffer(f.data, f.name);
      zip.end();
      const chunks: Buffer[] = [];
      for await (const chunk of zip.outputStream as AsyncIterable<Buffer>) chunks.push(chunk);
      await add(`${group}.zip`, Buffer.concat(chunks));
    } else {
      const inner = tar.pack();
      const chunks: Buffer[] = [];
      const done = (async () => { for await (const chunk of inner as AsyncIterable<Buffer>) chunks.push(chunk); })();
      for (const f of files) await new Promise<void>((resolve, reject) => inner.entry({ name: `package/${f.name}` }, f.data, (err) => (err ? reject(err) : resolve())));
      inner.finalize();
      await done;
      await add(`${group}.tgz`, zlib.gzipSync(Buffer.concat(chunks), { level: 6 }));
    }
  }
  pack.finalize();
  await written;
  return sha256File(out);
}

async function timeScan(file: string, digest: string, rules = builtInRules()): Promise<{ seconds: number; result: Awaited<ReturnType<typeof scanLayer>> }> {
  const t0 = performance.now();
  const result = await scanLayer(fs.createReadStream(file, { highWaterMark: 1 << 20 }), { digest, rules });
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
    const scanProviders: number[] = [];
    let last;
    for (let i = 0; i < RUNS; i++) {
      gunzip.push(timeCommand('sh', ['-c', 'gunzip -c "$1" > /dev/null', 'sh', debian]));
      const s = await timeScan(debian, debianDigest);
      scan.push(s.seconds);
      last = s.result;
      scanProviders.push((await timeScan(debian, debianDigest, providerOnly)).seconds);
    }
    const gz = fs.statSync(debian).size;
    console.log(`Debian rootfs layer (${(gz / 1e6).toFixed(0)} MB gzip, ${(last!.bytes / 1e6).toFixed(0)} MB tar, ${last!.entries} entries, ${last!.findings.length} findings): ` +
      `scan ${median(scan).toFixed(2)} s, gunzip ${median(gunzip).toFixed(2)} s → ${((median(gunzip) / median(scan)) * 100).toFixed(0)} % of gunzip's speed (target ≥ 70 %)`);
    console.log(`  without the generic rule ${median(scanProviders).toFixed(2)} s (the generic rule costs ${percentMore(median(scan), median(scanProviders))}); ` +
      `archives: ${last!.archives.members} members, ${(last!.archives.bytes / 1e6).toFixed(0)} MB inflated, ${(last!.archives.ms / 1000).toFixed(2)} s of the last scan (${((last!.archives.ms / 1000 / scan.at(-1)!) * 100).toFixed(0)} %)`);

    // 2. Text-heavy tree vs gitleaks on the same files.
    const dir = path.join(tmp, 'tree');
    const tarFile = path.join(tmp, 'tree.tar');
    const tree = await textTree(dir, tarFile, TREE_MB);
    const treeDigest = await sha256File(tarFile);
    const ownFile = path.join(tmp, 'own-code.tar');
    const ownDigest = await repack(tarFile, ownFile, 'own-code');
    const archivedFile = path.join(tmp, 'archived.tar');
    const archivedDigest = await repack(tarFile, archivedFile, 'archives');
    const ours: number[] = [];
    const own: number[] = [];
    const ownProviders: number[] = [];
    const archived: number[] = [];
    const theirs: number[] = [];
    let found = 0;
    let lastTree;
    let lastOwn;
    let lastArchived;
    for (let i = 0; i < RUNS; i++) {
      theirs.push(timeCommand('gitleaks', ['detect', '--no-git', '--no-banner', '--redact', '--exit-code', '0', '--log-level', 'error', '--source', dir, '--report-format', 'json', '--report-path', path.join(tmp, 'gitleaks.json')]));
      const s = await timeScan(tarFile, treeDigest);
      ours.push(s.seconds);
      found = s.result.findings.length;
      lastTree = s.result;
      const o = await timeScan(ownFile, ownDigest);
      own.push(o.seconds);
      lastOwn = o.result;
      ownProviders.push((await timeScan(ownFile, ownDigest, providerOnly)).seconds);
      const a = await timeScan(archivedFile, archivedDigest);
      archived.push(a.seconds);
      lastArchived = a.result;
    }
    const leaks = (JSON.parse(fs.readFileSync(path.join(tmp, 'gitleaks.json'), 'utf8')) as unknown[]).length;
    console.log(`text tree (${tree.files} files, ${(tree.bytes / 1e6).toFixed(0)} MB of Python/JS/TS/JSON/Markdown): svc scanner ${median(ours).toFixed(2)} s (${found} findings), ` +
      `gitleaks 8.16 ${median(theirs).toFixed(2)} s (${leaks} findings) → ${(median(theirs) / median(ours)).toFixed(1)}× gitleaks' speed (target ≥ 3×)`);
    console.log(`  as an owner's code (package folders renamed): ${median(own).toFixed(2)} s, ${median(ownProviders).toFixed(2)} s without the generic rule ` +
      `(the generic rule costs ${percentMore(median(own), median(ownProviders))}; ${lastOwn!.findings.length} findings, ${lastOwn!.findings.filter((f) => f.confidence === 'low').length} low)`);
    console.log(`  packed as archives (${lastArchived!.archives.members} members in ${lastArchived!.entries} layer entries, ${(fs.statSync(archivedFile).size / 1e6).toFixed(0)} MB tar): ` +
      `${median(archived).toFixed(2)} s (reading archives costs ${percentMore(median(archived), median(ours))} over the same files plain; the last run spent ${(lastArchived!.archives.ms / 1000).toFixed(2)} of ${archived.at(-1)!.toFixed(2)} s in archives; ${lastArchived!.findings.length} findings)`);
    for (const f of [...lastTree!.findings, ...lastOwn!.findings]) console.log(`  finding: ${f.path}:${f.line ?? ''} ${f.rule}${f.confidence ? ` (${f.confidence})` : ''}${f.vendored ? ' (vendored)' : ''}`);
    console.log(`runs (s): scan ${scan.map((x) => x.toFixed(2)).join('/')}, gunzip ${gunzip.map((x) => x.toFixed(2)).join('/')}, tree ${ours.map((x) => x.toFixed(2)).join('/')}, own code ${own.map((x) => x.toFixed(2)).join('/')}, archived ${archived.map((x) => x.toFixed(2)).join('/')}, gitleaks ${theirs.map((x) => x.toFixed(2)).join('/')}; load average after ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
