import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { ErrorNote, Section, useAction } from '../components.tsx';
import { date } from '../format.ts';
import type { SshKey } from '../types.ts';

export function SshKeys() {
  const [keys, setKeys] = useState<SshKey[] | null>(null);
  const [text, setText] = useState('');
  const [busy, error, run] = useAction();
  useEffect(() => { void run(async () => setKeys(await api<SshKey[]>('GET', '/me/ssh-keys'))); }, []);
  const add = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      await api('POST', '/me/ssh-keys', { key: text.trim() });
      setText('');
      setKeys(await api<SshKey[]>('GET', '/me/ssh-keys'));
    });
  };
  const remove = (k: SshKey) => {
    if (!confirm(`Remove the key ${k.fingerprint}?`)) return;
    void run(async () => {
      await api('DELETE', `/me/ssh-keys/${enc(k.id)}`);
      setKeys(await api<SshKey[]>('GET', '/me/ssh-keys'));
    });
  };
  return (
    <>
      <h1>SSH keys</h1>
      <p>Keys here log in as <code>root</code> to your sandboxes: <code>ssh -o ProxyCommand="openssl s_client -quiet -connect %h:{location.port || 443} -servername %h" root@&lt;sandbox&gt;-shell-tcp.{location.hostname}</code></p>
      <Section title="Add a key" id="add-key">
        <form class="stack" onSubmit={add}>
          <label for="ssh-key">Public key (one line of authorized_keys, such as the content of <code>~/.ssh/id_ed25519.pub</code>)</label>
          <textarea id="ssh-key" rows={3} value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} required placeholder="ssh-ed25519 AAAA… me@laptop" />
          <div><button type="submit" class="primary" disabled={busy}>Add key</button></div>
        </form>
      </Section>
      <ErrorNote error={error} />
      {keys && (
        <ul class="keys">
          {keys.length === 0 && <li class="muted">No keys yet.</li>}
          {keys.map((k) => (
            <li class="card row" key={k.id}>
              <div class="grow"><code>{k.fingerprint}</code> <span class="muted">{k.key.split(' ').slice(2).join(' ')} · added {date(k.created_at)}</span></div>
              <button type="button" class="link danger" onClick={() => remove(k)} aria-label={`Remove key ${k.fingerprint}`}>Remove</button>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}
