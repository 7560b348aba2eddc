import { args, moveDeadline, note, only, out, SANDBOX_PREFIX, table, type OnStore } from './command-line.ts';
import { listHosts, openHosts, openMoves, progressLine } from './hosts.ts';

/**
 * What `svc hosts add` answers, whatever its options (svc.ts asks before parsing them): runner hosts
 * went with issue 34, and a machine joins an Incus cluster instead.
 */
export const HOSTS_ADD_GONE = '"svc hosts add" is gone: this release runs no runner hosts. One machine runs sandboxes on its Docker engine; ' +
  'several machines are an Incus cluster, which a machine joins with "incus cluster add" (docs/scale-out.md, "From one machine to a cluster"). Nothing was changed';

/** `svc hosts …`: the runtime's hosts listed, drained, evacuated and removed (docs/scale-out.md). */
export async function hostsCommand(inv: OnStore): Promise<void> {
  const { command, action, rest, options, config, store, audit } = inv;
  switch (action) {
    case 'list': {
      only(options, ['json'], command);
      args(rest, 0, '', command);
      const rows = await listHosts(store, config);
      if (options.json) { out(JSON.stringify(rows)); return; }
      const gb = (n: number) => (n / 2 ** 30).toFixed(1);
      table([['NAME', 'STATE', 'SANDBOXES (of networks)', 'RUNNING', 'MEMORY (GB, limits of running / host)', 'CPUS', 'ADDRESS'],
        ...rows.map((h) => [h.name, h.state === 'away' ? `away: ${h.reason}` : h.state, `${h.sandboxes}${h.networks ? ` of ${h.networks}` : ''}`, h.running === undefined ? '-' : String(h.running),
          h.memory ? `${gb(h.memory.committed_bytes)} / ${gb(h.memory.total_bytes)}` : '-', h.cpus ? `${h.cpus.committed} / ${h.cpus.total}` : '-', h.address])]);
      return;
    }
    case 'drain':
    case 'undrain': {
      only(options, [], command);
      const [name] = args(rest, 1, 'NAME', command);
      const drain = action === 'drain';
      await openHosts(store, config).setDrained(name!, drain);
      await audit(drain ? 'admin.host_drain' : 'admin.host_undrain', name!);
      out(drain ? `drained ${name}: no new sandboxes go there; its sandboxes stay` : `${name} takes new sandboxes again`);
      return;
    }
    case 'evacuate': return evacuate(inv);
    case 'move': return move(inv);
    case 'remove': {
      only(options, [], command);
      const [name] = args(rest, 1, 'NAME', command);
      await openHosts(store, config).remove(name!);
      await audit('admin.host_remove', name!);
      out(`removed host ${name} from the cluster`);
      return;
    }
  }
}

async function evacuate({ command, rest, options, config, store, audit }: OnStore): Promise<void> {
  only(options, ['deadline'], command);
  const [name] = args(rest, 1, 'NAME', command);
  const deadlineMs = moveDeadline(options.deadline);
  const moves = openMoves(store, config);
  try {
    const { moved, failed } = await moves.hosts.evacuate(moves.mover, name!, {
      onProgress: (p) => out(progressLine(p)),
      onMoved: async (p) => {
        await moves.told(p);
        await audit('admin.sandbox_move', p.sandbox, `${p.from} → ${p.to}, ${p.bytes} bytes`);
      },
      ...(deadlineMs !== undefined ? { deadlineMs } : {}),
    });
    await audit('admin.host_evacuate', name!, `${moved.length} moved, ${failed.length} not`);
    for (const f of failed) note(`${f.sandbox}: not moved: ${f.error}`);
    out(failed.length === 0
      ? `evacuated ${name}: ${moved.length} sandbox(es) moved${moved.length ? '; each wakes on its new host at its next request' : ''}`
      : `${name}: ${moved.length} sandbox(es) moved, ${failed.length} not (${failed.map((f) => f.sandbox).join(', ')}, above); run svc hosts evacuate ${name} again`);
    if (failed.length > 0) process.exitCode = 1;
  } finally {
    await moves.close();
  }
}

async function move({ command, rest, options, config, store, audit }: OnStore): Promise<void> {
  only(options, ['to', 'deadline'], command);
  const [requested] = args(rest, 1, 'SANDBOX', command);
  const deadlineMs = moveDeadline(options.deadline);
  // the name as listed (svc-…), or without its prefix as users write it
  const name = !requested!.startsWith(SANDBOX_PREFIX) && !(await store.sandboxes.get(requested!)) ? SANDBOX_PREFIX + requested : requested!;
  const moves = openMoves(store, config);
  try {
    const done = await moves.hosts.move(moves.mover, name, {
      onProgress: (p) => out(progressLine(p)),
      ...(options.to !== undefined ? { to: options.to } : {}),
      ...(deadlineMs !== undefined ? { deadlineMs } : {}),
    });
    await moves.told(done);
    await audit('admin.sandbox_move', done.sandbox, `${done.from} → ${done.to}, ${done.bytes} bytes`);
    out(`${done.sandbox} is on ${done.to}; it wakes there at its next request`);
  } finally {
    await moves.close();
  }
}
