import type { EdgeBackend, ResolvedApp, ResolvedSandbox, WakeUnderWay } from '../edge/index.ts';
import type { Logger } from '../core/logger.ts';
import type { AppDirectory } from './apps/app-directory.ts';
import type { Lifecycle } from './controller.ts';
import type { RuntimeState, SandboxState } from './runtime/sandbox-runtime.ts';
import type { WakeLimits } from './wake-limits.ts';

/**
 * How long a "running" state is trusted on the hot path. A sandbox stopped or removed inside that
 * time costs no error: the edge asks again with `fresh` when the app's address does not answer.
 */
const STATE_TTL_MS = 1_000;

/**
 * The lifecycle core as the edge sees it: host labels to addresses, wakes within the owner's
 * limit, and activity. Answers from memory where it can: a state for a second, read from what the
 * engine's events kept (runtime.read: no inspect while they flow); `fresh` asks the engine itself.
 * A wake it asks for puts the running state it ends with into that memory.
 */
export class LifecycleEdgeBackend implements EdgeBackend {
  private readonly states = new Map<string, { at: number; state: Promise<SandboxState>; settled?: SandboxState }>();

  constructor(
    private readonly lifecycle: Lifecycle,
    private readonly apps: AppDirectory,
    private readonly limits: WakeLimits,
    private readonly log: Logger,
  ) {
    // "running" kept in memory is no longer true: the first request after a sleep must wake the
    // sandbox at once, not be sent to its dead address and wake it only once that connection fails
    apps.onSleeping((sandbox) => this.states.delete(sandbox));
  }

  private state(sandbox: string, fresh = false): Promise<SandboxState> {
    const cached = this.states.get(sandbox);
    // An inspect in flight is shared. Of settled answers only "running" is trusted from memory: a
    // sandbox asleep a moment ago may have been started since (POST start answered), and its engine
    // must not be refused, nor its apps shown the waiting page, for the rest of the second; one
    // `unavailable` is asked again at the next request, so it runs again as soon as its engine answers.
    if (!fresh && cached && Date.now() - cached.at < STATE_TTL_MS && (!cached.settled || cached.settled.status === 'running')) return cached.state;
    const state = this.lifecycle.observe(sandbox, !fresh);
    const entry: { at: number; state: Promise<SandboxState>; settled?: SandboxState } = { at: Date.now(), state };
    this.states.set(sandbox, entry);
    state.then((s) => { entry.settled = s; }, () => this.states.delete(sandbox));
    return state;
  }

  async resolveApp(label: string, opts: { fresh?: boolean } = {}): Promise<ResolvedApp | null> {
    const entry = this.apps.resolve(label);
    if (!entry) return null;
    const state = await this.state(entry.sandbox, opts.fresh);
    const gated = entry.visibility ? { visibility: entry.visibility } : {};
    return {
      sandbox: entry.sandbox,
      status: state.status,
      ...gated,
      ...(state.status === 'running' && state.address ? { target: { sandbox: entry.sandbox, host: state.address, port: entry.hostPort, loopbackOnly: entry.loopbackOnly, ...gated } } : {}),
    };
  }

  async resolveSandbox(name: string): Promise<ResolvedSandbox | null> {
    try {
      await this.lifecycle.record(name);
    } catch {
      return null;
    }
    const state = await this.state(name);
    return state.status === 'running' && state.address ? { status: state.status, address: state.address } : { status: state.status };
  }

  /** The record and its owner are read once here, and handed to the wake. */
  async requestWake(sandbox: string): Promise<WakeUnderWay> {
    const record = await this.lifecycle.record(sandbox);
    const owner = await this.lifecycle.owner(record);
    await this.limits.take(owner);
    this.states.delete(sandbox);
    const wake = this.lifecycle.wake(sandbox, { record, owner });
    wake.done.catch((err) => {
      this.states.delete(sandbox);
      this.log.error({ sandbox, err }, 'wake on request failed');
    });
    return { running: handled(wake.running.then((state) => this.remember(sandbox, state))) };
  }

  /** The state a wake ended with: the held requests' next look finds it here, without asking the engine. */
  private remember(sandbox: string, state: RuntimeState): void {
    this.states.set(sandbox, { at: Date.now(), state: Promise.resolve(state), settled: state });
  }

  recordActivity(sandbox: string): void {
    this.lifecycle.clock.recordActivity(sandbox);
  }

  onSleeping(listener: (sandbox: string) => void): () => void {
    return this.apps.onSleeping(listener);
  }

  /** A sandbox's app addresses changed (the app table, here or in another process). */
  onChanged(listener: (sandbox: string) => void): () => void {
    return this.apps.onChanged(listener);
  }
}

/** A promise whose rejection its holder may never read (a request that left): not an unhandled one. */
function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}
