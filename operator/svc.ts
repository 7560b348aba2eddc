#!/usr/bin/env -S node --import tsx
/**
 * `svc`: accounts from the command line (design.md, "Contracts: Operator").
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
 *   svc hosts add NAME ADDRESS --pool CIDR [--port N] [--csr FILE] [--certs-out DIR] [--same-machine] [--networks N] [--dns A,B]
 *   svc hosts list [--json] | svc hosts drain NAME | svc hosts undrain NAME | svc hosts remove NAME
 *   svc hosts evacuate NAME [--deadline D] | svc hosts move SANDBOX [--to HOST] [--deadline D]
 *
 * Uses the store of the service's configuration (SVC_STORE_URL, else the SQLite file in
 * SVC_DATA_DIR); safe to run while the service runs. A password or token appears on that one
 * stdout line only, never in messages or logs. Exit codes: 0 done, 1 failed (svc doctor: something
 * needed is missing), 2 usage error.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { isUserCommand, runCli } from '../cli/run.ts';
import { loadConfig } from '../core/config.ts';
import { openStore, type Store } from '../store/index.ts';
import type { TokenRecord, UserRecord } from '../store/records.ts';
import { createToken, createUser, listTokens, requireUserByName, resetPassword, revokeToken, setDisabled, updateUser } from '../accounts/index.ts';
import { serviceCaPem } from '../edge/index.ts';
import { effectiveQuotas, quotaDefaults, setQuotas, type QuotaName } from '../accounts/quotas.ts';
import { exportSandbox, managerNotIncluded } from '../export/index.ts';
import { writeFolder } from '../export/write-folder.ts';
import { doctorChecks, runDoctor } from '../ops/doctor.ts';
import { restoreBackup, writeBackup } from '../ops/backup.ts';
import { redactUrl } from '../store/kv.ts';
import { addHost, listHosts, openMoves, progressLine, removeHost, setDrained, writeHostFiles } from '../ops/hosts.ts';
import { evacuateHost, moveSandbox } from '../lifecycle/move.ts';
import { finiteDuration } from '../core/durations.ts';
import { readFile } from 'node:fs/promises';

const USAGE = `usage:
  svc user create NAME [--admin]      create a user; prints the new password (last line)
  svc user list [--json]              list users
  svc user passwd NAME                set a new generated password; prints it (last line)
  svc user set NAME [--max-sandboxes N] [--max-running N] [--memory-mb N] [--cpus N] [--wakes-per-hour N]
                    [--admin | --no-admin]
                                      set the user's quotas (N "default": back to the operator's default)
                                      and admin flag; prints the quotas in force
  svc user disable NAME               refuse the user's tokens and web sessions at once (their sandboxes
                                      cannot be woken; the admin API also puts running ones to sleep)
  svc user enable NAME                let a disabled user in again
  svc audit [--user NAME] [--sandbox SANDBOX] [--action ACTION] [--since ISO] [--until ISO] [--limit N] [--json]
                                      the audit log, newest first (ACTION: sandbox.create, or a family: sandbox.)
  svc token create NAME [--sandbox SANDBOX] [--name LABEL]
                                      create a personal access token for user NAME; prints it (last line)
                                      --sandbox limits the token to one of the user's sandboxes
  svc token list NAME [--json]        list the user's tokens (never their values)
  svc token revoke TOKEN_ID           revoke a token
  svc export SANDBOX --user NAME [--out DIR]
                                      write the export folder svc-<sandbox>/ of NAME's sandbox into DIR (.):
                                      svc.env with a new token limited to the sandbox, docker/ certificates, README
  svc doctor                          check this host and the configuration, one line each with what to fix;
                                      exit code 0 only when everything needed is there
  svc backup FILE [--with-secret-key] write one backup file (0600) of the store while the service runs: records with
                                      their secrets still sealed, the CA, the registry token key, the audit log, the
                                      list of archives; the secret key file only with --with-secret-key
  svc restore FILE                    restore a backup into an empty store (SVC_STORE_URL, SVC_STORE_TABLE); says what
                                      else to copy (secret key, archives, registry blobs)
  svc hosts add NAME ADDRESS --pool CIDR [--port N] [--csr FILE] [--certs-out DIR] [--same-machine] [--networks N]
                                      register a runner host (scripts/runner.sh prints this line): the service CA signs
                                      its engine certificate (for the request in FILE, or a new key) and the service's
                                      client certificate; ca.pem and cert.pem (key.pem) go to DIR (default ./NAME-certs);
                                      --pool: its sandbox addresses (none of this machine's sandboxes reaches them);
                                      --networks: sandbox networks its pool holds (what its engine reports);
                                      --dns: its nameservers, for its sandboxes' inner containers (else SVC_SANDBOX_DNS)
  svc hosts list [--json]             hosts with state, sandboxes, memory and CPU committed / total
  svc hosts drain NAME                no new sandboxes on NAME ("local": this machine); undrain opens it again
  svc hosts evacuate NAME [--deadline D]
                                      move every sandbox of the drained host NAME to the hosts placement chooses
                                      (volumes copied and checked, the sandbox down meanwhile; it wakes on its new
                                      host at its next request); prints each move's progress; one that fails is
                                      rolled back and named at the end, the others move
  svc hosts move SANDBOX [--to HOST] [--deadline D]
                                      move one sandbox to HOST (default: the host placement chooses), as evacuate
                                      does; --deadline (30m, 2h; default SVC_MOVE_DEADLINE, 1h): a move not done
                                      by then is rolled back
  svc hosts remove NAME               forget a drained host; refused while it holds sandboxes (docs/scale-out.md)

a user's commands (status, ls, create, start, keep-awake, logs, exec, cp, ssh, docker-context, up, urls)
  are the user CLI's, with SVC_URL/SVC_TOKEN/SVC_SANDBOX or svc.env: svc status --help (docs/user-tools.md)

environment: SVC_STORE_URL (postgres://… or sqlite:///…), else SVC_DATA_DIR (./data)/svc.sqlite;
             SVC_DOMAIN and SVC_HTTPS_PORT for the addresses in an export folder`;

/** Sandbox names carry this prefix; `--sandbox foo` also finds `svc-foo` (spec 1). */
const SANDBOX_PREFIX = 'svc-';

