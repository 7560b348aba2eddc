import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { ErrorNote, useAction } from '../components.tsx';

interface Container {
  id: string;
  name: string;
  image: string;
  state: string;
  status: string;
  project: string | null;
  service: string | null;
  ports: Array<{ private: number; public: number; protocol: string; url: string | null }>;
}

/** What runs in the sandbox, by compose project (each published port with its app address), with restart / stop / start of one container. */
export function Containers({ path }: { path: string }) {
  const [rows, setRows] = useState<Container[] | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [busy, error, run] = useAction();
  const reload = () => api<Container[]>('GET', `${path}/containers`).then(setRows, setLoadError);
  useEffect(() => {
    void reload();
    const timer = setInterval(() => void reload(), 5000);
    return () => clearInterval(timer);
  }, [path]);
  const act = (c: Container, action: 'restart' | 'stop' | 'start') => run(async () => {
    await api('POST', `${path}/containers/${enc(c.id)}/${action}`);
    await reload();
  });

  if (loadError) return <ErrorNote error={loadError} />;
  if (!rows) return <p aria-busy="true">Loading containers…</p>;
  if (!rows.length) return <p class="muted">No containers yet: deploy with <code>docker compose up -d</code> (or <code>node svc.mjs up</code>).</p>;
  return (
    <>
      <ErrorNote error={error} />
      <table class="containers">
        <thead><tr><th>Project</th><th>Container</th><th>Image</th><th>State</th><th>Ports</th><th /></tr></thead>
        <tbody>
          {rows.map((c) => (
            <tr key={c.id} data-container={c.name}>
              <td>{c.project ?? '—'}</td>
              <td>{c.name}</td>
              <td><code>{c.image}</code></td>
              <td class="state" title={c.status}>{c.state}</td>
              <td class="ports">{c.ports.map((p) => (
                <span key={`${p.public}/${p.protocol}`} class="port" data-port={p.public}>
                  {`${p.public}→${p.private}/${p.protocol}`}
                  {p.url && <> <a href={p.url} target="_blank" rel="noreferrer">{p.url.replace(/^https:\/\//, '')}</a></>}
                </span>
              ))}</td>
              <td class="actions">
                <button type="button" disabled={busy} onClick={() => act(c, 'restart')} aria-label={`Restart ${c.name}`}>Restart</button>
                {c.state === 'running'
                  ? <button type="button" disabled={busy} onClick={() => act(c, 'stop')} aria-label={`Stop ${c.name}`}>Stop</button>
                  : <button type="button" disabled={busy} onClick={() => act(c, 'start')} aria-label={`Start ${c.name}`}>Start</button>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
