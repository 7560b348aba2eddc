import type Docker from 'dockerode';
import { FrameReader } from '../core/engine-frames.ts';
import { COMPOSE_PROJECT, COMPOSE_SERVICE } from '../core/compose-labels.ts';
import { MAX_LINE, parseTime, type LogEvent } from './log-stream.ts';

export const MAX_RECENT_LINES = 2000;

export type RecentLine = Omit<LogEvent, 'id'>;

/**
 * The last `tail` lines of the sandbox's app containers (running or stopped: a crashed app's last
 * words are what one looks for), merged in time order; `container` picks one by name or id.
 * What `docker logs --tail` gives, for every container at once, without following.
 */
export async function recentLogs(engine: Docker, opts: { tail: number; container?: string }): Promise<RecentLine[]> {
  const tail = Math.min(opts.tail, MAX_RECENT_LINES);
  const containers = (await engine.listContainers({ all: true })).filter((c) =>
    !opts.container || c.Id.startsWith(opts.container) || (c.Names ?? []).some((n) => n.replace(/^\//, '') === opts.container));
  const perContainer = await Promise.all(containers.map(async (c) => {
    const info = await engine.getContainer(c.Id).inspect().catch(() => undefined);
    if (!info) return []; // removed meanwhile
    const raw = (await engine.getContainer(c.Id).logs({ follow: false, stdout: true, stderr: true, timestamps: true, tail })) as unknown as Buffer;
    const base = {
      container: info.Name.replace(/^\//, ''),
      container_id: info.Id.slice(0, 12),
      service: info.Config.Labels?.[COMPOSE_SERVICE] ?? null,
      project: info.Config.Labels?.[COMPOSE_PROJECT] ?? null,
    };
    const text = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    if (info.Config.Tty) text.stdout.push(raw);
    else new FrameReader((kind, payload) => text[kind === 2 ? 'stderr' : 'stdout'].push(payload)).push(raw);
    return (['stdout', 'stderr'] as const).flatMap((stream) =>
      Buffer.concat(text[stream]).toString('utf8').split('\n').filter((raw) => raw.includes(' ')).map((raw) => {
        const sp = raw.indexOf(' ');
        return { ...base, stream, time: raw.slice(0, sp), line: raw.slice(sp + 1, sp + 1 + MAX_LINE), ns: parseTime(raw.slice(0, sp)) ?? 0n };
      }));
  }));
  return perContainer.flat()
    .sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0))
    .slice(-tail)
    .map(({ ns: _ns, ...line }) => line);
}
