import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { scanText } from '../../scanner/content-scanner.ts';
import { scanLayer } from '../../scanner/layer-reader.ts';
import { builtInRules } from '../../scanner/rule-set.ts';
import { gzip, makeTar, sha256 } from '../../harness/oci.ts';
import { CONFIG_TYPES, FILE_TYPES, falsePositives, Rand, secretKinds, seeded } from './corpus.ts';

/**
 * The scanner against gitleaks 8.16 (Debian's package, the reference) on the same files in the same
 * run: secrets of every family in every file type (recall), and look-alikes that are not secrets
 * (false alarms). Our files go through the real layer reader as one layer; Env and history entries
 * through the config path's scan. gitleaks reads the same bytes from a folder (Env and history
 * entries as one file each, since it cannot read an image). Prints the tables docs/scanner.md quotes.
 */
describe('secret scan against gitleaks', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-scan-corpus-'));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('finds at least what gitleaks finds in every file type, with at most half its false alarms', async () => {
    const rand = new Rand(seeded(18));
    type Case = { family: string; kind: string; type: string; file: string; content: string; config?: boolean };
    const cases: Case[] = [];
    let n = 0;
    for (const k of secretKinds()) {
      for (const t of FILE_TYPES) {
        n += 1;
        cases.push({ family: k.family, kind: k.kind, type: t.type, file: t.file(n), content: t.render(k.name, k.make(rand)) });
      }
      for (const t of CONFIG_TYPES) {
        n += 1;
        cases.push({ family: k.family, kind: k.kind, type: t.type, file: `image-config/${t.type}-${n}.txt`, content: `${t.render(k.name, k.make(rand))}\n`, config: true });
      }
    }
    const fps = falsePositives();
    for (const f of [...cases, ...fps.map((p) => ({ file: p.file, content: p.content }))]) {
      fs.mkdirSync(path.dirname(path.join(dir, f.file)), { recursive: true });
      fs.writeFileSync(path.join(dir, f.file), f.content);
    }

    // gitleaks over the folder; its report names each file it flagged.
    const report = path.join(os.tmpdir(), `svc-gitleaks-${process.pid}.json`);
    execFileSync('gitleaks', ['detect', '--no-git', '--no-banner', '--redact', '--exit-code', '0', '--log-level', 'error', '--source', dir, '--report-format', 'json', '--report-path', report], { stdio: 'ignore' });
    const leaks = JSON.parse(fs.readFileSync(report, 'utf8')) as Array<{ File: string; RuleID: string }>;
    fs.rmSync(report, { force: true });
    const theirs = new Set(leaks.map((l) => path.relative(dir, path.resolve(dir, l.File))));

    // Ours: files through the layer reader, a layer per file type (a layer keeps at most 1000
    // findings); config entries as the config scan reads them.
    const ours = new Set<string>();
    const groups = new Map<string, Array<{ file: string; content: string }>>();
    for (const c of [...cases.filter((x) => !x.config), ...fps.map((p) => ({ ...p, type: 'look-alikes' }))]) groups.set(c.type, [...(groups.get(c.type) ?? []), c]);
    for (const [type, files] of groups) {
      const layer = gzip(await makeTar(files.map((c) => ({ path: c.file, content: c.content }))));
      const result = await scanLayer(Readable.from([layer]), { digest: sha256(layer) });
      assert.notEqual(result.state, 'unscannable', `${type}: ${result.reason}`);
      for (const f of result.findings) ours.add(f.path);
    }
    for (const c of cases.filter((x) => x.config)) if (scanText(builtInRules(), c.content.trimEnd()).length) ours.add(c.file);

    const table = (title: string, keyOf: (c: Case) => string) => {
      const rows = new Map<string, { total: number; ours: number; theirs: number }>();
      for (const c of cases) {
        const row = rows.get(keyOf(c)) ?? { total: 0, ours: 0, theirs: 0 };
        row.total += 1;
        if (ours.has(c.file)) row.ours += 1;
        if (theirs.has(c.file)) row.theirs += 1;
        rows.set(keyOf(c), row);
      }
      const pct = (a: number, b: number) => `${((a / b) * 100).toFixed(0)} %`;
      console.log(`| ${title} | secrets | svc scanner | gitleaks 8.16 |`);
      console.log('|---|---|---|---|');
      for (const [key, r] of rows) console.log(`| ${key} | ${r.total} | ${r.ours} (${pct(r.ours, r.total)}) | ${r.theirs} (${pct(r.theirs, r.total)}) |`);
      return rows;
    };
    const byType = table('file type', (c) => c.type);
    table('family', (c) => c.family);

    const fpRows = new Map<string, { total: number; ours: number; theirs: number }>();
    for (const p of fps) {
      const row = fpRows.get(p.category) ?? { total: 0, ours: 0, theirs: 0 };
      row.total += 1;
      if (ours.has(p.file)) row.ours += 1;
      if (theirs.has(p.file)) row.theirs += 1;
      fpRows.set(p.category, row);
    }
    console.log('| look-alikes | files | flagged by svc scanner | flagged by gitleaks 8.16 |');
    console.log('|---|---|---|---|');
    for (const [key, r] of fpRows) console.log(`| ${key} | ${r.total} | ${r.ours} | ${r.theirs} |`);
    const fpOurs = [...fpRows.values()].reduce((a, r) => a + r.ours, 0);
    const fpTheirs = [...fpRows.values()].reduce((a, r) => a + r.theirs, 0);
    console.log(`false alarms: svc scanner ${fpOurs}/${fps.length}, gitleaks ${fpTheirs}/${fps.length}`);
    console.log(`missed by the svc scanner: ${cases.filter((c) => !ours.has(c.file)).map((c) => `${c.kind} in ${c.type}`).join('; ') || 'none'}`);
    console.log(`found by gitleaks and missed by the svc scanner: ${cases.filter((c) => !ours.has(c.file) && theirs.has(c.file)).map((c) => `${c.kind} in ${c.type}`).join('; ') || 'none'}`);
    console.log(`flagged look-alikes: ${fps.filter((p) => ours.has(p.file)).map((p) => p.file).join(', ') || 'none'}`);

    for (const [type, r] of byType) assert.ok(r.ours >= r.theirs, `${type}: svc scanner found ${r.ours}/${r.total}, gitleaks ${r.theirs}/${r.total}`);
    assert.ok(fpTheirs > 0, 'gitleaks flags some look-alikes (else the false-alarm corpus measures nothing)');
    assert.ok(fpOurs * 2 <= fpTheirs, `false alarms: svc scanner ${fpOurs}, gitleaks ${fpTheirs}: at most half`);
  });
});
