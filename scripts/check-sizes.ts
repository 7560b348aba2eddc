/**
 * The size check (`npm run check:sizes`; in `npm test` through test/house/sizes.test.ts): reads every
 * TypeScript file of the service (every room but those that test and measure it, and scripts/) with the
 * TypeScript parser and fails on a file over MAX_FILE_LINES lines or a function over MAX_FUNCTION_LINES
 * (scripts/house.ts), unless the table "Long units that stay" of docs/architecture.md lists it with why
 * it stays; and on a row there that names no long unit (the table says what is, never what was).
 * Usage: tsx scripts/check-sizes.ts [ROOT]; exit code 1 with one line per unit.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { MAX_FILE_LINES, MAX_FUNCTION_LINES, NOT_ROOMS, TEST_SUPPORT } from './house.ts';

/** A file or function over its bound: `file` alone for a file, `file function` for a function. */
export interface LongUnit {
  /** How the table names it: `user-cli/commands.ts`, or `service.ts startService` (its first cell: `service.ts` `startService`, each in backticks). */
  unit: string;
  /** Where it begins, for the message: `edge/edge.ts:12`. */
  at: string;
  lines: number;
  limit: number;
}

export interface SizeReport {
  /** Units over their bound that the table does not list. */
  over: LongUnit[];
  /** Units over their bound that it lists, with its reason. */
  kept: Array<LongUnit & { why: string }>;
  /** Rows of the table that name no unit over its bound (cut since, or renamed). */
  stale: string[];
}

/** Rooms that are not the service: they test, measure or build it. */
const NOT_SERVICE = [...TEST_SUPPORT, 'scripts'];
const SOURCE = /\.(ts|tsx|mts|cts)$/;

