import { errors } from './errors.ts';
import type { EngineStatus, SandboxStatus } from './sandbox-summary.ts';

export type { EngineStatus, SandboxStatus };

/** A status as a message says it: "<sandbox> is asleep", "… is in deep sleep". */
export function statusInWords(status: SandboxStatus): string {
  return status === 'exited' ? 'asleep' : status === 'deep_sleep' ? 'in deep sleep' : status;
}

/** 409 SVC_SANDBOX_NOT_RUNNING: "<sandbox> is asleep: start it first". */
export function notRunning(sandbox: string, status: EngineStatus): Error {
  return new errors.SandboxNotRunning(sandbox, statusInWords(status), sandbox);
}
