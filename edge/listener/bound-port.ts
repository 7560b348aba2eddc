import type net from 'node:net';

/** A listening port of the edge; close() also drops the connections still open on it. */
export interface BoundPort {
  readonly port: number;
  close(): Promise<void>;
}

/** Listens and tracks every connection, so that closing the port ends them too (no lingering streams). */
export async function bindPort(server: net.Server, port: number | string, host?: string): Promise<BoundPort> {
  const sockets = new Set<net.Socket>();
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    // a string is a unix socket path (the data plane hands connections over on one)
    if (typeof port === 'string') server.listen(port, done);
    else server.listen(port, host, done);
  });
  return {
    port: typeof port === 'string' ? 0 : (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}
