import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { ErrorNote, Section, useAction } from '../components.tsx';
import { date } from '../format.ts';
import type { Secret } from '../types.ts';

const scopeText = (s: Secret) => (s.scope === 'all' ? 'all sandboxes' : s.scope.join(', '));

/** The caller's secrets (issue 35): set or replace one, see names and scopes (never values), remove one. */
export function Secrets() {
  const [secrets, setSecrets] = useState<Secret[] | null>(null);
  const [busy, error, run] = useAction();
  const [done, setDone] = useState('');
  const reload = async () => setSecrets(await api<Secret[]>('GET', '/me/secrets'));
  useEffect(() => { void run(reload); }, []);
  const submit = (e: Event) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const data = new FormData(form);
    const name = String(data.get('name') ?? '').trim();
    const sandboxes = String(data.get('sandboxes') ?? '').split(/[\s,]+/).filter(Boolean);
    setDone('');
    void run(async () => {
      await api('PUT', `/me/secrets/${enc(name)}`, { value: String(data.get('value') ?? ''), ...(sandboxes.length ? { scope: sandboxes } : {}) });
      form.reset();
      setDone(`${name} is set; your running sandboxes have it now.`);
      await reload();
    });
  };
  const remove = (s: Secret) => {
    if (!confirm(`Remove the secret ${s.name}?`)) return;
    void run(async () => {
      await api('DELETE', `/me/secrets/${enc(s.name)}`);
      setDone('');
      await reload();
    });
  };
  return (
    <>
      <h1>Secrets</h1>
      <p>Your sandboxes get each secret as an environment variable in exec, terminal and ssh sessions, and as the file <code>/run/svc/secrets/NAME</code> (for compose's <code>secrets:</code>). A value is never shown again; the registry tells you if one stands in an image you push.</p>
      <Section title="Set a secret" id="set-secret">
        <form class="stack" onSubmit={submit}>
          <label for="secret-name">Name (an environment variable name, such as DB_PASSWORD; an existing one is replaced)</label>
          <input id="secret-name" name="name" required pattern="[A-Za-z_][A-Za-z0-9_]*" maxLength={128} autocomplete="off" />
          <label for="secret-value">Value</label>
          <textarea id="secret-value" name="value" rows={3} required autocomplete="off" spellcheck={false} />
          <label for="secret-sandboxes">Only these sandboxes (names, separated by spaces; empty: all of them)</label>
          <input id="secret-sandboxes" name="sandboxes" autocomplete="off" />
          <div><button type="submit" class="primary" disabled={busy}>Set secret</button></div>
          {done && <p class="ok" role="status">{done}</p>}
        </form>
      </Section>
      <ErrorNote error={error} />
      {secrets && (
        <ul class="keys" aria-label="Secrets">
          {secrets.length === 0 && <li class="muted">No secrets yet.</li>}
          {secrets.map((s) => (
            <li class="card row" key={s.name} data-secret={s.name}>
              <div class="grow"><code>{s.name}</code> <span class="muted">{scopeText(s)} · changed {date(s.updated_at)}</span></div>
              <button type="button" class="link danger" onClick={() => remove(s)} aria-label={`Remove secret ${s.name}`}>Remove</button>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}
