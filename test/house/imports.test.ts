import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it, before, after } from 'node:test';
import { checkImports } from '../../scripts/check-imports.ts';
import { FLOORS } from '../../scripts/house.ts';
import { ROOT, runCheck } from './run-check.ts';


/** The house's TypeScript sources (and nothing else: no packages, no builds) copied under `to`. */
function copySources(to: string): void {
  fs.cpSync(ROOT, to, {
    recursive: true,
    filter: (src) => {
      const name = path.basename(src);
      if (src === ROOT) return true;
      if (name.startsWith('.') || name === 'node_modules' || name === 'dist') return false;
      return fs.statSync(src).isDirectory() || /\.tsx?$/.test(name);
    },
  });
}

describe('the import check (scripts/check-imports.ts, floors in scripts/house.ts)', () => {
  let copy: string;
  /** What the copy holds against the house before anything is planted (nothing, when the first test passes). */
  let before0: Set<string>;
  const key = (v: { kind: string; at: string; target: string }) => `${v.kind} ${v.at} ${v.target}`;
  /** The violations a planting added, as [kind, at, target]. */
  const planted = () => checkImports(copy).filter((v) => !before0.has(key(v))).map((v) => [v.kind, v.at, v.target]);
  before(() => {
    copy = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-house-'));
    copySources(copy);
    before0 = new Set(checkImports(copy).map(key));
  });
  after(() => fs.rmSync(copy, { recursive: true, force: true }));

  it('passes on the house as it is', async () => {
    assert.deepEqual(checkImports(ROOT), []);
    const { code, stdout } = await runCheck('scripts/check-imports.ts', ROOT);
    assert.equal(code, 0);
    assert.match(stdout, /every import runs down the house/);
  });

  it('fails on an import planted up the house, and names it', async () => {
    fs.writeFileSync(path.join(copy, 'core/planted.ts'), "import type { Lifecycle } from '../lifecycle/index.ts';\nexport type Planted = Lifecycle;\n");
    try {
      assert.deepEqual(planted(), [['up', 'core/planted.ts:1', 'lifecycle/index.ts']]);
      const { code, stderr } = await runCheck('scripts/check-imports.ts', copy);
      assert.equal(code, 1);
      assert.match(stderr, /^core\/planted\.ts:1: up: core \(floor 1\) imports lifecycle\/index\.ts from lifecycle \(floor 4\), up the house$/m);
    } finally {
      fs.rmSync(path.join(copy, 'core/planted.ts'));
    }
  });

  it('fails on an import around an index.ts, sideways, of a value into the UI, and from a room on no floor', () => {
    const plant = (file: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(copy, file)), { recursive: true });
      fs.writeFileSync(path.join(copy, file), text);
    };
    plant('api/planted.ts', "export { splitRepo } from '../store/registry.ts';\n");
    plant('registry/planted.ts', "// a dynamic import counts as well\nexport const later = () => import('../api/app.ts');\n");
    plant('ui/src/planted.ts', "import { statusInWords } from '../../core/sandbox-status.ts';\nexport const said = statusInWords('running');\n");
    plant('attic/planted.ts', "export const x = 1;\n");
    try {
      assert.deepEqual(planted(), [
        ['around-index', 'api/planted.ts:1', 'store/registry.ts'],
        ['unknown-room', 'attic/planted.ts', 'attic/planted.ts'],
        ['sideways', 'registry/planted.ts:2', 'api/app.ts'],
        ['value-into-apart', 'ui/src/planted.ts:1', 'core/sandbox-status.ts'],
      ]);
    } finally {
      for (const file of ['api/planted.ts', 'registry/planted.ts', 'ui/src/planted.ts']) fs.rmSync(path.join(copy, file));
      fs.rmSync(path.join(copy, 'attic'), { recursive: true });
    }
  });

  it('lets tests reach past an index.ts, and takes types into the UI', () => {
    fs.writeFileSync(path.join(copy, 'test/planted.test.ts'), "import { splitRepo } from '../store/registry.ts';\nexport const split = splitRepo;\n");
    fs.writeFileSync(path.join(copy, 'ui/src/planted.ts'), "import type { SandboxStatus } from '../../core/sandbox-summary.ts';\nexport const s: SandboxStatus = 'running';\n");
    try {
      assert.deepEqual(planted(), []);
    } finally {
      fs.rmSync(path.join(copy, 'test/planted.test.ts'));
      fs.rmSync(path.join(copy, 'ui/src/planted.ts'));
    }
  });
});

describe('docs/architecture.md draws the floors of scripts/house.ts', () => {
  it('has one row per floor with the same rooms', () => {
    const text = fs.readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
    const drawn = Object.fromEntries([...text.matchAll(/^\| (\d+) \| (.+) \|$/gm)]
      .map(([, floor, rooms]) => [floor, [...rooms!.matchAll(/`([^`]+?)\/?`/g)].map((m) => m[1]!).sort()]));
    const table = Object.fromEntries(Object.entries(FLOORS).map(([floor, rooms]) => [floor, [...rooms].sort()]));
    assert.deepEqual(drawn, table);
  });
});
