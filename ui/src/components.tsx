import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { ApiError } from './api.ts';
import { isNever, showDuration, toApiDuration } from './format.ts';
import type { Status } from './types.ts';
import { STATUS_LABEL } from './format.ts';

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  const message = error instanceof ApiError || error instanceof Error ? error.message : String(error);
  return <p class="error" role="alert">{message}</p>;
}

export function StatusBadge({ status }: { status: Status }) {
  return <span class={`badge ${status}`}>{STATUS_LABEL[status]}</span>;
}

/** Runs an action, keeps its error and a busy flag for the button that started it. */
export function useAction(): [busy: boolean, error: unknown, run: (fn: () => Promise<unknown>) => Promise<void>, clear: () => void] {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try { await fn(); } catch (err) { setError(err); } finally { setBusy(false); }
  };
  return [busy, error, run, () => setError(null)];
}

export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  const copy = async () => {
    await navigator.clipboard.writeText(text);
    setDone(true);
    setTimeout(() => setDone(false), 2000);
  };
  return <button type="button" onClick={copy}>{done ? 'Copied' : label}</button>;
}

/**
 * A duration setting (spec 8): shows 'never' for never and accepts it (and 30m, 2h, 14d, off).
 * Saves on submit; the API's message says what is wrong with a bad value.
 */
export function DurationEditor({ id, label, value, help, onSave }: { id: string; label: string; value: string; help: string; onSave: (v: string) => Promise<unknown> }) {
  const [text, setText] = useState(showDuration(value));
  const [busy, error, run] = useAction();
  const [saved, setSaved] = useState(false);
  const submit = (e: Event) => {
    e.preventDefault();
    setSaved(false);
    void run(async () => { await onSave(toApiDuration(text)); setSaved(true); });
  };
  return (
    <form class="inline" onSubmit={submit}>
      <label for={id}>{label}</label>
      <input id={id} name={id} value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} aria-describedby={`${id}-help`} size={8} required />
      <button type="submit" disabled={busy}>Save</button>
      <small id={`${id}-help`}>{help}{isNever(value) ? ' Now: never.' : ''}</small>
      {saved && <small class="ok" role="status">Saved.</small>}
      <ErrorNote error={error} />
    </form>
  );
}

export function Section({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  return (
    <section class="card" aria-labelledby={id ? `${id}-title` : undefined}>
      <h2 id={id ? `${id}-title` : undefined}>{title}</h2>
      {children}
    </section>
  );
}
