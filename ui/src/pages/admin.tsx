import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { CopyButton, ErrorNote, Section, StatusBadge, useAction } from '../components.tsx';
import { date } from '../format.ts';
import type { AdminSandbox, AdminUser, AuditRow, Quotas } from '../types.ts';

const QUOTA_FIELDS: Array<[keyof Quotas, string]> = [
  ['max_sandboxes', 'Sandboxes'], ['max_running', 'Running at once'], ['memory_mb', 'Memory per sandbox (MB)'],
  ['cpus', 'CPUs per sandbox'], ['wakes_per_hour', 'Wakes per hour'],
];

/** A user's quotas as a form: an empty field puts the quota back to the operator's default. */
function QuotaForm({ user, onSaved }: { user: AdminUser; onSaved: (u: AdminUser) => void }) {
  const [busy, error, run] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const quotas = Object.fromEntries(QUOTA_FIELDS.map(([q]) => {
      const raw = String(form.get(q) ?? '').trim();
      return [q, raw === '' ? null : Number(raw)];
    }));
    void run(async () => onSaved(await api<AdminUser>('PATCH', `/admin/users/${enc(user.name)}`, { quotas })));
  };
  return (
    <form class="grid quota-form" onSubmit={submit} aria-label={`Quotas of ${user.name}`}>
      {QUOTA_FIELDS.map(([q, label]) => (
        <>
          <label for={`${user.name}-${q}`}>{label}</label>
          <input id={`${user.name}-${q}`} name={q} inputMode="decimal" size={6}
            defaultValue={user.own_quotas.includes(q) ? String(user.quotas[q]) : ''} placeholder={`${user.quotas[q]} (default)`} />
        </>
      ))}
      <div class="actions"><button type="submit" disabled={busy}>Save quotas</button></div>
      <ErrorNote error={error} />
    </form>
  );
}

