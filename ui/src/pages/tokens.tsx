import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { CopyButton, ErrorNote, Section, useAction } from '../components.tsx';
import { date } from '../format.ts';
import type { SandboxSummary, Token } from '../types.ts';

export function Tokens() {
  const [tokens, setTokens] = useState<Token[] | null>(null);
  const [sandboxes, setSandboxes] = useState<SandboxSummary[]>([]);
  const [created, setCreated] = useState<{ value: string; record: Token } | null>(null);
  const [busy, error, run] = useAction();
  const load = () => run(async () => setTokens(await api<Token[]>('GET', '/me/tokens')));
  useEffect(() => {
    void load();
    api<SandboxSummary[]>('GET', '/sandboxes').then(setSandboxes, () => undefined);
  }, []);

  const submit = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const name = String(form.get('name') ?? '').trim();
    const sandbox = String(form.get('sandbox') ?? '');
    void run(async () => {
      const answer = await api<{ token: string; record: Token }>('POST', '/me/tokens', { ...(name ? { name } : {}), ...(sandbox ? { sandbox } : {}) });
      (e.target as HTMLFormElement).reset();
      setCreated({ value: answer.token, record: answer.record });
      setTokens(await api<Token[]>('GET', '/me/tokens'));
    });
  };
  const revoke = (t: Token) => {
    if (!confirm(`Revoke "${t.name ?? t.id}"? Clients using it stop working at once.`)) return;
    void run(async () => {
      await api('DELETE', `/me/tokens/${enc(t.id)}`);
      setTokens(await api<Token[]>('GET', '/me/tokens'));
    });
  };
  const active = (tokens ?? []).filter((t) => !t.revoked_at).reverse();

  return (
    <>
      <h1>Access tokens</h1>
      <p>Tokens act as you in scripts, the docker registry and coding agents (<code>Authorization: Bearer svc_…</code>). Limit one to a single sandbox to hand it to an agent.</p>
      <Section title="New token" id="new-token">
        <form class="grid" onSubmit={submit}>
          <label for="token-name">Name</label>
          <input id="token-name" name="name" maxLength={100} placeholder="laptop, CI, agent…" />
          <label for="token-sandbox">Limited to</label>
          <select id="token-sandbox" name="sandbox">
            <option value="">all my sandboxes</option>
            {sandboxes.map((s) => <option value={s.name} key={s.name}>{s.name} only</option>)}
          </select>
          <div class="actions"><button type="submit" class="primary" disabled={busy}>Create token</button></div>
        </form>
        {created && (
          <div class="secret" role="status">
            <p><strong>Copy the token now: it is shown only this once.</strong>{created.record.sandbox ? ` Limited to ${created.record.sandbox}.` : ''}</p>
            <p><code class="token-value">{created.value}</code> <CopyButton text={created.value} /> <button type="button" onClick={() => setCreated(null)}>Done</button></p>
          </div>
        )}
      </Section>
      <ErrorNote error={error} />
      {tokens && (
        <table class="tokens">
          <thead><tr><th>Name</th><th>Limited to</th><th class="wide">Created</th><th>Last used</th><th><span class="visually-hidden">Actions</span></th></tr></thead>
          <tbody>
            {active.length === 0 && <tr><td colSpan={5} class="muted">No tokens.</td></tr>}
            {active.map((t) => (
              <tr key={t.id}>
                <td>{t.name ?? <span class="muted">unnamed</span>}</td>
                <td>{t.sandbox ?? 'all sandboxes'}</td>
                <td class="wide">{date(t.created_at)}</td>
                <td>{t.last_used_at ? date(t.last_used_at) : 'never'}</td>
                <td><button type="button" class="link danger" onClick={() => revoke(t)} aria-label={`Revoke ${t.name ?? t.id}`}>Revoke</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
