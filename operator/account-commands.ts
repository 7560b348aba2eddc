import {
  createToken, createUser, effectiveQuotas, listTokens, quotaDefaults, requireUserByName, resetPassword, revokeToken, setDisabled, setQuotas, updateUser, type QuotaName,
} from '../accounts/index.ts';
import { serviceCaPem } from '../edge/index.ts';
import { exportSandbox, managerNotIncluded, writeFolder } from '../export/index.ts';
import { tellNewsOnce } from '../lifecycle/index.ts';
import type { TokenRecord } from '../store/index.ts';
import { args, note, only, out, resolveSandbox, table, UsageError, type OnStore, type Options } from './command-line.ts';

/** `svc user …`, `svc token …`, `svc audit` and `svc export`: accounts and what they hold, on the store. */

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

export async function userCommand({ command, action, rest, options, config, store, audit }: OnStore): Promise<void> {
  switch (action) {
    case 'create': {
      only(options, ['admin'], command);
      const [name] = args(rest, 1, 'NAME', command);
      const { user, password } = await createUser(store, { name: name!, admin: options.admin === true });
      await audit('admin.user_create', user.name, user.admin ? 'admin' : undefined);
      out(`created user ${user.name}${user.admin ? ' (admin)' : ''}, id ${user.id}; password (shown once):`);
      out(password);
      return;
    }
    case 'passwd': {
      only(options, [], command);
      const [name] = args(rest, 1, 'NAME', command);
      const { user, password } = await resetPassword(store, name!);
      await audit('admin.user_password_reset', user.name);
      out(`new password for ${user.name} (shown once):`);
      out(password);
      return;
    }
    case 'set': {
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
    case 'disable':
    case 'enable': {
      only(options, [], command);
      const [name] = args(rest, 1, 'NAME', command);
      const disable = action === 'disable';
      const user = await setDisabled(store, name!, disable);
      await audit(disable ? 'admin.user_disable' : 'admin.user_enable', user.name);
      if (!disable) return void out(`enabled ${user.name}`);
      // the running service processes put the user's running sandboxes to sleep (this process has no engine)
      const told = await tellNewsOnce(config.redisUrl, config.redisPrefix, { op: 'owner-disabled', owner: user.id }).then(() => true, () => false);
      out(`disabled ${user.name}: their tokens and sessions are refused from the next request and their sandboxes cannot be woken; ` +
        (told ? 'the service puts their running sandboxes to sleep now' : 'Redis did not answer: the service\'s next reconcile pass (within 30 s of it answering) puts their running sandboxes to sleep'));
      return;
    }
    case 'list': {
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
  }
}

function tokenRow(t: TokenRecord): string[] {
  return [t.id, t.name ?? '-', t.sandbox ?? '(all)', t.created_at, t.revoked_at ? `revoked ${t.revoked_at}` : 'active'];
}

export async function tokenCommand({ command, action, rest, options, store, audit }: OnStore): Promise<void> {
  switch (action) {
    case 'create': {
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
    case 'list': {
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
    case 'revoke': {
      only(options, [], command);
      const [id] = args(rest, 1, 'TOKEN_ID', command);
      const token = await revokeToken(store, id!);
      await audit('token.revoke', token.id);
      out(`revoked token ${token.id} (at ${token.revoked_at})`);
      return;
    }
  }
}

export async function auditCommand({ command, rest, options, store }: OnStore): Promise<void> {
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
}

export async function exportCommand({ command, rest, options, config, store }: OnStore): Promise<void> {
  only(options, ['user', 'out'], command);
  const [requested] = args(rest, 1, 'SANDBOX', command);
  if (!options.user) throw new UsageError('"svc export" needs --user NAME (the owner)');
  const user = await requireUserByName(store, options.user);
  const record = (await store.sandboxes.get(await resolveSandbox(store, user, requested!)))!;
  const deps = { store, config, serviceCa: () => serviceCaPem(config, store.serviceKeys), manager: managerNotIncluded };
  const { folder, entries } = await exportSandbox(deps, user, record);
  const target = await writeFolder(options.out ?? '.', folder, entries);
  out(`wrote ${target} (svc.env holds a new token limited to ${record.name}; never print or commit it)`);
}
