// The upgrade from runner hosts (issue 20's layer, removed by issue 34 §5; docs/scale-out.md,
// "Upgrading from runner hosts"). A sandbox whose volumes a runner host holds cannot be reached by this
// release: it must never be taken for one in deep sleep (a start would make an empty sandbox here) nor
// be forgotten. So it is shown `unavailable`, every action on it answers 503 and changes nothing, and
// every start of the service says, in one structured log line, which sandboxes, where, and what to do.
import type { Logger } from '../../core/logger.ts';
import type { RunnerLeftoverStore } from '../../store/index.ts';
import { RuntimeUnreachable, type ContainerSpec, type Inspection, type SandboxExecutor, type SandboxRuntime } from './sandbox-runtime.ts';

/** Where the way over is written. */
const DOC = 'docs/scale-out.md, "Upgrading from runner hosts"';

/** What the operator does about stranded sandboxes: the log line's `advice`. */
export function upgradeAdvice(hosts: string[]): string {
  const each = hosts.length === 1 ? hosts[0]! : 'H';
  return `start the previous release again and, with its svc, move them to this machine${hosts.length === 1 ? '' : ` (for each runner host H: ${hosts.join(', ')})`}: ` +
    `svc hosts drain ${each}; svc hosts evacuate ${each}; svc hosts remove ${each}. Then start this release: they are here as they were. ` +
    `Sandboxes cannot go from a runner host to an Incus cluster directly; to grow past one machine afterwards, use an Incus cluster (${DOC})`;
}

/**
 * The runtime as the service uses it, after reading what runner hosts left in the store: unchanged
 * when nothing names a runner host's sandbox (the rows that name nothing else are removed then, and
 * said); else wrapped so that those sandboxes stay unavailable, with the advice logged as an error.
 */
export async function keepingStranded(runtime: SandboxRuntime, leftovers: RunnerLeftoverStore, logger: Logger): Promise<SandboxRuntime> {
  const left = await leftovers.read();
  if (left.rows === 0) return runtime;
  if (left.stranded.size === 0) {
    await leftovers.clear();
    if (left.hosts.length === 0) logger.info({ rows: left.rows }, 'runner hosts: the placements an earlier release kept for this machine are removed (every sandbox is on this machine)');
    else logger.warn({ hosts: left.hosts, rows: left.rows }, `runner hosts of an earlier release (${left.hosts.join(', ')}) hold none of the sandboxes: their records are removed; stop their engines on those machines (the previous release's scripts/runner.sh --stop)`);
    return runtime;
  }
  const hosts = [...new Set(left.stranded.values())].sort();
  logger.error(
    { stranded: Object.fromEntries(left.stranded), hosts, advice: upgradeAdvice(hosts) },
    `${left.stranded.size} sandbox(es) are on runner hosts (${hosts.join(', ')}), which this release no longer runs: they are shown unavailable and nothing of them is changed or removed; ${upgradeAdvice(hosts)}`,
  );
  return strandedRuntime(runtime, left.stranded);
}

/** The calls that name one sandbox first, the runtime's and its exec's: refused for a stranded one. */
const NAMED = ['start', 'stop', 'settle', 'takeDown', 'archiveVolumes', 'removeVolumes', 'resourceUse', 'diskUse', 'copyVolumes', 'innerEngine'] as const satisfies ReadonlyArray<keyof SandboxRuntime>;
const EXEC = ['start', 'startTerminal', 'getArchive', 'run'] as const satisfies ReadonlyArray<keyof SandboxExecutor>;

type Call = (name: string, ...rest: unknown[]) => unknown;

/** `runtime`, but for the sandboxes of `stranded` (sandbox → runner host): unreachable, and absent from its lists. */
function strandedRuntime(runtime: SandboxRuntime, stranded: ReadonlyMap<string, string>): SandboxRuntime {
  const reason = (name: string) => `sandbox "${name}" is on runner host "${stranded.get(name)}", which this release no longer runs (${DOC})`;
  /** `answersAtOnce`: a call that returns no promise (innerEngine) throws instead of rejecting. */
  const refusing = (call: Call, answersAtOnce = false): Call => (name, ...rest) => {
    if (!stranded.has(name)) return call(name, ...rest);
    const refusal = new RuntimeUnreachable(reason(name));
    if (answersAtOnce) throw refusal;
    return Promise.reject(refusal);
  };
  const exec: SandboxExecutor = Object.fromEntries(EXEC.map((k) => [k, refusing((runtime.exec[k] as Call).bind(runtime.exec))])) as unknown as SandboxExecutor;
  const read = (look: (name: string) => Promise<Inspection>) => (name: string): Promise<Inspection> =>
    (stranded.has(name) ? Promise.resolve({ status: 'unreachable', reason: reason(name) }) : look(name));
  const own: Partial<SandboxRuntime> = {
    exec,
    inspect: read((name) => runtime.inspect(name)),
    read: read((name) => runtime.read(name)),
    create: (spec: ContainerSpec) => (stranded.has(spec.name) ? Promise.reject(new RuntimeUnreachable(reason(spec.name))) : runtime.create(spec)),
    hostOf: async (name) => stranded.get(name) ?? runtime.hostOf(name),
    list: async (opts) => (await runtime.list(opts)).filter((s) => !stranded.has(s.name)),
    withVolumes: async () => (await runtime.withVolumes()).filter((name) => !stranded.has(name)),
  };
  return new Proxy(runtime, {
    get(target, prop) {
      if (Object.hasOwn(own, prop)) return own[prop as keyof SandboxRuntime];
      const value = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      const bound = (value as Call).bind(target);
      return (NAMED as readonly PropertyKey[]).includes(prop) ? refusing(bound, prop === 'innerEngine') : bound;
    },
  });
}
