import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import zlib from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import yazl from 'yazl';
import { gzip, makeTar } from '../../harness/oci.ts';
import { pushSandbox, type PushSandbox, type ReportImage } from './docker-push.ts';

/** A zip made with yazl: name → content. */
async function zip(files: Record<string, Buffer | string | (() => NodeJS.ReadableStream)>): Promise<Buffer> {
  const z = new yazl.ZipFile();
  for (const [name, content] of Object.entries(files)) {
    if (typeof content === 'function') z.addReadStream(content() as NodeJS.ReadableStream, name);
    else z.addBuffer(Buffer.from(content), name);
  }
  z.end();
  const chunks: Buffer[] = [];
  for await (const chunk of z.outputStream as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** 300 MB of zeros, streamed (yazl deflates it to about 300 KB). */
function zeros(): NodeJS.ReadableStream {
  const out = new PassThrough();
  const block = Buffer.alloc(1024 * 1024);
  let left = 300;
  const write = () => {
    while (left > 0) {
      left -= 1;
      if (!out.write(block)) return void out.once('drain', write);
    }
    out.end();
  };
  write();
  return out;
}

const findingsOf = (img: ReportImage) => img.versions[0]!.findings.map((f) => `${f.path} ${f.rule}`).sort();

/**
 * Secrets where other scanners do not look, each in an image built and pushed with the docker CLI
 * through the registry: inside a jar, a wheel, an npm tarball, a .tar.gz inside a .tar.gz, and in
 * a repository's history after `git rm`. A zip bomb and a 10 000-deep nesting keep their images
 * private with the reason, and the registry goes on answering.
 */
describe('secrets in archives and git history, pushed with the docker CLI', () => {
  let s: PushSandbox;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-scan-nested-'));

  before(async () => {
    s = await pushSandbox('nested');
  });
  after(async () => {
    await s?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('finds secrets inside a jar, a wheel, an npm tarball and a .tar.gz in a .tar.gz, named by archive and member', async () => {
    const jar = await zip({ 'META-INF/MANIFEST.MF': 'Manifest-Version: 1.0\n', 'BOOT-INF/classes/application.properties': 'server.port=8080\nspring.datasource.password=Xq7Lm2Rk9Tz4Wb8Nc3Vp\n' });
    const wheel = await zip({ 'shop/__init__.py': '', 'shop/settings.py': 'DEBUG = False\nSTRIPE_KEY = "sk_live_Zk3Lq9Rm2Xw8Tn5Vp7Hc4Jd1"\n', 'shop-1.0.dist-info/RECORD': '' });
    const npm = gzip(await makeTar([{ path: 'package/package.json', content: '{"name":"shop","version":"1.0.0"}' }, { path: 'package/lib/config.js', content: 'module.exports = { apiToken: "Hk4Jr8Tw2Lq9Zm5Xn7Bv" };\n' }]));
    const inner = gzip(await makeTar([{ path: 'creds.yaml', content: 'deploy:\n  client_secret: "Pq3Wm8Zr5Tk2Lx7Nv4Bc"\n' }]));
    const outer = gzip(await makeTar([{ path: 'backup/inner.tar.gz', content: inner }]));
    const img = await s.push('archives:v1', 'FROM svc-fixture-busybox:latest\nCOPY app.jar shop-1.0-py3-none-any.whl shop-1.0.0.tgz outer.tar.gz /srv/\n', {
      'app.jar': jar, 'shop-1.0-py3-none-any.whl': wheel, 'shop-1.0.0.tgz': npm, 'outer.tar.gz': outer,
    });
    assert.equal(img.versions[0]!.scan.state, 'flagged', JSON.stringify(img.versions[0]));
    assert.equal(img.visibility, 'private');
    assert.deepEqual(findingsOf(img), [
      'srv/app.jar!/BOOT-INF/classes/application.properties generic-secret',
      'srv/outer.tar.gz!/backup/inner.tar.gz!/creds.yaml generic-secret',
      'srv/shop-1.0-py3-none-any.whl!/shop/settings.py stripe-secret-key',
      'srv/shop-1.0.0.tgz!/package/lib/config.js generic-secret',
    ]);
  });

  it('finds a secret committed and then removed with git rm, named by commit and path', async () => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(repo);
    const git = (...args: string[]) => execFileSync('git', ['-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { stdio: ['ignore', 'pipe', 'pipe'] }).toString().trim();
    git('init', '-q');
    fs.writeFileSync(path.join(repo, 'settings.py'), 'DB_PASSWORD = "Wz8Kp3Rt6Ym1Qn9Lx4Vc"\n');
    fs.writeFileSync(path.join(repo, 'README.md'), '# shop\n');
    git('add', '.');
    git('commit', '-qm', 'first');
    const commit = git('rev-parse', 'HEAD');
    git('rm', '-q', 'settings.py');
    git('commit', '-qm', 'no secrets here');
    const packed = path.join(dir, 'packed');
    fs.cpSync(repo, packed, { recursive: true });
    execFileSync('git', ['-C', packed, 'gc', '-q']);
    execFileSync('tar', ['-cf', path.join(dir, 'repos.tar'), '-C', dir, 'repo', 'packed']);
    const img = await s.push('history:v1', 'FROM svc-fixture-busybox:latest\nADD repos.tar /app/\n', { 'repos.tar': fs.readFileSync(path.join(dir, 'repos.tar')) });
    assert.equal(img.visibility, 'private');
    assert.deepEqual(findingsOf(img), [
      `app/packed/.git@${commit.slice(0, 12)}:settings.py generic-secret`,
      `app/repo/.git@${commit.slice(0, 12)}:settings.py generic-secret`,
    ]);
  });

  it('keeps a zip bomb and a 10 000-deep nesting private with the reason, and the registry goes on answering', async () => {
    const bomb = await zip({ 'zeros.bin': zeros });
    let deep = Buffer.from('nothing secret\n');
    for (let i = 0; i < 10_000; i++) deep = zlib.gzipSync(deep, { level: 0 });
    const bombImage = await s.push('bomb:v1', 'FROM svc-fixture-busybox:latest\nCOPY bomb.zip /srv/\n', { 'bomb.zip': bomb });
    assert.equal(bombImage.versions[0]!.scan.state, 'unscannable');
    assert.match(bombImage.versions[0]!.scan.reason ?? '', /srv\/bomb\.zip!\/zeros\.bin: inflates more than 200× its compressed size \(a compression bomb\)/);
    assert.equal(bombImage.visibility, 'private');
    const deepImage = await s.push('deep:v1', 'FROM svc-fixture-busybox:latest\nCOPY deep.gz /srv/\n', { 'deep.gz': deep });
    assert.equal(deepImage.versions[0]!.scan.state, 'unscannable');
    assert.match(deepImage.versions[0]!.scan.reason ?? '', /srv\/deep\.gz!\/deep.*: archives nested more than 8 deep/);
    assert.equal(deepImage.visibility, 'private');
    // The registry still takes and scans a push.
    const clean = await s.push('after:v1', 'FROM svc-fixture-busybox:latest\nRUN echo fine > /fine.txt\n');
    assert.equal(clean.versions[0]!.scan.state, 'clean');
  });
});
