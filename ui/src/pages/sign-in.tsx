import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorNote, useAction } from '../components.tsx';
import type { User } from '../types.ts';

export function SignIn({ notice, onSignedIn }: { notice: string; onSignedIn: (user: User, csrf: string) => void }) {
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const [busy, error, run] = useAction();
  const [methods, setMethods] = useState<{ password: boolean; oidc: { name: string; start: string } | null }>({ password: true, oidc: null });
  // a refused single sign-on comes back as ?sso_error=… (the callback is a redirect, not an API answer)
  const [ssoError] = useState(() => new URLSearchParams(location.search).get('sso_error'));
  useEffect(() => {
    api<typeof methods>('GET', '/auth/methods').then(setMethods, () => undefined);
    if (ssoError) history.replaceState(null, '', `/${location.hash}`);
  }, []);
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
      {ssoError && <p class="error" role="alert">{ssoError}</p>}
      {methods.oidc && (
        <p class="card"><a class="button primary" href={methods.oidc.start}>Sign in with {methods.oidc.name}</a></p>
      )}
      {methods.password && (
      <form class="stack card" onSubmit={submit}>
        <label for="name">User name</label>
        <input id="name" name="username" autocomplete="username" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required autofocus />
        <label for="password">Password</label>
        <input id="password" name="password" type="password" autocomplete="current-password" value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} required />
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Signing in…' : 'Sign in'}</button>
        <ErrorNote error={error} />
        <small>No account yet? An operator makes one with <code>npx svc user create NAME</code>.</small>
      </form>
      )}
    </main>
  );
}
