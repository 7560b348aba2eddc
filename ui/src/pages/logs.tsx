import { useEffect, useRef, useState } from 'preact/hooks';

interface Line { id: string; service: string | null; container: string; stream: string; line: string }
const KEEP = 500;

/** The sandbox's live log stream (SSE). EventSource reconnects by itself with Last-Event-ID. */
export function LogView({ path }: { path: string }) {
  const [lines, setLines] = useState<Line[]>([]);
  const [state, setState] = useState('connecting…');
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const source = new EventSource(`/api${path}/logs/stream?tail=50`);
    source.onopen = () => setState('live');
    source.onerror = () => setState(source.readyState === EventSource.CLOSED ? 'not available now; reload the page to try again' : 'reconnecting…');
    source.addEventListener('log', (e) => {
      const line = JSON.parse((e as MessageEvent).data) as Line;
      setLines((old) => [...old.slice(-(KEEP - 1)), line]);
    });
    source.addEventListener('end', (e) => {
      const { message } = JSON.parse((e as MessageEvent).data) as { message?: string };
      setState(message ?? 'the sandbox went to sleep; start it and reload to follow again');
      source.close();
    });
    return () => source.close();
  }, [path]);
  useEffect(() => {
    const el = box.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [lines]);
  return (
    <div>
      <p class="muted" role="status">Logs: {state}</p>
      <pre class="logs" ref={box} tabIndex={0} aria-label="Log lines" aria-live="off">
        {lines.length === 0 ? 'No log lines yet.' : lines.map((l) => <div key={l.id} class={l.stream}><span class="svc">{l.service ?? l.container}</span> {l.line}</div>)}
      </pre>
    </div>
  );
}
