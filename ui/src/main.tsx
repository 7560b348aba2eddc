import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, useSession } from './api.ts';
import type { User } from './types.ts';
import { SignIn } from './pages/sign-in.tsx';
import { SandboxList } from './pages/sandboxes.tsx';
import { SandboxPanel } from './pages/sandbox.tsx';
import { Tokens } from './pages/tokens.tsx';
import { SshKeys } from './pages/ssh-keys.tsx';
import { Secrets } from './pages/secrets.tsx';
import { Account } from './pages/account.tsx';
import { Admin } from './pages/admin.tsx';
import './style.css';

/** Pages live in the hash (#/sandboxes/svc-x): the service serves one index.html for all of them. */
function useRoute(): string[] {
  const parse = () => location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const onChange = () => setRoute(parse());
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/** Where a private app address sent the browser from, to go back to after signing in (docs/apps-and-edge.md). */
const APP_RETURN = 'svc-app-return';

function App() {
  const [user, setUser] = useState<User | null | undefined>(undefined);
  const [notice, setNotice] = useState('');
  const route = useRoute();

  const signedIn = (u: User, csrf: string) => {
    // sent here by a private app address to sign in: back to it through the service's ticket
    // (kept in the tab across a single sign-on round trip, which comes back without the query)
    const app = new URLSearchParams(location.search).get('app') ?? sessionStorage.getItem(APP_RETURN);
    sessionStorage.removeItem(APP_RETURN);
    if (app) return location.replace(`/api/apps/enter?to=${encodeURIComponent(app)}`);
    useSession(csrf, (message) => { setNotice(message); setUser(null); });
    setNotice('');
    setUser(u);
  };
  useEffect(() => {
    const app = new URLSearchParams(location.search).get('app');
    if (app) sessionStorage.setItem(APP_RETURN, app);
    api<{ user: User; csrf: string }>('GET', '/session').then((s) => signedIn(s.user, s.csrf), () => setUser(null));
  }, []);

  if (user === undefined) return <main class="page"><p aria-busy="true">Loading…</p></main>;
  if (user === null) return <SignIn notice={notice} onSignedIn={signedIn} />;

  const signOut = async () => {
    await api('DELETE', '/session').catch(() => undefined);
    setUser(null);
  };
  const [page = 'sandboxes', name] = route;
  const nav = [['sandboxes', 'Sandboxes'], ['tokens', 'Access tokens'], ['ssh-keys', 'SSH keys'], ['secrets', 'Secrets'], ['account', 'Account'], ...(user.admin ? [['admin', 'Admin']] : [])];
  return (
    <>
      <header class="top">
        <a class="brand" href="#/sandboxes">{location.hostname}</a>
        <nav aria-label="Main">
          {nav.map(([id, label]) => <a href={`#/${id}`} aria-current={page === id ? 'page' : undefined}>{label}</a>)}
        </nav>
        <span class="who">{user.name}</span>
        <button type="button" class="link" onClick={signOut}>Sign out</button>
      </header>
      <main class="page">
        {page === 'sandboxes' && !name && <SandboxList />}
        {page === 'sandboxes' && name && <SandboxPanel name={name} />}
        {page === 'tokens' && <Tokens />}
        {page === 'ssh-keys' && <SshKeys />}
        {page === 'secrets' && <Secrets />}
        {page === 'account' && <Account />}
        {page === 'admin' && user.admin && <Admin />}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app')!);
