export { Lifecycle, type CreateSandboxInput, type SettingsPatch, DEFAULT_IDLE_TIMEOUT, DEFAULT_DEEP_SLEEP_AFTER } from './controller.ts';
export { startLifecycleWorker } from './worker.ts';
export { DockerRuntime, type RuntimeState } from './runtime/docker-runtime.ts';
export type { SandboxStatus } from '../core/sandbox-status.ts';
export { IdleSessions } from './sessions.ts';
export { parseDuration, normaliseIdleTimeout, normaliseDeepSleepAfter, displayDuration, IDLE_OFF } from './durations.ts';
export { sandboxName, shortName } from './names.ts';
export type { SandboxView, SandboxSummary } from './view.ts';
