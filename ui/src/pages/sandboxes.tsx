import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, enc } from '../api.ts';
import { ErrorNote, StatusBadge, useAction } from '../components.tsx';
import { isNever, showDuration, toApiDuration, when } from '../format.ts';
import type { Sandbox, SandboxSummary } from '../types.ts';

/** Whether each app address answers: read from the full record, a few sandboxes at a time, after the list shows. */
function useAnswers(list: SandboxSummary[] | null): Record<string, boolean> {
  const [answers, setAnswers] = useState<Record<string, boolean>>({});
  useEffect(() => {
    if (!list) return;
    let stopped = false;
    const queue = list.filter((s) => s.status === 'running' && s.tunnel_urls.length > 0).map((s) => s.name);
    const worker = async () => {
      for (let name = queue.shift(); name && !stopped; name = queue.shift()) {
        const record = await api<Sandbox>('GET', `/sandboxes/${enc(name)}`).catch(() => null);
        if (record && !stopped) setAnswers((a) => ({ ...a, ...Object.fromEntries(record.apps.map((app) => [app.url, app.answers])) }));
      }
    };
    void Promise.all([worker(), worker(), worker()]);
    return () => { stopped = true; };
  }, [list]);
  return answers;
}

function Schedule({ s }: { s: SandboxSummary }) {
  const settings = `idle timeout ${showDuration(s.idle_timeout)} · deep sleep after ${showDuration(s.deep_sleep_after)}`;
  if (s.status === 'running') return <span>{s.stops_at && !isNever(s.idle_timeout) ? `stops ${when(s.stops_at)} if idle · ` : ''}{settings}</span>;
  if (s.status === 'exited') return <span>{s.deep_sleep_at ? `taken down ${when(s.deep_sleep_at)} · ` : ''}{settings}</span>;
  if (s.status === 'unavailable') return <span>its host does not answer; data kept, back as it was once it does · {settings}</span>;
  return <span>data kept; starting takes about 30 s · {settings}</span>;
}

export function SandboxList() {
  const [list, setList] = useState<SandboxSummary[] | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const answers = useAnswers(list);
  const load = () => api<SandboxSummary[]>('GET', '/sandboxes').then(setList, setLoadError);
  useEffect(() => { void load(); }, []);

  return (
    <>
      <h1>Sandboxes</h1>
      <NewSandbox onCreated={(s) => { location.hash = `#/sandboxes/${enc(s.name)}`; }} />
      <ErrorNote error={loadError} />
      {list && (
        <ul class="sandboxes" data-loaded={list.length}>
          {list.length === 0 && <li class="card">No sandboxes yet: make one above.</li>}
          {list.map((s) => (
            <li class="card row" key={s.name}>
              <div class="grow">
                <a class="name" href={`#/sandboxes/${enc(s.name)}`}>{s.name}</a> <StatusBadge status={s.status} />
                {s.engine_access.state === 'needs-certs' && <span class="badge warn">engine access: needs enabling</span>}
                <div class="muted"><Schedule s={s} /></div>
                {s.tunnel_urls.length > 0 && (
                  <ul class="apps">
                    {s.tunnel_urls.map((url) => (
                      <li key={url}>
                        <span class={`dot ${answers[url] === undefined ? '' : answers[url] ? 'up' : 'down'}`} aria-label={answers[url] === undefined ? 'not checked' : answers[url] ? 'answers' : 'does not answer'} role="img" />
                        <a href={url} target="_blank" rel="noreferrer">{url}</a>
                      </li>
                    ))}
                  </ul>
                )}
              </div>
            </li>
          ))}
        </ul>
      )}
      {!list && !loadError && <p aria-busy="true">Loading sandboxes…</p>}
    </>
  );
}

/**
 * POST /sandboxes. Creating one adds a network on the service's host, and a browser on that host
 * aborts requests in flight when its addresses change: the service still creates the sandbox. So a
 * named create that got no answer looks for the sandbox before it reports a failure.
 */
async function create(body: Record<string, string>): Promise<Sandbox> {
  try {
    return await api<Sandbox>('POST', '/sandboxes', body);
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== 'SVC_OFFLINE' || !body.name) throw err;
    const name = body.name.startsWith('svc-') ? body.name : `svc-${body.name}`;
    for (let look = 1; look <= 5; look++) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const found = await api<Sandbox>('GET', `/sandboxes/${enc(name)}`).catch(() => undefined);
      if (found) return found;
    }
    throw err;
  }
}

function NewSandbox({ onCreated }: { onCreated: (s: Sandbox) => void }) {
  const [open, setOpen] = useState(false);
  const [busy, error, run] = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const body: Record<string, string> = {};
    for (const key of ['name', 'template', 'idle_timeout', 'deep_sleep_after']) {
      const v = String(form.get(key) ?? '').trim();
      if (v) body[key] = key.endsWith('timeout') || key.endsWith('after') ? toApiDuration(v) : v;
    }
    void run(async () => onCreated(await create(body)));
  };
  if (!open) return <p><button type="button" class="primary" onClick={() => setOpen(true)}>New sandbox</button></p>;
  return (
    <form class="card grid" onSubmit={submit} aria-label="New sandbox">
      <label for="new-name">Name</label>
      <input id="new-name" name="name" placeholder="my-app (becomes svc-my-app)" pattern="[a-z0-9][a-z0-9\-]*" autofocus />
      <label for="new-template">Template</label>
      <select id="new-template" name="template">
        <option value="default">default: an empty Docker engine</option>
        <option value="manager">manager: with the management tool</option>
      </select>
      <label for="new-idle">Idle timeout</label>
      <input id="new-idle" name="idle_timeout" placeholder="30m (or never)" />
      <label for="new-deep">Deep sleep after</label>
      <input id="new-deep" name="deep_sleep_after" placeholder="7d (or never)" />
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>{busy ? 'Creating… (a few seconds)' : 'Create'}</button>
        <button type="button" onClick={() => setOpen(false)}>Cancel</button>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}
