import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorNote, useAction } from '../components.tsx';
import type { User } from '../types.ts';

export function SignIn({ notice, onSignedIn }: { notice: string; onSignedIn: (user: User, csrf: string) => void }) {
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const [busy, error, run] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      const s = await api<{ user: User; csrf: string }>('POST', '/session', { name, password });
      setPassword('');
      onSignedIn(s.user, s.csrf);
    });
  };
  return (
    <main class="page narrow">
      <h1>Sign in</h1>
      {notice && <p class="notice" role="status">{notice}</p>}
      <form class="stack card" onSubmit={submit}>
        <label for="name">User name</label>
        <input id="name" name="username" autocomplete="username" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required autofocus />
        <label for="password">Password</label>
        <input id="password" name="password" type="password" autocomplete="current-password" value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} required />
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Signing in…' : 'Sign in'}</button>
        <ErrorNote error={error} />
        <small>No account yet? An operator makes one with <code>npx svc user create NAME</code>.</small>
      </form>
    </main>
  );
}
