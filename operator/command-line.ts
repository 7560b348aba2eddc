import { parseArgs } from 'node:util';
import type { Config } from '../core/config.ts';
import { finiteDuration } from '../core/durations.ts';
import type { Store, UserRecord } from '../store/index.ts';

/** What every command of the operator's `svc` shares: its options, their checks and how it prints. */

/** A mistake in the command line: exit code 2, with the usage. */
export class UsageError extends Error {}

export type Options = {
  admin?: boolean; sandbox?: string; name?: string; json?: boolean; help?: boolean; user?: string; out?: string;
  'no-admin'?: boolean; 'with-secret-key'?: boolean; action?: string; since?: string; until?: string; limit?: string; 'max-sandboxes'?: string; 'max-running'?: string; 'memory-mb'?: string; cpus?: string; 'wakes-per-hour'?: string; to?: string; deadline?: string;
};

const STRING = { type: 'string' } as const;
const FLAG = { type: 'boolean' } as const;
const OPTIONS = {
  admin: FLAG, sandbox: STRING, name: STRING, json: FLAG, user: STRING, out: STRING, 'no-admin': FLAG, 'with-secret-key': FLAG,
  action: STRING, since: STRING, until: STRING, limit: STRING,
  'max-sandboxes': STRING, 'max-running': STRING, 'memory-mb': STRING, cpus: STRING, 'wakes-per-hour': STRING,
  to: STRING, deadline: STRING,
  help: { type: 'boolean', short: 'h' },
} as const;

/** One command as typed: `group action` (or the group alone), its other words, its options. */
export interface Invocation {
  group: string;
  action: string | undefined;
  /** `user create`, `audit`: as messages name the command. */
  command: string;
  rest: string[];
  options: Options;
  config: Config;
}

/** A command that works on the store; its changes are audit rows like an admin's. */
export interface OnStore extends Invocation {
  store: Store;
  audit(action: string, target: string, detail?: string): Promise<unknown>;
}

export function parseCommandLine(argv: string[]): { positionals: string[]; options: Options } {
  try {
    const parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS });
    return { positionals: parsed.positionals, options: parsed.values as Options };
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

export const out = (line: string) => process.stdout.write(`${line}\n`);
export const note = (line: string) => process.stderr.write(`${line}\n`);

export function only(options: Options, allowed: Array<keyof Options>, command: string): void {
  for (const key of Object.keys(options) as Array<keyof Options>) {
    if (options[key] !== undefined && !allowed.includes(key)) throw new UsageError(`--${key} is not an option of "svc ${command}"`);
  }
}

export function args(positionals: string[], count: number, names: string, command: string): string[] {
  if (positionals.length !== count) throw new UsageError(`"svc ${command}" takes ${names || 'no arguments'}`);
  return positionals;
}

export function table(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const row of rows) out(row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  '));
}

/** `--deadline` of a move: a duration (90s, 30m, 2h); undefined leaves SVC_MOVE_DEADLINE's. */
export function moveDeadline(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const ms = finiteDuration(raw);
  if (ms === undefined) throw new UsageError(`--deadline needs a duration such as 90s, 30m or 2h, got "${raw}"`);
  return ms;
}

/** Sandbox names carry this prefix; `--sandbox foo` also finds `svc-foo` (spec 1). */
export const SANDBOX_PREFIX = 'svc-';

export async function resolveSandbox(store: Store, user: UserRecord, requested: string): Promise<string> {
  const candidates = requested.startsWith(SANDBOX_PREFIX) ? [requested] : [requested, SANDBOX_PREFIX + requested];
  for (const name of candidates) {
    const sandbox = await store.sandboxes.get(name);
    if (sandbox && sandbox.owner_id === user.id && !sandbox.archived_at) return name;
  }
  throw new Error(`user "${user.name}" has no sandbox named "${requested}"${requested.startsWith(SANDBOX_PREFIX) ? '' : ` (nor "${SANDBOX_PREFIX}${requested}")`}`);
}
