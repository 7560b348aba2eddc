import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { CopyButton, DurationEditor, ErrorNote, Section, StatusBadge, useAction } from '../components.tsx';
import { date, isNever, when } from '../format.ts';
import type { RegistryReport, Sandbox } from '../types.ts';
import { FileBrowser } from './files.tsx';
import { LogView } from './logs.tsx';
import { Terminal } from './terminal.tsx';
import { Containers } from './containers.tsx';
import { UsageView } from './usage.tsx';
import { Fork } from './fork.tsx';

/** How often the panel of an unavailable sandbox asks again whether its host answers. */
const UNAVAILABLE_LOOK_MS = 10_000;

export function SandboxPanel({ name }: { name: string }) {
  const [record, setRecord] = useState<Sandbox | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const path = `/sandboxes/${enc(name)}`;
  const reload = () => api<Sandbox>('GET', path).then(setRecord, setLoadError);
  useEffect(() => { setRecord(null); void reload(); }, [name]);
  // its host does not answer: look again now and then, so the panel shows it back as soon as it is
  const unavailable = record?.status === 'unavailable';
  useEffect(() => {
    if (!unavailable) return;
    const timer = setInterval(() => { api<Sandbox>('GET', path).then(setRecord, () => undefined); }, UNAVAILABLE_LOOK_MS);
    return () => clearInterval(timer);
  }, [unavailable, path]);

  if (loadError) return <><h1>{name}</h1><ErrorNote error={loadError} /><p><a href="#/sandboxes">Back to the sandboxes</a></p></>;
  if (!record) return <p aria-busy="true">Loading {name}…</p>;
  const running = record.status === 'running';
  const stopped = (what: string) => <p class="muted">{unavailable ? "Not reachable while the sandbox's host does not answer." : `Start the sandbox to ${what}.`}</p>;
  return (
    <>
      <p><a href="#/sandboxes">← Sandboxes</a></p>
      <h1>{record.name} <StatusBadge status={record.status} /></h1>
      <Lifecycle record={record} path={path} onChange={setRecord} />
      <Section title="Settings" id="settings">
        <DurationEditor id="idle_timeout" label="Idle timeout" value={record.idle_timeout} help="Sleeps after this long without app or engine traffic: 45m, 2h, or never."
          onSave={async (v) => setRecord(await api<Sandbox>('PATCH', path, { idle_timeout: v }))} />
        <DurationEditor id="deep_sleep_after" label="Deep sleep after" value={record.deep_sleep_after} help="Asleep this long, it is taken down (data kept): 7d, 14d, or never."
          onSave={async (v) => setRecord(await api<Sandbox>('PATCH', path, { deep_sleep_after: v }))} />
      </Section>
      <Section title="Apps" id="apps">
        {record.apps.length === 0
          ? <p class="muted">No app addresses yet. Publish a port on all interfaces (<code>"8080:8080"</code>) in a compose project to get one.</p>
          : <ul class="apps">{record.apps.map((a) => (
              <li key={a.url}><span class={`dot ${a.answers ? 'up' : 'down'}`} role="img" aria-label={a.answers ? 'answers' : 'does not answer'} /> <a href={a.url} target="_blank" rel="noreferrer">{a.url}</a> <span class="muted">{a.answers ? 'answers' : 'does not answer'}{a.visibility === 'owner' ? ' · private: you and admins' : a.visibility === 'authenticated' ? ' · private: signed-in users' : ''}</span></li>
            ))}</ul>}
      </Section>
      <Access record={record} path={path} onChange={setRecord} />
      {record.extras.manager_url && <Manager extras={record.extras} />}
      <Section title="Usage" id="usage">{running ? <UsageView path={path} /> : unavailable ? stopped('see its use') : <p class="muted">Asleep: it uses no CPU or memory.</p>}</Section>
      <Section title="Containers" id="containers">{running ? <Containers path={path} /> : stopped('see what runs in it')}</Section>
      <Section title="Terminal" id="terminal">{running ? <Terminal path={path} /> : stopped('open a terminal in it')}</Section>
      <Section title="Logs" id="logs">{running ? <LogView path={path} /> : stopped("follow its apps' logs")}</Section>
      <Section title="Files" id="files">{running ? <FileBrowser path={path} /> : stopped('browse its files')}</Section>
      <Registry path={path} />
      <Fork name={record.name} path={path} />
      <Delete name={record.name} path={path} />
    </>
  );
}

