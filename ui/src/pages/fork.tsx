import { api, enc } from '../api.ts';
import { ErrorNote, Section, useAction } from '../components.tsx';
import type { Sandbox } from '../types.ts';

/** The panel's fork: a new sandbox with a copy of this one's files, images and containers (POST fork). */
export function Fork({ name, path }: { name: string; path: string }) {
  const [busy, error, run] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const fork = String(new FormData(e.target as HTMLFormElement).get('fork') ?? '').trim();
    void run(async () => {
      const made = await api<Sandbox>('POST', `${path}/fork`, { name: fork });
      location.hash = `#/sandboxes/${enc(made.name)}`;
    });
  };
  return (
    <Section title="Fork" id="fork">
      <p>A new sandbox with a copy of {name}'s files, images and containers, and its own addresses and engine certificates.
        While it runs, {name} pauses for the copy (about a second per GB) and then goes on unchanged.</p>
      <form class="row wrap" onSubmit={submit} aria-label={`Fork ${name}`}>
        <label for="fork-name">Name of the fork</label>
        <input id="fork-name" name="fork" required placeholder="my-app-2 (becomes svc-my-app-2)" pattern="[a-z0-9][a-z0-9\-]*" />
        <button type="submit" disabled={busy}>{busy ? 'Forking…' : 'Fork'}</button>
      </form>
      <ErrorNote error={error} />
    </Section>
  );
}
