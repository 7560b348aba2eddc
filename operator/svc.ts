#!/usr/bin/env -S node --import tsx
/**
 * `svc`, the operator's command line: accounts, hosts, backups and the doctor, on the store (design.md,
 * "Contracts: Operator"). A user's commands (status, exec, up, …) go to the user CLI (user-cli/).
 *
 *   svc user create NAME [--admin]    prints the new password as the last line of stdout
 *   svc user list [--json]
 *   svc user passwd NAME              prints a new password as the last line of stdout
 *   svc user disable NAME | svc user enable NAME
 *   svc audit [--user NAME] [--sandbox S] [--action A] [--since ISO] [--until ISO] [--limit N] [--json]
 *   svc user set NAME [--max-sandboxes N] [--max-running N] [--memory-mb N] [--cpus N] [--wakes-per-hour N] [--admin | --no-admin]
 *   svc token create NAME [--sandbox SANDBOX] [--name LABEL]
 *                                     prints the new svc_… token as the last line of stdout
 *   svc token list NAME [--json]
 *   svc token revoke TOKEN_ID
 *   svc export SANDBOX --user NAME [--out DIR]
 *                                     writes the export folder svc-<sandbox>/ (spec 1.7) into DIR (.)
 *   svc doctor                        checks this host and the configuration (docs/operations.md)
 *   svc backup FILE [--with-secret-key] | svc restore FILE
 *                                     one backup file of the store; restored into an empty store
 *   svc hosts list [--json] | svc hosts drain NAME | svc hosts undrain NAME | svc hosts remove NAME
 *   svc hosts evacuate NAME [--deadline D] | svc hosts move SANDBOX [--to HOST] [--deadline D]
 *
 * Uses the store of the service's configuration (SVC_STORE_URL, else the SQLite file in
 * SVC_DATA_DIR); safe to run while the service runs. A password or token appears on that one
 * stdout line only, never in messages or logs. Exit codes: 0 done, 1 failed (svc doctor: something
 * needed is missing), 2 usage error.
 */
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../core/config.ts';
import { openStore } from '../store/index.ts';
import { isUserCommand, runCli } from '../user-cli/run.ts';
import { auditCommand, exportCommand, tokenCommand, userCommand } from './account-commands.ts';
import { note, out, parseCommandLine, UsageError, type Invocation, type OnStore } from './command-line.ts';
import { HOSTS_ADD_GONE, hostsCommand } from './host-commands.ts';
import { backupCommand, doctorCommand, restoreCommand } from './upkeep-commands.ts';
import { USAGE } from './usage.ts';

/** One command group: its actions (none: the group is the command), and whether it works on the store. */
type Group =
  | { actions?: readonly string[]; store: true; run(inv: OnStore): Promise<void> }
  | { actions?: readonly string[]; store: false; run(inv: Invocation): Promise<void> };

const GROUPS: Record<string, Group> = {
  user: { actions: ['create', 'list', 'passwd', 'set', 'disable', 'enable'], store: true, run: userCommand },
  token: { actions: ['create', 'list', 'revoke'], store: true, run: tokenCommand },
  audit: { store: true, run: auditCommand },
  export: { store: true, run: exportCommand },
  hosts: { actions: ['list', 'drain', 'undrain', 'remove', 'evacuate', 'move'], store: true, run: hostsCommand },
  doctor: { store: false, run: doctorCommand },
  backup: { store: false, run: backupCommand },
  restore: { store: false, run: restoreCommand },
};

async function run(argv: string[]): Promise<void> {
  // before its options are parsed: the line an old runner.sh printed (--pool, --csr, …) gets the answer, not a usage error
  if (argv[0] === 'hosts' && argv[1] === 'add') throw new Error(HOSTS_ADD_GONE);
  const { positionals, options } = parseCommandLine(argv);
  const [group, action, ...rest] = positionals;
  if (options.help || group === 'help' || group === undefined) {
    if (group === undefined && !options.help) throw new UsageError('no command given');
    out(USAGE);
    return;
  }
  const known = Object.hasOwn(GROUPS, group) ? GROUPS[group]! : undefined;
  const single = known !== undefined && !known.actions;
  const command = single ? group : `${group} ${action ?? ''}`.trim();
  if (single && action !== undefined) rest.unshift(action);
  if (!known || (known.actions && !known.actions.includes(action!))) throw new UsageError(`unknown command "svc ${command}"`);
  const inv: Invocation = { group, action: single ? undefined : action, command, rest, options, config: loadConfig() };
  if (!known.store) return known.run(inv);

  const { config } = inv;
  const store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
  // the operator's actions are audit rows like an admin's, with the command line as their source
  const audit = (action: string, target: string, detail?: string) =>
    store.audit.append({ action, outcome: 'ok', source: `cli:${os.userInfo().username}`, target, ...(detail ? { detail } : {}) });
  try {
    await known.run({ ...inv, store, audit });
  } finally {
    await store.close();
  }
}

const argv = process.argv.slice(2);
// a user's commands (status, exec, cp, ssh, up, …) are the user CLI's, served at /cli/svc.mjs
const asked = argv.find((a, i) => !a.startsWith('-') && argv[i - 1] !== '--env');
try {
  if (isUserCommand(asked)) process.exitCode = await runCli(argv, fileURLToPath(import.meta.url));
  else await run(argv);
} catch (error) {
  if (error instanceof UsageError) {
    note(`svc: ${error.message}\n\n${USAGE}`);
    process.exitCode = 2;
  } else {
    note(`svc: ${(error as Error).message ?? String(error)}`);
    process.exitCode = 1;
  }
}
