import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it, before, after } from 'node:test';
import { checkSizes, listedLongUnits } from '../../scripts/check-sizes.ts';
import { ROOT, runCheck } from './run-check.ts';


/** A function of `lines` lines in all (its first and last line included). */
const longFunction = (name: string, lines: number) => `export function ${name}(): number {\n  let n = 0;\n${'  n += 1;\n'.repeat(lines - 3)}}\n`;

/** The docs' table of long units that stay, with these rows. */
const docs = (rows: string[]) => `# How it is built\n\n### Long units that stay\n\nWhy each stays:\n\n| unit | lines | why it stays |\n|---|---|---|\n${rows.join('\n')}\n\n## Design decisions\n\n| \`not/a-row.ts\` | 1 | another table |\n`;

describe('the size check (scripts/check-sizes.ts, the exceptions in docs/architecture.md)', () => {
  let root: string;
  const plant = (file: string, text: string) => {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), text);
  };
  before(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-sizes-'));
  });
  after(() => fs.rmSync(root, { recursive: true, force: true }));

  it('passes on the house as it is: every long unit is listed with why, every row names one', async () => {
    const report = checkSizes(ROOT);
    assert.deepEqual(report.over, []);
    assert.deepEqual(report.stale, []);
    assert.ok(report.kept.every((u) => u.why.length > 0));
    const { code, stdout } = await runCheck('scripts/check-sizes.ts', ROOT);
    assert.equal(code, 0);
    assert.match(stdout, /no file over 400 lines, no function over 120/);
  });

  it('fails on a planted long function, file and method, and names each', async () => {
    plant('docs/architecture.md', docs([]));
    plant('core/ok.ts', longFunction('short', 120));
    plant('core/planted.ts', longFunction('planted', 121));
    plant('lifecycle/planted-class.ts', `export class Planted {\n  run(): void {\n${'    void 0;\n'.repeat(125)}  }\n}\n`);
    plant('edge/planted-arrow.ts', `export const handler = async (): Promise<void> => {\n${'  void 0;\n'.repeat(130)}};\n`);
    plant('store/planted-file.ts', 'export const x = 1;\n'.repeat(401));
    // tests, benchmarks and scripts are not the service
    plant('test/planted.test.ts', longFunction('planted', 200));
    plant('bench/planted.ts', longFunction('planted', 200));
    try {
      const { over, stale } = checkSizes(root);
      assert.deepEqual(over.map((u) => [u.unit, u.at, u.lines]), [
        ['core/planted.ts planted', 'core/planted.ts:1', 121],
        ['edge/planted-arrow.ts handler', 'edge/planted-arrow.ts:1', 132],
        ['lifecycle/planted-class.ts Planted.run', 'lifecycle/planted-class.ts:2', 127],
        ['store/planted-file.ts', 'store/planted-file.ts:1', 401],
      ]);
      assert.deepEqual(stale, []);
      const { code, stderr } = await runCheck('scripts/check-sizes.ts', root);
      assert.equal(code, 1);
      assert.match(stderr, /^core\/planted\.ts:1: function core\/planted\.ts planted has 121 lines \(at most 120\): cut it along its jobs, or list it with why it stays in docs\/architecture\.md/m);
      assert.match(stderr, /^store\/planted-file\.ts:1: file store\/planted-file\.ts has 401 lines \(at most 400\)/m);
    } finally {
      for (const folder of ['core', 'lifecycle', 'edge', 'store', 'test', 'bench']) fs.rmSync(path.join(root, folder), { recursive: true, force: true });
    }
  });

  it('keeps a unit its table lists, and fails on a row that names no long unit', async () => {
    plant('core/planted.ts', longFunction('planted', 150));
    plant('docs/architecture.md', docs([
      '| `core/planted.ts` `planted` | 150 | a planted table of things, one short entry each |',
      '| `core/gone.ts` | 401 | cut since |',
    ]));
    try {
      assert.deepEqual(listedLongUnits(root), { 'core/planted.ts planted': 'a planted table of things, one short entry each', 'core/gone.ts': 'cut since' });
      const { over, kept, stale } = checkSizes(root);
      assert.deepEqual(over, []);
      assert.deepEqual(kept.map((u) => [u.unit, u.why]), [['core/planted.ts planted', 'a planted table of things, one short entry each']]);
      assert.deepEqual(stale, ['core/gone.ts']);
      const { code, stderr } = await runCheck('scripts/check-sizes.ts', root);
      assert.equal(code, 1);
      assert.match(stderr, /lists core\/gone\.ts, which is not over its bound \(any more\): take its row out/);
      assert.doesNotMatch(stderr, /planted/);
    } finally {
      fs.rmSync(path.join(root, 'core'), { recursive: true, force: true });
    }
  });
});
