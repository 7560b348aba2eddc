import type net from 'node:net';
import { buildConnector } from 'undici';

/**
 * The connections to apps, made for undici with one guard. undici 7 (the last line that runs on
 * Node 20) asserts in its socket's 'end' handler that the response parser is not paused
 * (nodejs/undici#5360, fixed in undici 8, which needs Node 22): an app that closes its connection
 * while its answer is paused for a slow client — any HTTP/1.0 or `Connection: close` server under
 * load, or an app doing it on purpose — threw from an event handler and ended the process. So an
 * app socket's 'end' (and with it the close) waits while its parser is paused, and goes through
 * once it runs again.
 */
export class AppSockets {
  private readonly held = new Set<net.Socket>();

  /** The `connect` option of the undici Agent that talks to apps. */
  connector(timeoutMs: number): buildConnector.connector {
    const connect = buildConnector({ timeout: timeoutMs });
    return (options, callback) => connect(options, (err, socket) => {
      if (socket) this.guard(socket as net.Socket);
      // undici's callback type is a union of its two outcomes; pass both through as they came
      (callback as (e: Error | null, s: typeof socket) => void)(err, socket);
    });
  }

  /** After a paused answer was resumed: the 'end' of every connection whose parser runs again goes through. */
  release(): void {
    for (const socket of this.held) {
      if (parserPaused(socket)) continue;
      this.held.delete(socket);
      if (!socket.destroyed) socket.emit('end');
    }
  }

  private guard(socket: net.Socket): void {
    // Else the stream ends its writing side at the app's FIN and closes the socket, whose 'close'
    // handler asserts the same: undici closes it itself once it has seen the 'end'.
    socket.allowHalfOpen = true;
    const emit = socket.emit;
    const held = this.held;
    // every event of the connection passes here: `arguments` through apply, which V8 does not copy
    socket.emit = function (this: net.Socket, event: string | symbol): boolean {
      if (event === 'end' && parserPaused(this)) {
        if (!held.has(this)) {
          held.add(this);
          this.once('close', () => held.delete(this));
        }
        return true;
      }
      return emit.apply(this, arguments as unknown as Parameters<typeof emit>);
    };
  }
}

/** undici keeps a connection's HTTP/1 parser on the socket under a symbol of its own. */
function parserPaused(socket: net.Socket): boolean {
  const key = Object.getOwnPropertySymbols(socket).find((s) => s.description === 'parser');
  return key !== undefined && (socket as unknown as Record<symbol, { paused?: boolean } | undefined>)[key]?.paused === true;
}