function Users() {
  const [users, setUsers] = useState<AdminUser[] | null>(null);
  const [shown, setShown] = useState<{ name: string; password: string } | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [busy, error, run] = useAction();
  const load = async () => setUsers(await api<AdminUser[]>('GET', '/admin/users'));
  useEffect(() => { void run(load); }, []);
  const replace = (u: AdminUser) => setUsers((list) => (list ?? []).map((x) => (x.name === u.name ? u : x)));

  const create = (e: Event) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const data = new FormData(form);
    void run(async () => {
      const answer = await api<{ user: AdminUser; password: string }>('POST', '/admin/users', { name: String(data.get('name') ?? '').trim(), admin: data.get('admin') === 'on' });
      form.reset();
      setShown({ name: answer.user.name, password: answer.password });
      await load();
    });
  };
  const toggle = (u: AdminUser) => {
    const verb = u.disabled_at ? 'enable' : 'disable';
    if (verb === 'disable' && !confirm(`Disable ${u.name}? Their tokens and sessions stop working at once and their sandboxes go to sleep.`)) return;
    void run(async () => replace(await api<AdminUser>('POST', `/admin/users/${enc(u.name)}/${verb}`)));
  };
  const reset = (u: AdminUser) => {
    if (!confirm(`Give ${u.name} a new password? The old one stops working and their web sessions end.`)) return;
    void run(async () => setShown(await api<{ name: string; password: string }>('POST', `/admin/users/${enc(u.name)}/password`)));
  };

  return (
    <Section title="Users" id="admin-users">
      <form class="inline" onSubmit={create}>
        <label for="new-user">New user</label>
        <input id="new-user" name="name" required maxLength={40} placeholder="name" />
        <label><input type="checkbox" name="admin" /> admin</label>
        <button type="submit" class="primary" disabled={busy}>Create user</button>
      </form>
      {shown && (
        <div class="secret" role="status">
          <p><strong>Password of {shown.name}, shown only this once:</strong></p>
          <p><code class="password-value">{shown.password}</code> <CopyButton text={shown.password} /> <button type="button" onClick={() => setShown(null)}>Done</button></p>
        </div>
      )}
      <ErrorNote error={error} />
      {users && (
        <table class="admin-users">
          <thead><tr><th>User</th><th>State</th><th>Sandboxes</th><th>Running</th><th class="wide">Last sign-in</th><th><span class="visually-hidden">Actions</span></th></tr></thead>
          <tbody>
            {users.map((u) => (
              <>
                <tr key={u.id} data-user={u.name}>
                  <td>{u.name}{u.admin && <span class="badge"> admin</span>}</td>
                  <td>{u.disabled_at ? <span class="badge danger">disabled</span> : 'active'}</td>
                  <td>{u.usage.sandboxes} / {u.quotas.max_sandboxes}</td>
                  <td>{u.usage.running} / {u.quotas.max_running}</td>
                  <td class="wide">{u.last_sign_in_at ? date(u.last_sign_in_at) : 'never'}</td>
                  <td class="actions">
                    <button type="button" class="link" onClick={() => setOpen(open === u.name ? null : u.name)} aria-expanded={open === u.name}>Quotas</button>
                    <button type="button" class="link" onClick={() => reset(u)}>Reset password</button>
                    <button type="button" class={`link${u.disabled_at ? '' : ' danger'}`} onClick={() => toggle(u)}>{u.disabled_at ? 'Enable' : 'Disable'}</button>
                  </td>
                </tr>
                {open === u.name && <tr><td colSpan={6}><QuotaForm user={u} onSaved={replace} /></td></tr>}
              </>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function Sandboxes() {
  const [rows, setRows] = useState<AdminSandbox[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => { api<AdminSandbox[]>('GET', '/admin/sandboxes').then(setRows, setError); }, []);
  return (
    <Section title="All sandboxes" id="admin-sandboxes">
      <ErrorNote error={error} />
      {rows && (
        <table class="admin-sandboxes">
          <thead><tr><th>Sandbox</th><th>Owner</th><th>Status</th><th class="wide">Limits</th><th>Memory now</th><th class="wide">Host</th><th>Last activity</th></tr></thead>
          <tbody>
            {rows.length === 0 && <tr><td colSpan={7} class="muted">No sandboxes.</td></tr>}
            {rows.map((s) => (
              <tr key={s.name} data-sandbox={s.name}>
                <td><a href={`#/sandboxes/${enc(s.name)}`}>{s.name}</a></td>
                <td>{s.owner}</td>
                <td><StatusBadge status={s.status} /></td>
                <td class="wide">{s.memory_mb} MB, {s.cpus} CPUs</td>
                <td>{s.memory_now_mb === null ? '—' : `${Math.round(s.memory_now_mb)} MB`}</td>
                <td class="wide">{s.host ?? '—'}</td>
                <td>{s.last_activity_at ? date(s.last_activity_at) : '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function Audit() {
  const [rows, setRows] = useState<AuditRow[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [filter, setFilter] = useState('');
  const [busy, error, run] = useAction();
  const load = (query: string, before?: string) => run(async () => {
    const page = await api<{ rows: AuditRow[]; next: string | null }>('GET', `/admin/audit?limit=50${query}${before ? `&before=${enc(before)}` : ''}`);
    setRows((old) => (before ? [...old, ...page.rows] : page.rows));
    setNext(page.next);
  });
  useEffect(() => { void load(''); }, []);
  const submit = (e: Event) => {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const query = ['user', 'sandbox', 'action'].map((k) => [k, String(data.get(k) ?? '').trim()]).filter(([, v]) => v).map(([k, v]) => `&${k}=${enc(v!)}`).join('');
    setFilter(query);
    void load(query);
  };
  return (
    <Section title="Audit log" id="admin-audit">
      <form class="inline" onSubmit={submit}>
        <label for="audit-user">User</label><input id="audit-user" name="user" size={12} />
        <label for="audit-sandbox">Sandbox</label><input id="audit-sandbox" name="sandbox" size={14} />
        <label for="audit-action">Action</label><input id="audit-action" name="action" size={14} placeholder="sandbox." />
        <button type="submit" disabled={busy}>Filter</button>
      </form>
      <ErrorNote error={error} />
      <table class="audit">
        <thead><tr><th>Time</th><th>Action</th><th>Outcome</th><th>Actor</th><th class="wide">Source</th><th>Target</th></tr></thead>
        <tbody>
          {rows.length === 0 && <tr><td colSpan={6} class="muted">No rows.</td></tr>}
          {rows.map((r) => (
            <tr key={r.id} data-action={r.action}>
              <td>{date(r.at)}</td>
              <td>{r.action}</td>
              <td>{r.outcome}</td>
              <td>{r.actor_name ?? '—'}{r.token_id ? <small class="muted"> token {r.token_id.slice(0, 8)}</small> : null}</td>
              <td class="wide">{r.source}</td>
              <td>{r.sandbox ?? r.target ?? ''}{r.detail ? <small class="muted"> {r.detail}</small> : null}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {next && <button type="button" disabled={busy} onClick={() => void load(filter, next)}>Older</button>}
    </Section>
  );
}

/** The admin view (admins only; the API refuses everyone else): users, every sandbox, the audit log. */
export function Admin() {
  return (
    <>
      <h1>Admin</h1>
      <Users />
      <Sandboxes />
      <Audit />
    </>
  );
}
