import Docker from 'dockerode';

/** A dockerode client for an engine address: `unix:///path/to.sock` or `tcp://host:port`. */
export function engineClient(url: string): Docker {
  if (url.startsWith('unix://')) return new Docker({ socketPath: url.slice('unix://'.length) });
  const u = new URL(url.replace(/^tcp:/, 'http:'));
  return new Docker({ host: u.hostname, port: Number(u.port) });
}

/** The HTTP status of an engine error (404 no such object, 409 exists already, 304 no change). */
export function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number } | null)?.statusCode;
}
