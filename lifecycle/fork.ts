// Forks (issue 35): a new sandbox of the source's owner whose volumes start as a copy of the source's
// (files, the inner engine's images, containers and volumes), with its own record, certificates,
// addresses and timers. The source is never changed: it is paused for the copy if it runs
// (runtime/volume-copy.ts) and resumed after; asleep or in deep sleep, its volumes are copied as they are.
import { errors } from '../core/errors.ts';
import type { SandboxRecord, UserRecord } from '../store/index.ts';
import type { CreateSandboxInput } from './controller.ts';
import { reachable, type SandboxRuntime } from './runtime/sandbox-runtime.ts';
import type { SandboxView } from './view.ts';

export interface ForkParts {
  runtime: SandboxRuntime;
  /** The source's record as it is now (SVC_SANDBOX_NOT_FOUND / ARCHIVED when it went). */
  record(name: string): Promise<SandboxRecord>;
  /** One transition of a sandbox at a time, across processes: the source's lease holds it still for the copy. */
  exclusive<T>(name: string, work: () => Promise<T>): Promise<T>;
  /** The lifecycle's create, with `fill` run under the new sandbox's lease before its first start. */
  create(owner: UserRecord, input: CreateSandboxInput, fill: (name: string) => Promise<void>): Promise<SandboxView>;
}

/**
 * Forks `source` (its owner's, read by the caller) into a sandbox named `name`. Its settings (template,
 * idle timeout, deep sleep, memory and CPU limits) are the source's at this moment, then its own; the
 * owner's quotas count it as any create (max_sandboxes, memory_mb, cpus, max_running). An engine
 * that does not answer (503), name errors, a taken name and quotas answer before anything is made.
 */
export async function forkSandbox(parts: ForkParts, owner: UserRecord, source: SandboxRecord, name: string): Promise<SandboxView> {
  const { runtime } = parts;
  if (!runtime.copyVolumes) throw new errors.Conflict('this service\'s sandbox runtime cannot copy a sandbox\'s storage: forks are not available here');
  const copy = runtime.copyVolumes.bind(runtime);
  // refused before a record is made: a source whose engine does not answer
  reachable(await runtime.inspect(source.name));
  const input: CreateSandboxInput = {
    name,
    template: source.template,
    idle_timeout: source.idle_timeout,
    deep_sleep_after: source.deep_sleep_after,
    ...(source.memory_mb !== undefined ? { memory_mb: source.memory_mb } : {}),
    ...(source.cpus !== undefined ? { cpus: source.cpus } : {}),
  };
  return parts.create(owner, input, (fork) => parts.exclusive(source.name, async () => {
    // under the source's lease: no sleep, deep sleep, archive or move of it begins until the copy ends
    // (one that began since the checks above fails the fork: 502, the fork's record archived)
    await parts.record(source.name);
    await copy(source.name, fork);
  }));
}
