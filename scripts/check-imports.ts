/**
 * The import check (`npm run check:imports`; in `npm test` through test/house/imports.test.ts):
 * reads every TypeScript file of the house with the TypeScript parser and fails on an import that
 * runs up the house or sideways (scripts/house.ts holds the floors), that reaches past another
 * room's index.ts, that a room built apart takes as a value, or that comes from a room the table
 * does not know. Usage: tsx scripts/check-imports.ts [ROOT]; exit code 1 with one line per import.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { FLOORS, NOT_ROOMS, TEST_SUPPORT, TYPES_ONLY_FROM_OTHERS } from './house.ts';

export type ViolationKind = 'up' | 'sideways' | 'around-index' | 'value-into-apart' | 'unknown-room';

export interface Violation {
  kind: ViolationKind;
  /** Relative to the root, with the line: `core/config.ts:4`. */
  at: string;
  /** The imported file, relative to the root. */
  target: string;
  message: string;
}

interface Import {
  specifier: string;
  line: number;
  typeOnly: boolean;
}

const SOURCE = /\.(ts|tsx|mts|cts)$/;
const FLOOR_OF = new Map(Object.entries(FLOORS).flatMap(([floor, rooms]) => rooms.map((room) => [room, Number(floor)] as const)));

/** The room a path (relative to the root) belongs to: its top-level folder, or the top-level file itself. */
export function roomOf(file: string): string {
  return file.split('/')[0]!;
}

function sourceFiles(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = dir ? `${dir}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        if (entry.name.startsWith('.') || entry.name === 'node_modules' || entry.name === 'dist' || (!dir && NOT_ROOMS.includes(entry.name))) continue;
        walk(rel);
      } else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) {
        files.push(rel);
      }
    }
  };
  walk('');
  return files.sort();
}

/** Every static import and re-export with a module specifier, and every import() of a string literal. */
function importsOf(file: string, text: string): Import[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, file.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  const found: Import[] = [];
  const add = (node: ts.Node, specifier: ts.Expression | undefined, typeOnly: boolean) => {
    if (specifier && ts.isStringLiteral(specifier)) {
      found.push({ specifier: specifier.text, line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1, typeOnly });
    }
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const bindings = clause?.namedBindings;
      const typeOnly = !!clause && (clause.isTypeOnly
        || (!clause.name && !!bindings && ts.isNamedImports(bindings) && bindings.elements.length > 0 && bindings.elements.every((e) => e.isTypeOnly)));
      add(node, node.moduleSpecifier, typeOnly);
    } else if (ts.isExportDeclaration(node)) {
      const clause = node.exportClause;
      const typeOnly = node.isTypeOnly || (!!clause && ts.isNamedExports(clause) && clause.elements.length > 0 && clause.elements.every((e) => e.isTypeOnly));
      add(node, node.moduleSpecifier, typeOnly);
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node, node.moduleReference.expression, node.isTypeOnly);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node, node.arguments[0], false);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node, node.argument.literal as ts.Expression, true);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

function floorName(room: string): string {
  return `${room} (floor ${FLOOR_OF.get(room)})`;
}

/** Checks every import between rooms under `root`; an empty list is a house in order. */
export function checkImports(root: string): Violation[] {
  const violations: Violation[] = [];
  const known = new Set<string>();
  for (const file of sourceFiles(root)) {
    const from = roomOf(file);
    if (!FLOOR_OF.has(from)) {
      if (!known.has(from)) violations.push({ kind: 'unknown-room', at: file, target: file, message: `${from} is on no floor: add it to scripts/house.ts` });
      known.add(from);
      continue;
    }
    for (const imp of importsOf(file, fs.readFileSync(path.join(root, file), 'utf8'))) {
      if (!imp.specifier.startsWith('.')) continue; // a package
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), imp.specifier));
      const to = roomOf(target);
      if (to === from) continue;
      const at = `${file}:${imp.line}`;
      const fromFloor = FLOOR_OF.get(from)!;
      const toFloor = FLOOR_OF.get(to);
      if (toFloor === undefined) {
        violations.push({ kind: 'unknown-room', at, target, message: `imports ${target}, whose room ${to} is on no floor of scripts/house.ts` });
        continue;
      }
      if (toFloor > fromFloor) {
        violations.push({ kind: 'up', at, target, message: `${floorName(from)} imports ${target} from ${floorName(to)}, up the house` });
      } else if (toFloor === fromFloor) {
        violations.push({ kind: 'sideways', at, target, message: `${floorName(from)} imports ${target} from ${to} on the same floor` });
      }
      if (TYPES_ONLY_FROM_OTHERS.includes(from) && !imp.typeOnly) {
        violations.push({ kind: 'value-into-apart', at, target, message: `${from} is built apart: it may take only types from ${target} (import type)` });
      }
      const index = `${to}/index.ts`;
      if (!TEST_SUPPORT.includes(from) && target !== index && fs.existsSync(path.join(root, index))) {
        violations.push({ kind: 'around-index', at, target, message: `imports ${target} past ${index}: import it from there (export it there if it is not)` });
      }
    }
  }
  return violations;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'));
  const violations = checkImports(root);
  for (const v of violations) process.stderr.write(`${v.at}: ${v.kind}: ${v.message}\n`);
  if (violations.length > 0) {
    const counts = new Map<ViolationKind, number>();
    for (const v of violations) counts.set(v.kind, (counts.get(v.kind) ?? 0) + 1);
    const summary = [...counts].map(([kind, n]) => `${n} ${kind}`).join(', ');
    process.stderr.write(`check-imports: ${violations.length} imports against the house (${summary}); floors in scripts/house.ts\n`);
    process.exitCode = 1;
  } else {
    process.stdout.write('check-imports: every import runs down the house, through index.ts\n');
  }
}
