import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorNote, Section, useAction } from '../components.tsx';

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
