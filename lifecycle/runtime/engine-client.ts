import Docker from 'dockerode';
import { RuntimeUnreachable } from './sandbox-runtime.ts';

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

/** Node's codes of a TLS handshake that failed (an engine over TCP whose certificate expired, or names another host). */
const TLS_HANDSHAKE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_(GET|VERIFY)|DEPTH_ZERO_SELF_SIGNED|SELF_SIGNED_CERT)/;

/**
 * Why an engine could not be asked at all (refused, no socket, no route, a TLS handshake that failed,
 * no answer before our own deadline), or undefined for any other failure: only a call that never
 * reached the engine counts.
 */
export function unreachableReason(err: unknown): string | undefined {
  const e = err as { code?: string; syscall?: string; message?: string } | null;
  if (e?.syscall === 'connect') return e.message;
  if (typeof e?.code === 'string' && TLS_HANDSHAKE.test(e.code)) return `TLS: ${e.message}`;
  if (e?.code === 'ABORT_ERR') return 'no answer in time'; // only our own deadlines abort engine calls
  return undefined;
}

/** Runs an engine call; one that never reached the engine rejects with RuntimeUnreachable. */
export async function guarded<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    const reason = unreachableReason(err);
    throw reason ? new RuntimeUnreachable(reason) : err;
  }
}
