import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorNote, Section, useAction } from '../components.tsx';
import type { Me } from '../types.ts';

/** The caller's quotas and what of them is used (GET /me): what an operator set, or their defaults. */
function QuotaTable() {
  const [me, setMe] = useState<Me | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => { api<Me>('GET', '/me').then(setMe, setError); }, []);
  if (error) return <ErrorNote error={error} />;
  if (!me) return <p aria-busy="true">Loading…</p>;
  const { quotas: q, usage: u } = me;
  const rows: Array<[string, string, string]> = [
    ['Sandboxes', String(u.sandboxes), String(q.max_sandboxes)],
    ['Running at once', String(u.running), String(q.max_running)],
    ['Wakes by app traffic this hour', String(u.wakes_this_hour), String(q.wakes_per_hour)],
    ['Memory per sandbox', '', `${q.memory_mb} MB`],
    ['CPUs per sandbox', '', String(q.cpus)],
  ];
  return (
    <table class="quotas">
      <thead><tr><th scope="col">Quota</th><th scope="col">Used</th><th scope="col">Limit</th></tr></thead>
      <tbody>{rows.map(([label, used, limit]) => <tr data-quota={label}><th scope="row">{label}</th><td>{used}</td><td>{limit}</td></tr>)}</tbody>
    </table>
  );
}

export function Account() {
  const [done, setDone] = useState('');
  const [busy, error, run, clear] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const data = new FormData(form);
    const next = String(data.get('new') ?? '');
    setDone('');
    if (next !== String(data.get('again') ?? '')) {
      void run(async () => { throw new Error('The two new passwords differ; type the same one twice.'); });
      return;
    }
    clear();
    void run(async () => {
      const answer = await api<{ other_sessions_ended: number }>('POST', '/me/password', { current_password: String(data.get('current') ?? ''), new_password: next });
      form.reset();
      setDone(`Password changed. ${answer.other_sessions_ended} other session${answer.other_sessions_ended === 1 ? ' was' : 's were'} signed out.`);
    });
  };
  return (
    <>
      <h1>Account</h1>
      <Section title="Quotas" id="quotas">
        <QuotaTable />
        <p class="muted">Set by your administrator. A new sandbox may ask for less memory or CPU, never more.</p>
      </Section>
      <Section title="Change password" id="password">
        <form class="stack" onSubmit={submit}>
          <label for="current">Current password</label>
          <input id="current" name="current" type="password" autocomplete="current-password" required />
          <label for="new">New password (at least 12 characters)</label>
          <input id="new" name="new" type="password" autocomplete="new-password" minLength={12} required />
          <label for="again">New password again</label>
          <input id="again" name="again" type="password" autocomplete="new-password" minLength={12} required />
          <div><button type="submit" class="primary" disabled={busy}>Change password</button></div>
          <p class="muted">Your other signed-in browsers are signed out. Access tokens keep working.</p>
          {done && <p class="ok" role="status">{done}</p>}
          <ErrorNote error={error} />
        </form>
      </Section>
    </>
  );
}
