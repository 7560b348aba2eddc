import type Docker from 'dockerode';
import { onJsonLines } from '../../core/json-lines.ts';

interface EngineEvent {
  Action: string;
}

export interface StartCount {
  /** Starts a wake asked for. */
  starts: number;
  creates: number;
  /** Starts by the restart policy (unless-stopped): a start after a `die` with no `kill` before it. */
  policyRestarts: number;
}

/**
 * Counts a container's starts from now on, from the engine's live event stream. (Its history is no
 * use: dockerd keeps only its last 256 events, all containers together, so on a busy engine a stop's
 * `kill` falls out before its `die` and the next start looks like the restart policy's.)
 */
export async function watchStarts(docker: Docker, container: string): Promise<{ stop(): Promise<StartCount> }> {
  const stream = await docker.getEvents({ filters: { type: ['container'], container: [container], event: ['create', 'start', 'kill', 'die'] } }) as unknown as NodeJS.ReadableStream & { destroy(): void };
  const count: StartCount = { starts: 0, creates: 0, policyRestarts: 0 };
  let killed = false;
  let diedAlone = false;
  onJsonLines(stream, (event) => {
    const { Action } = event as EngineEvent;
    if (Action === 'kill') killed = true;
    else if (Action === 'die') diedAlone = !killed;
    else if (Action === 'create') count.creates += 1;
    else if (Action === 'start') {
      if (diedAlone) count.policyRestarts += 1;
      else count.starts += 1;
      killed = false;
      diedAlone = false;
    }
  });
  stream.on('error', () => undefined);
  return {
    /** Call once the wakes have answered: their starts happened before; the stream may lag a moment. */
    async stop() {
      const deadline = Date.now() + 10_000;
      while (count.starts + count.policyRestarts === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      await new Promise((r) => setTimeout(r, 500)); // a second start, if any, is no later than the first's answer
      stream.destroy();
      return { ...count };
    },
  };
}
