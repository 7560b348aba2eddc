import { readFile } from 'node:fs/promises';
import { args, moveDeadline, note, only, out, SANDBOX_PREFIX, table, UsageError, type OnStore } from './command-line.ts';
import { addHost, listHosts, openHosts, openMoves, progressLine, writeHostFiles } from './hosts.ts';

/** `svc hosts …`: runner hosts added, listed, drained, evacuated and removed (docs/scale-out.md). */
export async function hostsCommand(inv: OnStore): Promise<void> {
  const { command, action, rest, options, config, store, audit } = inv;
  switch (action) {
    case 'add': {
      only(options, ['port', 'csr', 'certs-out', 'same-machine', 'networks', 'pool', 'dns'], command);
      if (typeof options.pool !== 'string') throw new UsageError('"svc hosts add" needs --pool CIDR: the host\'s sandbox addresses (scripts/runner.sh prints it)');
      if (options.networks !== undefined && !/^[1-9][0-9]{0,5}$/.test(options.networks)) throw new UsageError(`--networks needs a number of sandbox networks, got "${options.networks}"`);
      const [name, address] = args(rest, 2, 'NAME ADDRESS', command);
      if (options.port !== undefined && !/^[0-9]{1,5}$/.test(options.port)) throw new UsageError(`--port needs a port number, got "${options.port}"`);
      const { record, files } = await addHost(store, config, {
        name: name!, address: address!, pool: options.pool, sameMachine: options['same-machine'] === true,
        ...(options.port ? { port: Number(options.port) } : {}),
        ...(options.networks ? { networks: Number(options.networks) } : {}),
        ...(options.dns ? { dns: options.dns.split(',').filter(Boolean) } : {}),
        ...(options.csr ? { csrPem: await readFile(options.csr === '-' ? '/dev/stdin' : options.csr, 'utf8') } : {}),
      });
      const dir = options['certs-out'] ?? `${record.name}-certs`;
      await writeHostFiles(dir, files);
      await audit('admin.host_add', record.name, `${record.address}:${record.port}`);
      out(`host ${record.name} at ${record.address}:${record.port} (its certificate names ${record.server_name}); ` +
        `wrote ${Object.keys(files).join(', ')} to ${dir}: the host's engine takes them (SVC_ENGINE_TLS_DIR, scripts/runner.sh --certs DIR)`);
      return;
    }
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
      out(`removed host ${name}; stop its engine on that machine (scripts/runner.sh --stop)`);
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
      onMoved: (p) => audit('admin.sandbox_move', p.sandbox, `${p.from} → ${p.to}, ${p.bytes} bytes`).then(() => undefined),
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
    await audit('admin.sandbox_move', done.sandbox, `${done.from} → ${done.to}, ${done.bytes} bytes`);
    out(`${done.sandbox} is on ${done.to}; it wakes there at its next request`);
  } finally {
    await moves.close();
  }
}
