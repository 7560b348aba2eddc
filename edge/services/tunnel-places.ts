import type net from 'node:net';
import type { EdgeLimits } from '../limits.ts';
import { plainIp } from './headers.ts';

/** Where a sandbox's carried tunnels are counted when HAProxy carries some too (the data plane's NodeTunnels). */
export type SharedTunnelCount = (sandbox: string, shell: boolean, caps: EdgeLimits) => Promise<(() => void) | null>;

/** One of at most `cap` places under `key`; returns its release (idempotent), or null when all are taken. */
function takePlace(counts: Map<string, number>, key: string, cap: number): (() => void) | null {
  const taken = counts.get(key) ?? 0;
  if (taken >= cap) return null;
  counts.set(key, taken + 1);
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    const left = (counts.get(key) ?? 1) - 1;
    if (left > 0) counts.set(key, left);
    else counts.delete(key);
  };
}

/**
 * The places of raw tunnels (engine passthrough, shells, TCP twins) under the edge's caps. A tunnel
 * holds one of its client's handshake places for the sandbox until it is carried (released then, or
 * when it closes), and only a carried one takes a place of the sandbox's: a stranger's hanging
 * handshakes use up the stranger's own places, never the owner's. With HAProxy the sandbox's places
 * are taken in its counts (`shared`), which hold the tunnels of both processes; each process counts
 * a client's own.
 */
export class TunnelPlaces {
  private readonly handshakes = new Map<string, number>();
  private readonly tunnels = new Map<string, number>();
  private readonly shellTunnels = new Map<string, number>();
  private readonly clientShells = new Map<string, number>();

  constructor(private readonly caps: EdgeLimits, private readonly shared?: SharedTunnelCount) {}

  /** One of the client's handshake places for the sandbox, until released or the socket closes; null when all are taken. */
  admitHandshake(sandbox: string, socket: net.Socket): (() => void) | null {
    if (socket.destroyed) return null;
    const release = takePlace(this.handshakes, `${plainIp(socket.remoteAddress)}|${sandbox}`, this.caps.tunnelHandshakesPerClient);
    if (release) socket.once('close', release);
    return release;
  }

  /**
   * One of the sandbox's places for a carried tunnel, until it closes; a shell or TCP twin (`shell`)
   * also one of the shells' share and of its client's places for the sandbox. False when one is taken.
   */
  async carry(sandbox: string, socket: net.Socket, shell: boolean): Promise<boolean> {
    const places: (() => void)[] = [];
    const take = (release: (() => void) | null) => {
      if (release) places.push(release);
      return release !== null;
    };
    const releaseAll = () => {
      for (const release of places) release();
    };
    const caps = this.caps;
    const taken = (!shell || take(takePlace(this.clientShells, `${plainIp(socket.remoteAddress)}|${sandbox}`, caps.shellTunnelsPerClient)))
      && (this.shared
        ? take(await this.shared(sandbox, shell, caps))
        : take(takePlace(this.tunnels, sandbox, caps.tunnelsPerSandbox)) && (!shell || take(takePlace(this.shellTunnels, sandbox, caps.shellTunnelsPerSandbox))));
    if (!taken) {
      releaseAll();
      return false;
    }
    socket.once('close', releaseAll);
    if (!socket.destroyed) return true;
    releaseAll();
    return false;
  }
}
