import type Docker from 'dockerode';
import { onJsonLines } from '../../core/json-lines.ts';
import { LABEL_INSTANCE, LABEL_SANDBOX } from './docker-labels.ts';
import type { KeptStates } from './kept-states.ts';

/** The container events that change what inspect answers (state, address; `create`: no longer deep sleep). */
const STATE_EVENTS = ['create', 'start', 'restart', 'die', 'stop', 'oom', 'pause', 'unpause', 'destroy', 'rename', 'update'];
/** How long a lost events stream waits before it subscribes again. */
const RESUBSCRIBE_MS = 1000;

/**
 * Watches one engine's container events of an instance's sandboxes (DockerRuntime.watchStarts): each
 * event makes `kept` forget the sandbox (reads ask its engine again), but the start of a start() of the
 * runtime's own, which settled it and keeps its state; `onStart` hears every other start (its restart
 * policy after a crash or an out-of-memory kill, an engine restart). `kept` holds nothing while the
 * stream is down; a lost stream is subscribed again. Returns a function that stops watching.
 */
export function watchContainerEvents(docker: Docker, opts: { instance: string; kept: KeptStates; onStart?: (name: string) => void }): () => void {
  const { kept } = opts;
  let stopped = false;
  let stream: NodeJS.ReadableStream | undefined;
  let again: NodeJS.Timeout | undefined;
  const subscribe = async () => {
    if (stopped) return;
    try {
      stream = await docker.getEvents({ filters: { type: ['container'], event: STATE_EVENTS, label: [`${LABEL_INSTANCE}=${opts.instance}`] } });
      if (stopped) return (stream as unknown as { destroy(): void }).destroy();
      kept.eventsNow(true);
      onJsonLines(stream, (event) => {
        const e = event as { Action?: string; Actor?: { Attributes?: Record<string, unknown> } } | null;
        const name = e?.Actor?.Attributes?.[LABEL_SANDBOX];
        if (typeof name !== 'string') return;
        // the start of a start() of this runtime's own: that call settled it and keeps its state
        if (e?.Action === 'start' && kept.startedByUs(name)) return;
        kept.changed(name);
        if (e?.Action === 'start') opts.onStart?.(name);
      });
      stream.on('error', () => undefined);
      // 'close', not 'end': a stream the engine's side reset (it went away) never ends
      stream.on('close', () => {
        kept.eventsNow(false);
        if (!stopped) again = setTimeout(subscribe, RESUBSCRIBE_MS);
      });
    } catch {
      if (!stopped) again = setTimeout(subscribe, RESUBSCRIBE_MS);
    }
  };
  void subscribe();
  return () => {
    stopped = true;
    clearTimeout(again);
    kept.eventsNow(false);
    (stream as unknown as { destroy?(): void } | undefined)?.destroy?.();
  };
}
