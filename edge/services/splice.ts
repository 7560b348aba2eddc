import type net from 'node:net';

/**
 * Copies bytes both ways between two connected sockets (Traefik's pkg/tcp/proxy.go):
 * `pipe` keeps backpressure (a slow reader pauses the fast writer, so memory stays at a few
 * stream buffers), an end on one side half-closes the other, and an error or an abrupt close on
 * either side destroys both. `onBytes` runs for every chunk in either direction; after `idleMs`
 * without a byte on a side, both are closed.
 *
 * Both sockets must allow half-open connections, otherwise a client that finishes sending
 * (FIN) would cut off the answer still coming back.
 */
export function splice(a: net.Socket, b: net.Socket, onBytes?: () => void, idleMs?: number): void {
  const destroyBoth = () => {
    a.destroy();
    b.destroy();
  };
  if (idleMs) {
    // a tunnel nobody uses any more (a client gone without a FIN) does not hold its place for ever
    a.setTimeout(idleMs, destroyBoth);
    b.setTimeout(idleMs, destroyBoth);
  }
  a.on('error', destroyBoth);
  b.on('error', destroyBoth);
  const onClose = (from: net.Socket, to: net.Socket) => () => {
    if (to.destroyed) return;
    // A clean close (we read its FIN and finished writing to it) already ended `to` through pipe.
    if (from.readableEnded && from.writableFinished) return;
    to.destroy();
  };
  a.once('close', onClose(a, b));
  b.once('close', onClose(b, a));
  if (onBytes) {
    a.on('data', onBytes);
    b.on('data', onBytes);
  }
  a.pipe(b);
  b.pipe(a);
  a.resume();
  b.resume();
}
