import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { makeTar } from '../../harness/oci.ts';
import { pushSandbox, type PushSandbox } from './docker-push.ts';

/**
 * The scanner measured on gitleaks' own rule tests (test/scanner/gitleaks-rule-cases.json:
 * the true positives of gitleaks 8.16.0's rule generators, the false-positive strings of 8.30.0),
 * each case written into the places a secret sits, pushed as one image (a layer per place) with
 * the docker CLI through the registry and read back from the owner's report; gitleaks (Debian's
 * 8.16 package) reads the same files from a folder. Per place: our recall at least gitleaks',
 * our false alarms at most half of gitleaks'. Prints the table docs/scanner.md quotes.
 */
interface Cases {
  truePositives: Array<{ rule: string; line: string; secret: string }>;
  falsePositives: Array<{ file: string; text: string }>;
}

/** Where a case is written: the file's name and content, from the test line and its secret. */
const PLACES: Array<{ place: string; title: string; file: (i: number) => string; render: (line: string, secret: string) => string; fps: boolean }> = [
  { place: 'plain', title: 'a plain text file, the test line as gitleaks feeds it', file: (i) => `case-${i}.txt`, render: (line) => `${line}\n`, fps: true },
  { place: 'py', title: '`config.py`: `SOME_KEY = "<secret>"`', file: (i) => `case-${i}/config.py`, render: (_l, s) => `SOME_KEY = "${s}"\n`, fps: false },
  { place: 'env', title: '`.env` content `SOME_KEY=<secret>` (not counting the file-name rule)', file: (i) => `case-${i}/.env`, render: (_l, s) => `SOME_KEY=${s}\n`, fps: false },
  { place: 'conf', title: 'a `.conf` file holding the test line', file: (i) => `case-${i}.conf`, render: (line) => `${line}\n`, fps: true },
  { place: 'js', title: 'JavaScript: `export const apiKey = "<secret>";`', file: (i) => `case-${i}.js`, render: (_l, s) => `export const apiKey = ${JSON.stringify(s)};\n`, fps: false },
  { place: 'go', title: 'Go: `const authToken = "<secret>"`', file: (i) => `case-${i}.go`, render: (_l, s) => `package config\n\nconst authToken = ${JSON.stringify(s)}\n`, fps: false },
];
const FP_FILE: Record<string, (i: number) => string> = { plain: (i) => `fp-${i}.txt`, conf: (i) => `fp-${i}.conf` };

describe("the scanner on gitleaks' own rule tests, pushed with the docker CLI", () => {
  let s: PushSandbox;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-scan-gitleaks-cases-'));
  const cases = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, 'gitleaks-rule-cases.json'), 'utf8')) as Cases;

  before(async () => {
    s = await pushSandbox('glcases');
  });
  after(async () => {
    await s?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("finds at least what gitleaks finds in every place, with at most half its false alarms", async () => {
    // The files: cases/<place>/… on disk for gitleaks, and one tar per place for the image's layers.
    const tars: Record<string, Buffer> = {};
    for (const p of PLACES) {
      const files: Array<{ path: string; content: string }> = [];
      cases.truePositives.forEach((c, i) => files.push({ path: `cases/${p.place}/${p.file(i)}`, content: p.render(c.line, c.secret) }));
      if (p.fps) cases.falsePositives.forEach((c, i) => files.push({ path: `cases/${p.place}/${FP_FILE[p.place]!(i)}`, content: `${c.text}\n` }));
      for (const f of files) {
        fs.mkdirSync(path.dirname(path.join(dir, f.path)), { recursive: true });
        fs.writeFileSync(path.join(dir, f.path), f.content);
      }
      tars[`${p.place}.tar`] = await makeTar(files);
    }
    const dockerfile = `FROM svc-fixture-busybox:latest\n${PLACES.map((p) => `ADD ${p.place}.tar /\n`).join('')}`;
    const image = await s.push('gitleaks-cases:v1', dockerfile, tars);
    assert.equal(image.visibility, 'private');
    const ours = new Set(image.versions[0]!.findings.filter((f) => f.rule !== 'env-file').map((f) => f.path));

    const version = execFileSync('dpkg-query', ['-W', '-f', '${Version}', 'gitleaks']).toString();
    const reportFile = path.join(dir, 'gitleaks.json');
    execFileSync('gitleaks', ['detect', '--no-git', '--no-banner', '--redact', '--exit-code', '0', '--log-level', 'error', '--source', path.join(dir, 'cases'), '--report-format', 'json', '--report-path', reportFile], { stdio: 'ignore' });
    const theirs = new Set((JSON.parse(fs.readFileSync(reportFile, 'utf8')) as Array<{ File: string }>).map((l) => path.join('cases', path.relative(path.join(dir, 'cases'), path.resolve(dir, 'cases', l.File)))));

    const n = cases.truePositives.length;
    const pct = (x: number, of: number) => `${x}/${of} (${Math.round((x / of) * 100)} %)`;
    const rows: string[] = [];
    const failures: string[] = [];
    for (const p of PLACES) {
      const files = cases.truePositives.map((_c, i) => `cases/${p.place}/${p.file(i)}`);
      const found = files.filter((f) => ours.has(f)).length;
      const gl = files.filter((f) => theirs.has(f)).length;
      rows.push(`| ${p.title} | ${pct(gl, n)} | ${pct(found, n)} |`);
      if (found < gl) failures.push(`${p.place}: found ${found}, gitleaks ${gl}`);
      const onlyTheirs = files.flatMap((f, i) => (theirs.has(f) && !ours.has(f) ? [cases.truePositives[i]!.rule] : []));
      if (onlyTheirs.length) console.log(`# ${p.place}: found by gitleaks only: ${onlyTheirs.join(', ')}`);
    }
    for (const p of PLACES.filter((x) => x.fps)) {
      const files = cases.falsePositives.map((_c, i) => `cases/${p.place}/${FP_FILE[p.place]!(i)}`);
      const alarms = files.filter((f) => ours.has(f)).length;
      const gl = files.filter((f) => theirs.has(f)).length;
      rows.push(`| false alarms, ${p.place === 'plain' ? 'plain files' : '`.conf` files'} (of ${files.length}) | ${gl} | ${alarms} |`);
      if (alarms * 2 > gl) failures.push(`${p.place} false alarms: ${alarms}, gitleaks ${gl}`);
    }
    console.log(`# gitleaks ${version}; ${n} true positives (gitleaks v8.16.0's rule tests), ${cases.falsePositives.length} false positives (v8.30.0's)`);
    console.log(`| where the secret sits | gitleaks ${version.split('-')[0]} | the scanner |\n|---|---|---|\n${rows.join('\n')}`);
    assert.deepEqual(failures, [], 'each place: recall ≥ gitleaks\', false alarms ≤ half of gitleaks\'');
  });
});
