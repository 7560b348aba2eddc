import type Docker from 'dockerode';

interface EngineEvent {
  Action: string;
  timeNano: number;
}

/**
 * Container starts that a wake asked for, from the engine's event log between `since` and now.
 * A start after a `die` with no `kill` before it is the restart policy's (unless-stopped), not a
 * wake's; a minute of earlier events is read so a stop's `kill`, seconds before its `die`, is seen.
 */
export async function wakeStarts(docker: Docker, container: string, since: number): Promise<{ starts: number; creates: number; policyRestarts: number }> {
  const raw = await docker.getEvents({
    since: Math.floor(since / 1000) - 60,
    until: Math.ceil(Date.now() / 1000) + 1,
    filters: { type: ['container'], container: [container], event: ['create', 'start', 'kill', 'die'] },
  }) as unknown as NodeJS.ReadableStream;
  const chunks: Buffer[] = [];
  for await (const chunk of raw) chunks.push(Buffer.from(chunk as Buffer));
  const events = Buffer.concat(chunks).toString().split('\n').filter(Boolean).map((l) => JSON.parse(l) as EngineEvent);
  let starts = 0;
  let creates = 0;
  let policyRestarts = 0;
  let killed = false;
  let diedAlone = false;
  for (const e of events) {
    const mine = e.timeNano / 1e6 >= since;
    if (e.Action === 'kill') killed = true;
    else if (e.Action === 'die') diedAlone = !killed;
    else if (e.Action === 'create' && mine) creates += 1;
    else if (e.Action === 'start') {
      if (mine) {
        if (diedAlone) policyRestarts += 1;
        else starts += 1;
      }
      killed = false;
      diedAlone = false;
    }
  }
  return { starts, creates, policyRestarts };
}
