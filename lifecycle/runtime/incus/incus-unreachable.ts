import { RuntimeUnreachable } from '../sandbox-runtime.ts';
import { IncusError, IncusUnreachable } from './incus-client.ts';

/*
 * One classification of what Incus answers when the member that holds an instance cannot be reached:
 * every such error becomes the runtime's RuntimeUnreachable (a 503 with the reason in the log, as
 * Docker's runtime answers for an engine that is gone), never an IncusError that callers turn into a 500.
 *
 * A cluster member forwards a request for another member's instance to that member; when the forward
 * fails, Incus answers 500 with Go's error of its own request, `Get "https://100.64.1.2:8443/1.0/…":
 * dial tcp …: connect: connection refused` (or `i/o timeout`, or, while a killed member comes back and
 * serves its own certificate before the cluster's, `tls: failed to verify certificate: x509: certificate
 * is valid for 127.0.0.1, ::1, not 100.64.1.2`: seen in CI on the usage route), or the member's own
 * `Server isn't ready yet` while its daemon starts again (the cluster test's `crash`).
 */

/** A member's request to another member that failed: Go's url.Error, `<Method> "<url>": <why>`. */
const FORWARD_FAILED = /^(get|post|put|patch|delete|head) "https?:\/\/[^"]+": /i;
/** Words of a member that cannot be reached, with or without the forward's prefix. */
const MEMBER_GONE = /connection refused|no route to host|i\/o timeout|context deadline exceeded|connection reset|broken pipe|tls: |x509: |\bEOF\b|is offline|missing event connection|failed to connect to|unable to connect to|server isn't ready yet/i;

/**
 * Why `err` says the member holding the instance cannot be reached, or undefined when it says
 * something else (a real failure, kept as it is). `read`: the error of a GET of the instance, where
 * any 5xx is no answer about it (a member that could not forward to the instance's: its dial timed out).
 */
export function unreachableReason(err: unknown, opts: { read?: boolean } = {}): string | undefined {
  if (err instanceof RuntimeUnreachable) return err.reason;
  if (err instanceof IncusUnreachable) return err.reason;
  if (err instanceof IncusError && err.status >= 500 && (opts.read || FORWARD_FAILED.test(err.message) || MEMBER_GONE.test(err.message))) return err.message;
  return undefined;
}

/**
 * Runs a call of the runtime; an error that means the instance's member cannot be reached becomes
 * RuntimeUnreachable: by its words (unreachableReason), or, whatever its words, when `lostOn` says the
 * member that holds the sandbox is known lost (MemberHealth) by the time it failed (an exec socket
 * refused as the member went away says only `Unexpected server response: 500`).
 */
export async function guarded<T>(call: () => Promise<T>, lostOn?: () => string | undefined): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw unreachable(err, lostOn);
  }
}

/** `err` as guarded() rethrows it. */
export function unreachable(err: unknown, lostOn?: () => string | undefined): unknown {
  if (err instanceof RuntimeUnreachable) return err;
  const reason = unreachableReason(err) ?? lostOn?.();
  return reason ? new RuntimeUnreachable(reason) : err;
}
