import { useEffect, useState } from 'preact/hooks';
import { api, enc } from '../api.ts';
import { ErrorNote, useAction } from '../components.tsx';
import { date, size } from '../format.ts';
import type { FileEntry, Volume } from '../types.ts';

const TOP = ['/root', '/home', '/srv', '/opt'];
const join = (dir: string, name: string) => `${dir.replace(/\/$/, '')}/${name}`;

/** Spec 4.2 in the browser: list, open text, upload, download, new folder, delete; volumes as places. */
export function FileBrowser({ path: sandbox }: { path: string }) {
  const [dir, setDir] = useState('/root');
  const [entries, setEntries] = useState<FileEntry[] | null>(null);
  const [volumes, setVolumes] = useState<Volume[]>([]);
  const [opened, setOpened] = useState<{ path: string; text: string } | null>(null);
  const [folder, setFolder] = useState('');
  const [busy, error, run] = useAction();

  const list = (d = dir) => run(async () => {
    setEntries(await api<FileEntry[]>('GET', `${sandbox}/files?path=${enc(d)}`));
    setDir(d);
    setOpened(null);
  });
  useEffect(() => {
    void list('/root');
    api<Volume[]>('GET', `${sandbox}/volumes`).then(setVolumes, () => undefined);
  }, [sandbox]);

  const open = (name: string) => run(async () => setOpened(await api<{ path: string; text: string }>('GET', `${sandbox}/files/text?path=${enc(join(dir, name))}`)));
  const upload = (e: Event) => {
    const input = e.target as HTMLInputElement;
    const files = [...(input.files ?? [])];
    void run(async () => {
      for (const file of files) await api('PUT', `${sandbox}/files/content?path=${enc(join(dir, file.name))}`, file);
      input.value = '';
      setEntries(await api<FileEntry[]>('GET', `${sandbox}/files?path=${enc(dir)}`));
    });
  };
  const mkdir = (e: Event) => {
    e.preventDefault();
    void run(async () => {
      await api('POST', `${sandbox}/files/mkdir`, { path: join(dir, folder.trim()) });
      setFolder('');
      setEntries(await api<FileEntry[]>('GET', `${sandbox}/files?path=${enc(dir)}`));
    });
  };
  const remove = (entry: FileEntry) => {
    if (!confirm(`Delete ${join(dir, entry.name)}${entry.type === 'dir' ? ' and everything in it' : ''}?`)) return;
    void run(async () => {
      await api('DELETE', `${sandbox}/files?path=${enc(join(dir, entry.name))}`);
      if (opened?.path === join(dir, entry.name)) setOpened(null);
      setEntries(await api<FileEntry[]>('GET', `${sandbox}/files?path=${enc(dir)}`));
    });
  };
  const parent = TOP.includes(dir) || volumes.some((v) => v.path === dir) ? null : dir.replace(/\/[^/]+\/?$/, '') || '/';

  return (
    <div class="files">
      <nav class="places" aria-label="Folders">
        {TOP.map((t) => <button type="button" key={t} aria-pressed={dir === t} onClick={() => list(t)}>{t}</button>)}
        {volumes.map((v) => <button type="button" key={v.name} aria-pressed={dir === v.path} onClick={() => list(v.path)} title={v.path}>volume {v.name}</button>)}
      </nav>
      <p class="cwd"><code>{dir}</code> {parent && <button type="button" onClick={() => list(parent)}>Up</button>}</p>
      <div class="row wrap">
        <label class="button">Upload files<input type="file" multiple onChange={upload} class="visually-hidden" /></label>
        <form class="inline" onSubmit={mkdir}>
          <label for="new-folder" class="visually-hidden">New folder name</label>
          <input id="new-folder" placeholder="new folder" value={folder} onInput={(e) => setFolder((e.target as HTMLInputElement).value)} required pattern="[^/]+" />
          <button type="submit" disabled={busy}>New folder</button>
        </form>
      </div>
      <ErrorNote error={error} />
      {entries && (
        <table>
          <thead><tr><th>Name</th><th>Size</th><th class="wide">Modified</th><th><span class="visually-hidden">Actions</span></th></tr></thead>
          <tbody>
            {entries.length === 0 && <tr><td colSpan={4} class="muted">Empty folder</td></tr>}
            {entries.map((e) => (
              <tr key={e.name}>
                <td>{e.type === 'dir'
                  ? <button type="button" class="link" onClick={() => list(join(dir, e.name))}>{e.name}/</button>
                  : e.type === 'file' ? <button type="button" class="link" onClick={() => open(e.name)}>{e.name}</button> : <span>{e.name}</span>}</td>
                <td>{e.type === 'file' ? size(e.size) : ''}</td>
                <td class="wide">{date(e.mtime)}</td>
                <td class="actions">
                  {(e.type === 'file' || e.type === 'dir') && <a href={`/api${sandbox}/files/content?path=${enc(join(dir, e.name))}`} aria-label={`Download ${e.name}`}>Download</a>}
                  <button type="button" class="link danger" onClick={() => remove(e)} aria-label={`Delete ${e.name}`}>Delete</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {opened && (
        <div class="opened">
          <p><code>{opened.path}</code> <button type="button" onClick={() => setOpened(null)}>Close</button></p>
          <pre tabIndex={0}>{opened.text}</pre>
        </div>
      )}
    </div>
  );
}
