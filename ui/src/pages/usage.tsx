import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorNote } from '../components.tsx';
import { size } from '../format.ts';

interface Usage {
  at: string;
  cpu: { cores: number; limit_cores: number };
  memory: { bytes: number; limit_bytes: number };
  disk: { used_bytes: number; free_bytes: number; complete: boolean; measured_at: string } | null;
  history: Array<{ at: string; cpu_cores: number; memory_bytes: number }>;
}

/** The service samples only while someone asks: the panel asks this often while it is shown. */
const POLL_MS = 3000;
const WINDOW_MS = 10 * 60_000;

/** The sandbox's CPU, memory and disk now, and a graph of what was sampled in the last minutes. */
export function UsageView({ path }: { path: string }) {
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      // a hidden tab asks nothing, so nothing is sampled for it
      if (document.visibilityState === 'visible') await api<Usage>('GET', `${path}/usage`).then((u) => { setUsage(u); setError(null); }, setError);
      if (!stopped) timer = setTimeout(() => void tick(), POLL_MS);
    };
    void tick();
    return () => { stopped = true; clearTimeout(timer); };
  }, [path]);

  if (!usage) return error ? <ErrorNote error={error} /> : <p aria-busy="true">Measuring…</p>;
  const { cpu, memory, disk } = usage;
  const percent = (part: number, whole: number) => (whole > 0 ? Math.round((part / whole) * 100) : 0);
  return (
    <div class="usage">
      <ErrorNote error={error} />
      <dl class="meters">
        <div class="meter cpu"><dt>CPU</dt><dd data-cores={cpu.cores}>{cpu.cores.toFixed(2)} of {cpu.limit_cores} cores ({percent(cpu.cores, cpu.limit_cores)} %)</dd></div>
        <div class="meter memory"><dt>Memory</dt><dd data-bytes={memory.bytes}>{size(memory.bytes)} of {size(memory.limit_bytes)} ({percent(memory.bytes, memory.limit_bytes)} %)</dd></div>
        <div class="meter disk"><dt>Disk</dt>{disk
          ? <dd data-bytes={disk.used_bytes} title="Its folders and the inner engine's images, containers and volumes; measured once a minute">{disk.complete ? '' : 'over '}{size(disk.used_bytes)} used, {size(disk.free_bytes)} free</dd>
          : <dd class="muted">measuring…</dd>}</div>
      </dl>
      <Graph usage={usage} />
    </div>
  );
}

/** CPU and memory as a share of the sandbox's limits, over the last minutes (gaps where nobody looked). */
function Graph({ usage }: { usage: Usage }) {
  const points = usage.history.map((p) => ({ t: Date.parse(p.at), cpu: p.cpu_cores / usage.cpu.limit_cores, memory: p.memory_bytes / usage.memory.limit_bytes }));
  const end = points.at(-1)?.t ?? Date.now();
  const start = Math.max(points[0]?.t ?? end, end - WINDOW_MS);
  const span = Math.max(end - start, 60_000);
  const W = 600;
  const H = 100;
  const line = (value: (p: (typeof points)[number]) => number) => points
    .filter((p) => p.t >= start)
    .map((p) => `${(((p.t - (end - span)) / span) * W).toFixed(1)},${(H - Math.min(1, Math.max(0, value(p))) * H).toFixed(1)}`)
    .join(' ');
  const minutes = Math.round(span / 60_000);
  return (
    <figure class="usage-graph">
      <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={`CPU and memory, as a share of the limits, over the last ${minutes} min`} data-points={points.length}>
        <line x1="0" y1={H / 2} x2={W} y2={H / 2} class="grid-line" />
        <polyline class="memory" points={line((p) => p.memory)} />
        <polyline class="cpu" points={line((p) => p.cpu)} />
      </svg>
      <figcaption><span class="key cpu">CPU</span> <span class="key memory">memory</span> as a share of the limits, last {minutes} min while this panel was open</figcaption>
    </figure>
  );
}
