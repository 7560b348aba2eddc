import type WebSocket from 'ws';
import type { IncusClient } from './incus-client.ts';

/** One lifecycle event of an instance: `instance-started`, `instance-stopped`, `instance-updated`, … (doc/events.md). */
export interface InstanceEvent {
  action: string;
  instance: string;
  /** The member it happened on (a cluster's events come from every member over one connection). */
  location: string;
}

const AGAIN_MS = 1000;

/**
 * Follows Incus's lifecycle events (the `/1.0/events?type=lifecycle` websocket) and hands each
 * instance's to `onEvent`; `onUp(true)` once the stream is open, `onUp(false)` when it closed (it is
 * opened again a second later, until the returned function is called). A cluster sends every member's
 * events over the connection to any one of them.
 */
export function watchInstanceEvents(client: IncusClient, onEvent: (e: InstanceEvent) => void, onUp: (up: boolean) => void): () => void {
  let stopped = false;
  let ws: WebSocket | undefined;
  let again: NodeJS.Timeout | undefined;
  const subscribe = () => {
    if (stopped) return;
    const socket = client.eventsSocket('lifecycle');
    ws = socket;
    socket.on('open', () => onUp(true));
    socket.on('message', (data: Buffer) => {
      const e = parse(data);
      if (e) onEvent(e);
    });
    socket.on('error', () => undefined); // 'close' follows
    socket.on('close', () => {
      onUp(false);
      if (!stopped) again = setTimeout(subscribe, AGAIN_MS);
    });
  };
  subscribe();
  return () => {
    stopped = true;
    clearTimeout(again);
    ws?.terminate();
  };
}

/** An instance's lifecycle event, or undefined for anything else (other events, what is no JSON). */
function parse(data: Buffer): InstanceEvent | undefined {
  let e: { type?: string; location?: string; metadata?: { action?: string; source?: string } };
  try {
    e = JSON.parse(data.toString('utf8')) as typeof e;
  } catch {
    return undefined;
  }
  const action = e.metadata?.action;
  const source = /^\/1\.0\/instances\/([^/?]+)/.exec(e.metadata?.source ?? '');
  if (e.type !== 'lifecycle' || typeof action !== 'string' || !action.startsWith('instance-') || !source) return undefined;
  return { action, instance: decodeURIComponent(source[1]!), location: e.location ?? '' };
}
