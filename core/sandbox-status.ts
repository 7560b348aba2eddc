import { errors } from './errors.ts';

/** Spec 2.1 status values: `exited` is asleep, `deep_sleep` has no containers at all. */
export type SandboxStatus = 'running' | 'exited' | 'deep_sleep';

/** A status as a message says it: "<sandbox> is asleep", "… is in deep sleep". */
export function statusInWords(status: SandboxStatus): string {
  return status === 'exited' ? 'asleep' : status === 'deep_sleep' ? 'in deep sleep' : status;
}

/** 409 SVC_SANDBOX_NOT_RUNNING: "<sandbox> is asleep: start it first". */
export function notRunning(sandbox: string, status: SandboxStatus): Error {
  return new errors.SandboxNotRunning(sandbox, statusInWords(status), sandbox);
}
