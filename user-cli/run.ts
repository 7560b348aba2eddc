/**
 * The user CLI's commands run from an argv: by user-cli/svc.ts (the file served at /cli/svc.mjs) and by
 * `npx svc` in a checkout (operator/svc.ts hands these commands over). Exit codes: the command's own for
 * exec, else 0 done, 1 failed, 2 usage error.
 */
import { parseArgs } from 'node:util';
import { Api, ApiError } from './api.ts';
import { commands } from './commands.ts';
import { loadSettings, UsageError } from './settings.ts';

const GLOBAL = { env: { type: 'string' }, help: { type: 'boolean', short: 'h' } } as const;

function usage(): string {
  const width = Math.max(...Object.values(commands).map((c) => c.usage.length));
  return [
    'usage: node svc.mjs [--env FILE] COMMAND [ARGS]   (svc COMMAND --help for one command)',
    '',
    ...Object.entries(commands).filter(([name]) => name !== 'tls-pipe').map(([, c]) => `  ${c.usage.padEnd(width)}  ${c.help.split('. ')[0]!.replace(/\.$/, '')}`),
    '',
    'SVC_URL, SVC_TOKEN, SVC_SANDBOX (and SVC_DOCKER_HOST) come from the environment, else from svc.env in the',
    "current folder (an export folder from the web UI), else from --env FILE. The folder's service-ca.pem is trusted.",
  ].join('\n');
}

async function main(argv: string[], self: string): Promise<number> {
  const at = argv.findIndex((a) => !a.startsWith('-') && a in commands);
  const name = at >= 0 ? argv[at]! : undefined;
  if (!name) {
    const wanted = argv.find((a) => !a.startsWith('-'));
    if (wanted && argv[argv.indexOf(wanted) - 1] !== '--env') throw new UsageError(`unknown command "${wanted}"\n${usage()}`);
    process.stdout.write(`${usage()}\n`);
    return argv.some((a) => a === '--help' || a === '-h') ? 0 : 2;
  }
  const command = commands[name]!;
  // everything after "--" belongs to the command (exec, up, ssh), never parsed here
  const dashes = argv.indexOf('--');
  const mine = [...argv.slice(0, at), ...argv.slice(at + 1, dashes >= 0 ? dashes : undefined)];
  const rest = dashes >= 0 ? argv.slice(dashes + 1) : [];
  const parsed = parseArgs({ args: mine, options: { ...GLOBAL, ...command.options }, allowPositionals: true, strict: true });
  const options = parsed.values as Record<string, string | string[] | boolean | undefined>;
  if (options.help) {
    process.stdout.write(`usage: ${command.usage}\n\n${command.help}\n`);
    return 0;
  }
  const settings = loadSettings(options.env as string | undefined);
  const code = await command.run({ api: new Api(settings), settings, args: [...parsed.positionals, ...rest], options, self });
  return code ?? 0;
}

/** Whether `svc NAME` is a command of this CLI (operator/svc.ts asks). */
export function isUserCommand(name: string | undefined): boolean {
  return name !== undefined && Object.hasOwn(commands, name);
}

/** Runs the CLI; `self` is the file that runs it again as ssh's ProxyCommand. Resolves with the exit code. */
export async function runCli(argv: string[], self: string): Promise<number> {
  try {
    return await main(argv, self);
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      process.stderr.write(`svc: ${(err as Error).message}\n`);
      return 2;
    }
    process.stderr.write(`svc: ${(err as Error).message}${err instanceof ApiError ? ` (${err.code})` : ''}\n`);
    return 1;
  }
}