function serviceFiles(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = dir ? `${dir}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        if (entry.name.startsWith('.') || entry.name === 'node_modules' || entry.name === 'dist') continue;
        if (!dir && (NOT_ROOMS.includes(entry.name) || NOT_SERVICE.includes(entry.name))) continue;
        walk(rel);
      } else if (SOURCE.test(entry.name)) {
        files.push(rel);
      }
    }
  };
  walk('');
  return files.sort();
}

/** The text of a name node, or undefined for a computed one. */
function nameText(name: ts.Node | undefined): string | undefined {
  if (!name) return undefined;
  if (ts.isIdentifier(name) || ts.isPrivateIdentifier(name) || ts.isStringLiteral(name) || ts.isNumericLiteral(name)) return name.text;
  return undefined;
}

/**
 * What a function is called in the list: its own name, `Class.method`, the variable or property it is
 * given to, or, for one passed as an argument, `callee(…)` after the name of the function around it.
 */
function functionName(node: ts.FunctionLikeDeclaration, around: string | undefined): string {
  const parent = node.parent;
  if (ts.isMethodDeclaration(node) || ts.isConstructorDeclaration(node) || ts.isGetAccessor(node) || ts.isSetAccessor(node)) {
    const cls = ts.isClassLike(parent) ? (nameText(parent.name) ?? '(class)') : (around ?? '(object)');
    const own = ts.isConstructorDeclaration(node) ? 'constructor' : (nameText(node.name) ?? '(computed)');
    return `${cls}.${own}`;
  }
  const own = nameText(node.name);
  if (own) return own;
  if (ts.isVariableDeclaration(parent)) return nameText(parent.name) ?? '(destructured)';
  if (ts.isPropertyAssignment(parent)) return `${around ? `${around}.` : ''}${nameText(parent.name) ?? '(computed)'}`;
  if (ts.isExportAssignment(parent)) return 'default';
  if (ts.isCallExpression(parent) || ts.isNewExpression(parent)) {
    const callee = parent.expression.getText().replace(/\s+/g, '');
    return `${around ? `${around} ` : ''}${callee}(…)`;
  }
  return `${around ? `${around} ` : ''}(anonymous)`;
}

/** Every file and function of the service over its bound, each once (a function inside a long one counts on its own too). */
export function longUnits(root: string): LongUnit[] {
  const found: LongUnit[] = [];
  for (const file of serviceFiles(root)) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, file.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
    const fileLines = text.endsWith('\n') ? text.split('\n').length - 1 : text.split('\n').length;
    if (fileLines > MAX_FILE_LINES) found.push({ unit: file, at: `${file}:1`, lines: fileLines, limit: MAX_FILE_LINES });
    const line = (pos: number) => source.getLineAndCharacterOfPosition(pos).line + 1;
    const visit = (node: ts.Node, around: string | undefined) => {
      let inner = around;
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const fn = node as ts.FunctionLikeDeclaration;
        const name = functionName(fn, around);
        const first = line(fn.getStart(source));
        const lines = line(fn.getEnd()) - first + 1;
        if (lines > MAX_FUNCTION_LINES) found.push({ unit: `${file} ${name}`, at: `${file}:${first}`, lines, limit: MAX_FUNCTION_LINES });
        inner = name;
      } else if (ts.isClassLike(node)) {
        inner = nameText(node.name) ?? around;
      }
      ts.forEachChild(node, (child) => visit(child, inner));
    };
    visit(source, undefined);
  }
  return found;
}

/** Where the long units that stay are listed (under the root), and the heading of their table. */
export const LONG_UNITS_DOC = 'docs/architecture.md';
const LONG_UNITS_HEADING = '### Long units that stay';

/**
 * The table of long units that stay, by unit, with why: each row's first cell names the file in
 * backticks and, for a function, the function in backticks after it; its last cell says why.
 */
export function listedLongUnits(root: string): Record<string, string> {
  const text = fs.readFileSync(path.join(root, LONG_UNITS_DOC), 'utf8');
  const at = text.indexOf(LONG_UNITS_HEADING);
  if (at < 0) throw new Error(`${LONG_UNITS_DOC} has no "${LONG_UNITS_HEADING}" section`);
  const section = text.slice(at + LONG_UNITS_HEADING.length).split(/^#{1,3} /m)[0]!;
  const listed: Record<string, string> = {};
  for (const [, first, why] of section.matchAll(/^\| (`[^|]+) \|[^|\n]*\| (.+) \|$/gm)) {
    listed[[...first!.matchAll(/`([^`]+)`/g)].map((m) => m[1]).join(' ')] = why!;
  }
  return listed;
}

/** The service's long units against the table of those that stay (by default, the one under the root). */
export function checkSizes(root: string, exceptions: Readonly<Record<string, string>> = listedLongUnits(root)): SizeReport {
  const units = longUnits(root);
  const named = new Set(units.map((u) => u.unit));
  return {
    over: units.filter((u) => exceptions[u.unit] === undefined),
    kept: units.flatMap((u) => (exceptions[u.unit] === undefined ? [] : [{ ...u, why: exceptions[u.unit]! }])),
    stale: Object.keys(exceptions).filter((unit) => !named.has(unit)),
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'));
  const { over, kept, stale } = checkSizes(root);
  for (const u of over) process.stderr.write(`${u.at}: ${u.unit.includes(' ') ? 'function' : 'file'} ${u.unit} has ${u.lines} lines (at most ${u.limit}): cut it along its jobs, or list it with why it stays in ${LONG_UNITS_DOC} ("Long units that stay")\n`);
  for (const unit of stale) process.stderr.write(`${LONG_UNITS_DOC}: "Long units that stay" lists ${unit}, which is not over its bound (any more): take its row out\n`);
  if (over.length + stale.length > 0) {
    process.stderr.write(`check-sizes: ${over.length} unit(s) over their bound, ${stale.length} stale exception(s); ${kept.length} listed long units stay\n`);
    process.exitCode = 1;
  } else {
    process.stdout.write(`check-sizes: no file over ${MAX_FILE_LINES} lines, no function over ${MAX_FUNCTION_LINES}, but the ${kept.length} that ${LONG_UNITS_DOC} lists\n`);
  }
}
