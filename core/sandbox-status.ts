import { errors } from './errors.ts';

/** What an engine that answers says of a sandbox (spec 2.1): `exited` is asleep, `deep_sleep` has no containers at all. */
export type EngineStatus = 'running' | 'exited' | 'deep_sleep';

/**
 * The status users see: spec 2.1's values, plus `unavailable` (issue 20, an extension): the engine
 * that holds the sandbox does not answer, so nothing is known of it now; it is not gone, and it
 * comes back in its real state when that engine answers. A healthy host never shows it.
 */
export type SandboxStatus = EngineStatus | 'unavailable';

/** A status as a message says it: "<sandbox> is asleep", "… is in deep sleep". */
export function statusInWords(status: SandboxStatus): string {
  return status === 'exited' ? 'asleep' : status === 'deep_sleep' ? 'in deep sleep' : status;
}

/** 409 SVC_SANDBOX_NOT_RUNNING: "<sandbox> is asleep: start it first". */
export function notRunning(sandbox: string, status: EngineStatus): Error {
  return new errors.SandboxNotRunning(sandbox, statusInWords(status), sandbox);
}
