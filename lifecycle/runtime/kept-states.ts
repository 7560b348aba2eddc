import type { Inspection } from './sandbox-runtime.ts';

/** How long a start of the runtime's own stands for the engine's start event that follows it. */
const OWN_START_MS = 10_000;

/**
 * What reads (DockerRuntime.read) take each sandbox's state to be, kept while the engine's container
 * events are watched: an entry goes at the sandbox's next event, or at the runtime's own change of it,
 * and an answer is kept only when no change came while it was asked for. With 500 sandboxes a listing
 * that inspected each took more than the API's 100 ms. A start of the runtime's own keeps the state
 * its inspect found: the start event that follows it changes nothing more.
 */
export class KeptStates {
  private readonly seen = new Map<string, Inspection>();
  /** Changes per sandbox: an inspect that overlapped one is not kept. */
  private readonly changes = new Map<string, number>();
  /** Counts the event streams begun and ended: an inspect from before the current stream is not kept. */
  private epoch = 0;
  private up = false;
  private readonly ownStarts = new Map<string, number>();

  /** What is kept of the sandbox, while the events flow. */
  get(name: string): Inspection | undefined {
    return this.up ? this.seen.get(name) : undefined;
  }

  /** Called as an ask of the engine begins: the function it returns tells whether nothing changed since. */
  asking(name: string): () => boolean {
    const epoch = this.epoch;
    const changes = this.changes.get(name) ?? 0;
    return () => this.up && epoch === this.epoch && (this.changes.get(name) ?? 0) === changes;
  }

  /** A read: what is kept of the sandbox, else `inspect`'s answer, kept when nothing changed while it was asked. */
  async read(name: string, inspect: (name: string) => Promise<Inspection>): Promise<Inspection> {
    const kept = this.get(name);
    if (kept) return kept;
    const unchanged = this.asking(name);
    const answer = await inspect(name);
    if (unchanged()) this.keep(name, answer);
    return answer;
  }

  /**
   * The state after a change of the runtime's own (a start), asked by `ask`: what was kept of the
   * sandbox goes, and the answer is kept as read() keeps one, only when no other change came meanwhile.
   */
  async afterChange<T extends Inspection>(name: string, ask: () => Promise<T>): Promise<T> {
    const unchanged = this.asking(name);
    const state = await ask();
    const keep = unchanged();
    this.changed(name);
    if (keep) this.keep(name, state);
    return state;
  }

  keep(name: string, answer: Inspection): void {
    if (this.up && answer.status !== 'unreachable') this.seen.set(name, answer);
  }

  /** The sandbox changed (an event, or a call of the runtime that may have changed it): reads ask its engine again. */
  changed(name: string): void {
    this.changes.set(name, (this.changes.get(name) ?? 0) + 1);
    this.seen.delete(name);
  }

  /** The events stream began or ended: nothing kept before holds. */
  eventsNow(up: boolean): void {
    this.up = up;
    this.epoch++;
    this.seen.clear();
    this.changes.clear();
  }

  /** The runtime is about to start the sandbox itself (`started: false`: it ran already, no event follows). */
  ownStart(name: string, started = true): void {
    if (started) this.ownStarts.set(name, Date.now());
    else this.ownStarts.delete(name);
  }

  /** A start event of the sandbox: whether it is the one of a start of the runtime's own (which settled and kept it). */
  startedByUs(name: string): boolean {
    const at = this.ownStarts.get(name);
    this.ownStarts.delete(name);
    return at !== undefined && Date.now() - at < OWN_START_MS;
  }
}