class UsageError extends Error {}

type Options = {
  admin?: boolean; sandbox?: string; name?: string; json?: boolean; help?: boolean; user?: string; out?: string;
  'no-admin'?: boolean; 'with-secret-key'?: boolean; port?: string; csr?: string; 'certs-out'?: string; 'same-machine'?: boolean; networks?: string; pool?: string; dns?: string; action?: string; since?: string; until?: string; limit?: string; 'max-sandboxes'?: string; 'max-running'?: string; 'memory-mb'?: string; cpus?: string; 'wakes-per-hour'?: string; to?: string; deadline?: string;
};

/** `svc user set` options and the quota each sets. */
const QUOTA_OPTIONS: Array<[keyof Options, QuotaName]> = [
  ['max-sandboxes', 'max_sandboxes'], ['max-running', 'max_running'], ['memory-mb', 'memory_mb'], ['cpus', 'cpus'], ['wakes-per-hour', 'wakes_per_hour'],
];

function quotaNumber(option: string, raw: string): number | null {
  if (raw === 'default') return null;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${option} needs a number or "default", got "${raw}"`);
  return n;
}

const out = (line: string) => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stderr.write(`${line}\n`);

function only(options: Options, allowed: Array<keyof Options>, command: string): void {
  for (const key of Object.keys(options) as Array<keyof Options>) {
    if (options[key] !== undefined && !allowed.includes(key)) throw new UsageError(`--${key} is not an option of "svc ${command}"`);
  }
}

/** `--deadline` of a move: a duration (90s, 30m, 2h); undefined leaves SVC_MOVE_DEADLINE's. */
function moveDeadline(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const ms = finiteDuration(raw);
  if (ms === undefined) throw new UsageError(`--deadline needs a duration such as 90s, 30m or 2h, got "${raw}"`);
  return ms;
}

function args(positionals: string[], count: number, names: string, command: string): string[] {
  if (positionals.length !== count) throw new UsageError(`"svc ${command}" takes ${names || 'no arguments'}`);
  return positionals;
}

function table(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  for (const row of rows) out(row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  '));
}

async function resolveSandbox(store: Store, user: UserRecord, requested: string): Promise<string> {
  const candidates = requested.startsWith(SANDBOX_PREFIX) ? [requested] : [requested, SANDBOX_PREFIX + requested];
  for (const name of candidates) {
    const sandbox = await store.sandboxes.get(name);
    if (sandbox && sandbox.owner_id === user.id && !sandbox.archived_at) return name;
  }
  throw new Error(`user "${user.name}" has no sandbox named "${requested}"${requested.startsWith(SANDBOX_PREFIX) ? '' : ` (nor "${SANDBOX_PREFIX}${requested}")`}`);
}

function tokenRow(t: TokenRecord): string[] {
  return [t.id, t.name ?? '-', t.sandbox ?? '(all)', t.created_at, t.revoked_at ? `revoked ${t.revoked_at}` : 'active'];
}

async function run(argv: string[]): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        admin: { type: 'boolean' },
        sandbox: { type: 'string' },
        name: { type: 'string' },
        json: { type: 'boolean' },
        user: { type: 'string' },
        out: { type: 'string' },
        'no-admin': { type: 'boolean' },
        'with-secret-key': { type: 'boolean' },
        action: { type: 'string' },
        since: { type: 'string' },
        until: { type: 'string' },
        limit: { type: 'string' },
        'max-sandboxes': { type: 'string' },
        'max-running': { type: 'string' },
        'memory-mb': { type: 'string' },
        cpus: { type: 'string' },
        'wakes-per-hour': { type: 'string' },
        port: { type: 'string' },
        csr: { type: 'string' },
        'certs-out': { type: 'string' },
        'same-machine': { type: 'boolean' },
        networks: { type: 'string' },
        pool: { type: 'string' },
        dns: { type: 'string' },
        to: { type: 'string' },
        deadline: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const options = parsed.values as Options;
  const [group, action, ...rest] = parsed.positionals;
  if (options.help || group === 'help' || group === undefined) {
    if (group === undefined && !options.help) throw new UsageError('no command given');
    out(USAGE);
    return;
  }
  const single = ['export', 'audit', 'doctor', 'backup', 'restore'].includes(group);
  const command = single ? group : `${group} ${action ?? ''}`.trim();
  if (single && action !== undefined) rest.unshift(action);
  const known = ['user create', 'user list', 'user passwd', 'user set', 'user disable', 'user enable', 'audit', 'token create', 'token list', 'token revoke', 'export', 'doctor', 'backup', 'restore',
    'hosts add', 'hosts list', 'hosts drain', 'hosts undrain', 'hosts remove', 'hosts evacuate', 'hosts move'];
  if (!known.includes(command)) throw new UsageError(`unknown command "svc ${command}"`);

  const config = loadConfig();
  if (command === 'doctor') {
    only(options, [], command);
    args(rest, 0, '', command);
    if (!(await runDoctor(doctorChecks(config), out))) {
      note('svc doctor: something needed is missing (FAIL lines above)');
      process.exitCode = 1;
    }
    return;
  }
  if (command === 'backup') {
    only(options, ['with-secret-key'], command);
    const [file] = args(rest, 1, 'FILE', command);
    const done = await writeBackup(config, file!, { withSecretKey: options['with-secret-key'] === true });
    out(`wrote ${file}: ${done.records} records, ${done.audit} audit rows, ${done.archives} archives listed; ` +
      (done.withSecretKey ? 'WITH the secret key: keep the file as safe as the key itself' : `without the secret key: keep ${config.secretKeyFile} apart, a restore needs it`));
    return;
  }
  if (command === 'restore') {
    only(options, [], command);
    const [file] = args(rest, 1, 'FILE', command);
    const done = await restoreBackup(config, file!);
    out(`restored ${done.records} records (${done.users} users, ${done.sandboxes} sandboxes) and ${done.audit} audit rows into ${redactUrl(config.storeUrl)}`);
    for (const line of done.missing) note(`missing: ${line}`);
    return;
  }
  const store = await openStore(config.storeUrl, { table: config.storeTable, secretKeyFile: config.secretKeyFile });
  // the operator's actions are audit rows like an admin's, with the command line as their source
  const audit = (action: string, target: string, detail?: string) =>
    store.audit.append({ action, outcome: 'ok', source: `cli:${os.userInfo().username}`, target, ...(detail ? { detail } : {}) });
  try {
    switch (command) {
      case 'user create': {
        only(options, ['admin'], command);
        const [name] = args(rest, 1, 'NAME', command);
        const { user, password } = await createUser(store, { name: name!, admin: options.admin === true });
        await audit('admin.user_create', user.name, user.admin ? 'admin' : undefined);
        out(`created user ${user.name}${user.admin ? ' (admin)' : ''}, id ${user.id}; password (shown once):`);
        out(password);
        return;
      }
      case 'user passwd': {
        only(options, [], command);
        const [name] = args(rest, 1, 'NAME', command);
        const { user, password } = await resetPassword(store, name!);
        await audit('admin.user_password_reset', user.name);
        out(`new password for ${user.name} (shown once):`);
        out(password);
        return;
      }
      case 'user set': {
        only(options, ['admin', 'no-admin', ...QUOTA_OPTIONS.map(([o]) => o)], command);
        const [name] = args(rest, 1, 'NAME', command);
        if (options.admin && options['no-admin']) throw new UsageError('give --admin or --no-admin, not both');
        const change = Object.fromEntries(QUOTA_OPTIONS.filter(([o]) => options[o] !== undefined)
          .map(([o, q]) => [q, quotaNumber(o, options[o] as string)]));
        const admin = options.admin ? true : options['no-admin'] ? false : undefined;
        if (Object.keys(change).length === 0 && admin === undefined) throw new UsageError('"svc user set" needs at least one of --max-sandboxes, --max-running, --memory-mb, --cpus, --wakes-per-hour, --admin, --no-admin');
        let user = await setQuotas(store, name!, change);
        if (admin !== undefined) user = await updateUser(store, user.id, (u) => ({ ...u, admin }));
        await audit('admin.user_update', user.name, JSON.stringify({ ...(admin !== undefined ? { admin } : {}), quotas: change }));
        const quotas = effectiveQuotas(user, quotaDefaults(config));
        out(`${user.name}${user.admin ? ' (admin)' : ''}: ${Object.entries(quotas).map(([q, v]) => `${q} ${v}${user.quotas?.[q as QuotaName] === undefined ? ' (default)' : ''}`).join(', ')}`);
        return;
      }
      case 'user disable':
      case 'user enable': {
        only(options, [], command);
        const [name] = args(rest, 1, 'NAME', command);
        const disable = command === 'user disable';
        const user = await setDisabled(store, name!, disable);
        await audit(disable ? 'admin.user_disable' : 'admin.user_enable', user.name);
        out(disable
          ? `disabled ${user.name}: their tokens and sessions are refused from the next request; their sandboxes cannot be woken (running ones sleep at their idle timeout, or at once through POST /api/admin/users/${user.name}/disable)`
          : `enabled ${user.name}`);
        return;
      }
      case 'audit': {
        only(options, ['user', 'sandbox', 'action', 'since', 'until', 'limit', 'json'], command);
        args(rest, 0, '', command);
        const time = (v: string | undefined, name: string) => {
          if (v === undefined) return undefined;
          if (Number.isNaN(Date.parse(v))) throw new UsageError(`--${name} needs an ISO time (2026-11-26T05:00:00Z), got "${v}"`);
          return new Date(Date.parse(v)).toISOString();
        };
        if (options.limit !== undefined && !/^[0-9]{1,3}$/.test(options.limit)) throw new UsageError(`--limit needs a number from 1 to 500, got "${options.limit}"`);
        const actor = options.user === undefined ? undefined : await requireUserByName(store, options.user);
        const page = await store.audit.query(
          { actorId: actor?.id, sandbox: options.sandbox, action: options.action, since: time(options.since, 'since'), until: time(options.until, 'until') },
          { limit: options.limit === undefined ? 100 : Number(options.limit) },
        );
        if (options.json) { out(JSON.stringify(page.rows)); return; }
        if (page.rows.length === 0) { note('no audit rows match'); return; }
        table([['TIME', 'ACTION', 'OUTCOME', 'ACTOR', 'TOKEN', 'SOURCE', 'SANDBOX', 'TARGET'],
          ...page.rows.map((r) => [r.at, r.action, r.outcome, r.actor_name ?? '-', r.token_id ?? '-', r.source, r.sandbox ?? '-', r.target ?? '-'])]);
        if (page.next) note('(more rows: narrow with --since/--until or raise --limit)');
        return;
      }
      case 'user list': {
        only(options, ['json'], command);
        args(rest, 0, '', command);
        const users = await store.users.list();
        if (options.json) {
          out(JSON.stringify(users.map((u) => ({
            id: u.id, name: u.name, admin: u.admin, created_at: u.created_at, ssh_keys: (u.ssh_keys ?? []).length,
            ...(u.disabled_at ? { disabled_at: u.disabled_at } : {}), quotas: effectiveQuotas(u, quotaDefaults(config)),
          }))));
          return;
        }
        if (users.length === 0) { note('no users yet: svc user create NAME'); return; }
        table([['NAME', 'ID', 'ADMIN', 'CREATED', 'SSH KEYS', 'STATE'],
          ...users.map((u) => [u.name, u.id, u.admin ? 'yes' : 'no', u.created_at, String((u.ssh_keys ?? []).length), u.disabled_at ? `disabled ${u.disabled_at}` : 'active'])]);
        return;
      }
      case 'token create': {
        only(options, ['sandbox', 'name'], command);
        const [userName] = args(rest, 1, 'NAME (the user)', command);
        if (options.sandbox !== undefined && options.sandbox.trim() === '') throw new UsageError('--sandbox needs a sandbox name');
        const user = await requireUserByName(store, userName!);
        const sandbox = options.sandbox === undefined ? undefined : await resolveSandbox(store, user, options.sandbox.trim());
        const { token, value } = await createToken(store, {
          userId: user.id,
          ...(sandbox !== undefined ? { sandbox } : {}),
          ...(options.name !== undefined ? { name: options.name } : {}),
        });
        await audit('token.create', user.name, `token ${token.id}${sandbox ? ` limited to ${sandbox}` : ''}`);
        out(`created token ${token.id} for ${user.name}${sandbox ? `, limited to sandbox ${sandbox}` : ''}; value (shown once):`);
        out(value);
        return;
      }
      case 'token list': {
        only(options, ['json'], command);
        const [userName] = args(rest, 1, 'NAME (the user)', command);
        const user = await requireUserByName(store, userName!);
        const tokens = await listTokens(store, user.id);
        if (options.json) {
          out(JSON.stringify(tokens.map(({ hash: _hash, ...t }) => t)));
          return;
        }
        if (tokens.length === 0) { note(`${user.name} has no tokens: svc token create ${user.name}`); return; }
        table([['ID', 'NAME', 'SANDBOX', 'CREATED', 'STATUS'], ...tokens.map(tokenRow)]);
        return;
      }
      case 'token revoke': {
        only(options, [], command);
        const [id] = args(rest, 1, 'TOKEN_ID', command);
        const token = await revokeToken(store, id!);
        await audit('token.revoke', token.id);
        out(`revoked token ${token.id} (at ${token.revoked_at})`);
        return;
      }
      case 'hosts add': {
        only(options, ['port', 'csr', 'certs-out', 'same-machine', 'networks', 'pool', 'dns'], command);
        if (typeof options.pool !== 'string') throw new UsageError('"svc hosts add" needs --pool CIDR: the host\'s sandbox addresses (scripts/runner.sh prints it)');
        if (options.networks !== undefined && !/^[1-9][0-9]{0,5}$/.test(options.networks)) throw new UsageError(`--networks needs a number of sandbox networks, got "${options.networks}"`);
        const [name, address] = args(rest, 2, 'NAME ADDRESS', command);
        if (options.port !== undefined && !/^[0-9]{1,5}$/.test(options.port)) throw new UsageError(`--port needs a port number, got "${options.port}"`);
        const { record, files } = await addHost(store, config, {
          name: name!, address: address!, pool: options.pool, sameMachine: options['same-machine'] === true,
          ...(options.port ? { port: Number(options.port) } : {}),
          ...(options.networks ? { networks: Number(options.networks) } : {}),
          ...(options.dns ? { dns: options.dns.split(',').filter(Boolean) } : {}),
          ...(options.csr ? { csrPem: await readFile(options.csr === '-' ? '/dev/stdin' : options.csr, 'utf8') } : {}),
        });
        const dir = options['certs-out'] ?? `${record.name}-certs`;
        await writeHostFiles(dir, files);
        await audit('admin.host_add', record.name, `${record.address}:${record.port}`);
        out(`host ${record.name} at ${record.address}:${record.port} (its certificate names ${record.server_name}); ` +
          `wrote ${Object.keys(files).join(', ')} to ${dir}: the host's engine takes them (SVC_ENGINE_TLS_DIR, scripts/runner.sh --certs DIR)`);
        return;
      }
      case 'hosts list': {
        only(options, ['json'], command);
        args(rest, 0, '', command);
        const rows = await listHosts(store, config);
        if (options.json) { out(JSON.stringify(rows)); return; }
        const gb = (n: number) => (n / 2 ** 30).toFixed(1);
        table([['NAME', 'STATE', 'SANDBOXES (of networks)', 'RUNNING', 'MEMORY (GB, limits of running / host)', 'CPUS', 'ADDRESS'],
          ...rows.map((h) => [h.name, h.state === 'away' ? `away: ${h.reason}` : h.state, `${h.sandboxes}${h.networks ? ` of ${h.networks}` : ''}`, h.running === undefined ? '-' : String(h.running),
            h.memory ? `${gb(h.memory.committed_bytes)} / ${gb(h.memory.total_bytes)}` : '-', h.cpus ? `${h.cpus.committed} / ${h.cpus.total}` : '-', h.address])]);
        return;
      }
      case 'hosts drain':
      case 'hosts undrain': {
        only(options, [], command);
        const [name] = args(rest, 1, 'NAME', command);
        const drain = command === 'hosts drain';
        await setDrained(store, name!, drain);
        await audit(drain ? 'admin.host_drain' : 'admin.host_undrain', name!);
        out(drain ? `drained ${name}: no new sandboxes go there; its sandboxes stay` : `${name} takes new sandboxes again`);
        return;
      }
      case 'hosts evacuate': {
        only(options, ['deadline'], command);
        const [name] = args(rest, 1, 'NAME', command);
        const deadlineMs = moveDeadline(options.deadline);
        const moves = openMoves(store, config);
        try {
          const { moved, failed } = await evacuateHost(moves.deps, name!, {
            onProgress: (p) => out(progressLine(p)),
            onMoved: (p) => audit('admin.sandbox_move', p.sandbox, `${p.from} → ${p.to}, ${p.bytes} bytes`).then(() => undefined),
            ...(deadlineMs !== undefined ? { deadlineMs } : {}),
          });
          await audit('admin.host_evacuate', name!, `${moved.length} moved, ${failed.length} not`);
          for (const f of failed) note(`${f.sandbox}: not moved: ${f.error}`);
          out(failed.length === 0
            ? `evacuated ${name}: ${moved.length} sandbox(es) moved${moved.length ? '; each wakes on its new host at its next request' : ''}`
            : `${name}: ${moved.length} sandbox(es) moved, ${failed.length} not (${failed.map((f) => f.sandbox).join(', ')}, above); run svc hosts evacuate ${name} again`);
          if (failed.length > 0) process.exitCode = 1;
        } finally {
          await moves.close();
        }
        return;
      }
      case 'hosts move': {
        only(options, ['to', 'deadline'], command);
        const [requested] = args(rest, 1, 'SANDBOX', command);
        const deadlineMs = moveDeadline(options.deadline);
        // the name as listed (svc-…), or without its prefix as users write it
        const name = !requested!.startsWith(SANDBOX_PREFIX) && !(await store.sandboxes.get(requested!)) ? SANDBOX_PREFIX + requested : requested!;
        const moves = openMoves(store, config);
        try {
          const done = await moveSandbox(moves.deps, name, {
            onProgress: (p) => out(progressLine(p)),
            ...(options.to !== undefined ? { to: options.to } : {}),
            ...(deadlineMs !== undefined ? { deadlineMs } : {}),
          });
          await audit('admin.sandbox_move', done.sandbox, `${done.from} → ${done.to}, ${done.bytes} bytes`);
          out(`${done.sandbox} is on ${done.to}; it wakes there at its next request`);
        } finally {
          await moves.close();
        }
        return;
      }
      case 'hosts remove': {
        only(options, [], command);
        const [name] = args(rest, 1, 'NAME', command);
        await removeHost(store, config, name!);
        await audit('admin.host_remove', name!);
        out(`removed host ${name}; stop its engine on that machine (scripts/runner.sh --stop)`);
        return;
      }
      case 'export': {
        only(options, ['user', 'out'], command);
        const [requested] = args(rest, 1, 'SANDBOX', command);
        if (!options.user) throw new UsageError('"svc export" needs --user NAME (the owner)');
        const user = await requireUserByName(store, options.user);
        const record = (await store.sandboxes.get(await resolveSandbox(store, user, requested!)))!;
        const deps = { store, config, serviceCa: () => serviceCaPem(config, store.serviceKeys), manager: managerNotIncluded };
        const { folder, entries } = await exportSandbox(deps, user, record);
        const target = await writeFolder(options.out ?? '.', folder, entries);
        out(`wrote ${target} (svc.env holds a new token limited to ${record.name}; never print or commit it)`);
        return;
      }
    }
  } finally {
    await store.close();
  }
}

const argv = process.argv.slice(2);
// a user's commands (status, exec, cp, ssh, up, …) are the user CLI's, served at /cli/svc.mjs
const userCommand = argv.find((a, i) => !a.startsWith('-') && argv[i - 1] !== '--env');
try {
  if (isUserCommand(userCommand)) process.exitCode = await runCli(argv, fileURLToPath(import.meta.url));
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
