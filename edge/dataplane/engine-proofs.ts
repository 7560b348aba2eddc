import { ENGINE_CLIENTS } from './haproxy-config.ts';
import type { RuntimeWrites } from './runtime-writes.ts';

/**
 * What Node's edge proved of sandboxes' engines (TlsProof), for HAProxy to carry them: each engine's
 * handshake flight (what its dockerd sends before it accepted a client), and the client addresses
 * whose certificate it accepted (their engine connections may go through HAProxy, carried from the
 * start). A restarted HAProxy has forgotten the addresses: each one's next connection goes through
 * Node again.
 */
export class EngineProofs {
  /** Per sandbox, what its dockerd sends before it accepted a client. */
  private readonly flights = new Map<string, number>();

  constructor(private readonly writes: RuntimeWrites) {}

  /** Node proved `client` after `flightBytes` from the sandbox's dockerd; true when it is the sandbox's first proof. */
  proven(sandbox: string, flightBytes: number, client: string): boolean {
    void this.writes.enqueue((api) => api.setTableData(ENGINE_CLIENTS, `${client}|${sandbox}`, 'gpt0', 1));
    if (this.flights.has(sandbox)) return false;
    this.flights.set(sandbox, flightBytes);
    return true;
  }

  /** Whether a client of the sandbox's engine was proven through Node: only then may HAProxy pass its engine through. */
  has(sandbox: string): boolean {
    return this.flights.has(sandbox);
  }

  /**
   * Bytes from dockerd past which an engine connection through HAProxy counts: its handshake
   * flight plus 1 KiB (a refused client gets the flight, maybe a HelloRetryRequest, and an alert;
   * a flight of the other TLS version differs by a few hundred bytes).
   */
  proofBytes(sandbox: string): number {
    return (this.flights.get(sandbox) ?? Infinity) + 1024; // never without a measured flight
  }
}