function Lifecycle({ record, path, onChange }: { record: Sandbox; path: string; onChange: (r: Sandbox) => void }) {
  const [busy, error, run] = useAction();
  const [since, setSince] = useState<number | null>(null);
  const [, tick] = useState(0);
  useEffect(() => {
    if (since === null) return;
    const timer = setInterval(() => tick((n) => n + 1), 1000);
    return () => clearInterval(timer);
  }, [since]);
  const start = () => run(async () => {
    setSince(Date.now());
    // POST start answers once the sandbox runs; meanwhile the status shown follows the record.
    const poll = setInterval(() => { api<Sandbox>('GET', path).then(onChange, () => undefined); }, 2000);
    try { onChange(await api<Sandbox>('POST', `${path}/start`)); } finally { clearInterval(poll); setSince(null); }
  });
  const keepAwake = () => run(async () => onChange(await api<Sandbox>('POST', `${path}/keep-awake`)));
  return (
    <div class="card row wrap">
      <div class="grow">
        {record.status === 'running' && <p>Running; {record.stops_at && !isNever(record.idle_timeout) ? <>stops {when(record.stops_at)} if idle ({date(record.stops_at)}).</> : 'idle timeout: never.'}</p>}
        {record.status === 'exited' && <p>Asleep; {record.deep_sleep_at ? <>taken down {when(record.deep_sleep_at)}.</> : 'never taken down.'} Starting takes a few seconds.</p>}
        {record.status === 'deep_sleep' && <p>In deep sleep: data kept, containers removed. Starting takes about 30 seconds.</p>}
        {record.status === 'unavailable' && <p>Unavailable: the host that holds this sandbox does not answer. Nothing is lost: it comes back as it was, with its files, once the host answers. Until then its addresses say so, and it cannot be started or changed.</p>}
        {since !== null && <p role="status" aria-live="polite">Starting… {Math.round((Date.now() - since) / 1000)} s</p>}
        <ErrorNote error={error} />
      </div>
      {(record.status === 'exited' || record.status === 'deep_sleep') && <button type="button" class="primary" onClick={start} disabled={busy}>{busy ? 'Starting…' : 'Start'}</button>}
      {record.status === 'running' && <button type="button" onClick={keepAwake} disabled={busy}>Keep awake</button>}
    </div>
  );
}

function Access({ record, path, onChange }: { record: Sandbox; path: string; onChange: (r: Sandbox) => void }) {
  const [busy, error, run] = useAction();
  const enable = () => {
    if (!confirm(`Enable engine access for ${record.name}? This restarts the sandbox: its apps are down for a few seconds.`)) return;
    void run(async () => onChange(await api<Sandbox>('POST', `${path}/engine-access`)));
  };
  const ea = record.engine_access;
  return (
    <Section title="Access" id="access">
      {ea.state === 'needs-certs' ? (
        <>
          <p>This sandbox was made before engine access existed: its Docker engine cannot be reached until you enable it.</p>
          <p class="warn">Enabling issues certificates and <strong>restarts the sandbox</strong>.</p>
          <button type="button" class="primary" onClick={enable} disabled={busy}>{busy ? 'Enabling… (restarting)' : 'Enable'}</button>
        </>
      ) : (
        <>
          <p>Docker engine: <code>{ea.docker_host}</code> <CopyButton text={ea.docker_host} /></p>
          <p>The export folder holds <code>svc.env</code> (with a new access token limited to this sandbox), the engine's client certificates and a README: hand it to a coding agent with the <a href="/agent-guide.md">agent guide</a>.</p>
          <p><a class="button" href={`/api${path}/export`}>Download export folder</a></p>
        </>
      )}
      <ErrorNote error={error} />
    </Section>
  );
}

function Manager({ extras }: { extras: Record<string, string> }) {
  const [shown, setShown] = useState(false);
  return (
    <Section title="Management tool" id="manager">
      <p><a href={extras.manager_url} target="_blank" rel="noreferrer">{extras.manager_url}</a> (user <code>admin</code>)</p>
      {extras.manager_password && (shown
        ? <p>Password: <code>{extras.manager_password}</code> <CopyButton text={extras.manager_password} /> <button type="button" onClick={() => setShown(false)}>Hide</button></p>
        : <p><button type="button" onClick={() => setShown(true)}>Reveal password</button></p>)}
    </Section>
  );
}

function Registry({ path }: { path: string }) {
  const [report, setReport] = useState<RegistryReport | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => { api<RegistryReport>('GET', `${path}/registry`).then(setReport, setError); }, [path]);
  return (
    <Section title="Registry" id="registry">
      <ErrorNote error={error} />
      {report && report.images.length === 0 && <p class="muted">No images pushed yet. Every push is scanned for secrets.</p>}
      {report?.images.map((img) => (
        <div key={img.name}>
          <h3>{img.name} <span class={`badge ${img.visibility === 'public' ? 'running' : 'warn'}`}>{img.visibility}</span></h3>
          <p class="muted">{img.reason}</p>
          <ul>
            {img.versions.map((v) => (
              <li key={v.digest}>
                <code>{v.tags.join(', ') || v.digest.slice(0, 19)}</code> scan: {v.scan.state}{v.scan.reason ? ` (${v.scan.reason})` : ''}
                {v.findings.length > 0 && <ul>{v.findings.map((f) => <li key={`${f.path}:${f.rule}:${f.fingerprint ?? ''}`}><code>{f.path}{f.line ? `:${f.line}` : ''}</code>: {f.rule}{f.vendored ? ' (in a package folder)' : ''}</li>)}</ul>}
              </li>
            ))}
          </ul>
        </div>
      ))}
    </Section>
  );
}

function Delete({ name, path }: { name: string; path: string }) {
  const [busy, error, run] = useAction();
  const remove = () => {
    if (!confirm(`Delete ${name}? It is archived (configuration and data kept in the archive) and disappears from your list.`)) return;
    void run(async () => {
      await api('DELETE', path);
      location.hash = '#/sandboxes';
    });
  };
  return (
    <Section title="Delete" id="delete">
      <p>Deleting archives the sandbox: an operator can restore its data from the archive.</p>
      <button type="button" class="danger" onClick={remove} disabled={busy}>{busy ? 'Deleting…' : `Delete ${name}`}</button>
      <ErrorNote error={error} />
    </Section>
  );
}
