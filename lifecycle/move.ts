// Moves of a sandbox from one host to another (issue 20, docs/scale-out.md "Moving sandboxes"): its
// volumes are copied, engine to this process to engine, with the sandbox down and unable to start
// anywhere; the placement switching to the target is the commit; the source's copy goes only after.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { errors } from '../core/errors.ts';
import { LOCAL_HOST, type MoveRecord } from '../store/index.ts';
import type { DockerRuntime } from './runtime/docker-runtime.ts';
import type { HostSetRuntime } from './runtime/host-set-runtime.ts';
import type { EvacuateOptions, Evacuation, MoveOptions, MoveProgress, Mover } from './runtime/host-operations.ts';

/** The mover renews its record this often; a record not renewed for MOVE_STALE_MS is taken over by a reconcile pass. */
const HEARTBEAT_MS = 5_000;
export const MOVE_STALE_MS = 30_000;
/** Progress is reported at most this often (and once at the end). */
const PROGRESS_EVERY_MS = 1_000;

/**
 * The tar both helpers run (in their engines' user namespaces: owners as the sandbox sees them, so the
 * target engine's remapping shifts them into its own range as they are written). Numeric owners, every
 * extended attribute (the inner engine's overlay metadata, file capabilities), sparse files kept sparse;
 * overlay whiteouts (character devices 0:0) are written by the unprivileged root of the target's user
 * namespace, which the kernel allows for 0:0 only: any other device node fails the move.
 */
const TAR = ['tar', '-C', '/v', '--numeric-owner', '--xattrs', '--xattrs-include=*'];
const TAR_CREATE = [...TAR, '-c', '--sparse', '-f', '-', '.'];
const TAR_EXTRACT = [...TAR, '-x', '--same-permissions', '--same-owner', '-f', '-'];
/**
 * What the copy is checked by, on both sides, one digest a line: every entry's type, mode, owner, size,
 * name and link target (sockets left out: tar skips them); every regular file's content; every entry's
 * extended attributes (all namespaces the engine's user namespace reads: user.*, security.capability,
 * ACLs; getfattr's hex values, one line per entry and attribute). Each sorted byte-wise.
 */
const DIGEST = ['sh', '-c', [
  "cd /v && find . ! -type s \\( -type d -printf '%y %m %U %G %p\\0' -o -printf '%y %m %U %G %s %p %l\\0' \\) | LC_ALL=C sort -z | sha256sum",
  'find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum | sha256sum',
  "find . ! -type s -print0 | xargs -0r getfattr -h -d -m - -e hex | awk '/^# file: /{f=substr($0,9);next} NF{print f\" \"$0}' | LC_ALL=C sort | sha256sum",
].join(' && ')];
/** What each line of DIGEST covers, for the error that names the part of a copy that differs. */
const DIGEST_PARTS = ['names, types, modes, owners, sizes or link targets', 'contents', 'extended attributes'];

/** A move as HostSetRuntime runs it (its HostOperations): the moving process, and the hosts' engines. */
export interface MoveDeps extends Mover {
  runtime: HostSetRuntime;
}

const mb = (bytes: number) => Math.floor(bytes / 1e6);

/** A deadline as the operator wrote it: 90 s, 45 min, 2 h. */
function showDeadline(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${ms / 1000} s`;
}

/** This process, as a move's owner. */
const OWNER = `${os.hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;

/**
 * Moves one sandbox to another host. Refused (and nothing changed) for an unknown or archived
 * sandbox, a target that is drained, unknown or the source, or one whose engine does not answer. A
 * copy that fails rolls back (the sandbox stays on its host, the partial copy is removed); a process
 * killed mid-copy leaves the record that a reconcile pass takes over (recoverMoves).
 */
export async function moveSandbox(deps: MoveDeps, name: string, opts: MoveOptions = {}): Promise<MoveProgress> {
  const record = await deps.store.sandboxes.get(name);
  if (!record) throw new errors.SandboxNotFound(name);
  if (record.archived_at) throw new errors.SandboxArchived(name);
  const from = (await deps.store.hosts.placementOf(name)) ?? LOCAL_HOST;
  if (opts.from !== undefined && opts.from !== from) throw new errors.Conflict(`sandbox "${name}" is on host "${from}", not "${opts.from}"`);
  if ((await deps.store.hosts.moves()).some((m) => m.move.sandbox === name)) {
    throw new errors.Conflict(`sandbox "${name}" has an unfinished move; a reconcile pass finishes it`);
  }
  const to = opts.to ?? await deps.runtime.placement.choose(from);
  if (to === from) throw new errors.BadRequest(`sandbox "${name}" is on "${to}" already`);
  const target = to === LOCAL_HOST ? await deps.store.hosts.get(LOCAL_HOST) : await deps.store.hosts.get(to);
  if (to !== LOCAL_HOST && !target) throw new errors.NotFound(`no host named "${to}" (svc hosts list)`);
  if (target?.drained_at) throw new errors.Conflict(`host "${to}" is drained: no sandbox goes there`);
  // both engines answer before anything changes
  const [fromEngine, toEngine] = await Promise.all([from, to].map(async (host) => {
    const engine = await deps.runtime.engine(host);
    await engine.ping().catch((err: Error & { reason?: string }) => { throw new errors.Busy(10, `host "${host}" does not answer (${err.reason ?? err.message}): nothing was changed`); });
    return engine;
  }));
  // the copy's helpers run the sandbox image, this build of it on both sides (the check needs its
  // tools): copied before the move begins, while the sandbox may still wake on its host (~500 MB)
  await deps.runtime.ensureImage(from, fromEngine);
  await deps.runtime.ensureImage(to, toEngine);
  const [need, free] = await Promise.all([fromEngine!.volumes.volumeBytes(name), toEngine!.volumes.freeBytes(name)]);
  // other copies to the same host take their whole size, however much of it they wrote already
  // (counted twice for that part: a refusal too many, never a full disk)
  const others = (await deps.store.hosts.moves()).filter((m) => m.move.phase === 'copying' && m.move.to === to);
  const taken = others.reduce((n, m) => n + (m.move.bytes ?? 0), 0);
  if (need > free - taken - deps.freeReserveBytes) {
    const under = taken ? `, ${mb(taken)} MB of it taken by ${others.length} move${others.length > 1 ? 's' : ''} under way there (${others.map((m) => m.move.sandbox).join(', ')})` : '';
    throw new errors.Conflict(`sandbox "${name}" takes ${mb(need)} MB on "${from}", and host "${to}" has ${mb(free)} MB free on its engine's data root${under} ` +
      `(it keeps ${mb(deps.freeReserveBytes)} MB free, SVC_MOVE_FREE_RESERVE_MB): not moved`);
  }
  const now = new Date().toISOString();
  const move: MoveRecord = {
    sandbox: name, from, to, phase: 'copying', owner: OWNER, heartbeat_at: now, started_at: now, bytes: need,
    ...(opts.deadlineMs !== undefined ? { deadline_ms: opts.deadlineMs } : {}),
  };
  if (!(await deps.store.hosts.beginMove(move))) throw new errors.Conflict(`sandbox "${name}" has an unfinished move; a reconcile pass finishes it`);
  return copyAndCommit(deps, move, opts.onProgress);
}

/**
 * Every sandbox of a drained host, moved one after another to hosts placement chooses; `onMoved` after
 * each (its audit row). One that fails (refused, rolled back, past its deadline) is named in `failed`,
 * and the next one moves.
 */
export async function evacuateHost(deps: MoveDeps, host: string, opts: EvacuateOptions = {}): Promise<Evacuation> {
  const record = await deps.store.hosts.get(host);
  if (!record && host !== LOCAL_HOST) throw new errors.NotFound(`no host named "${host}" (svc hosts list)`);
  if (!record?.drained_at) throw new errors.Conflict(`host "${host}" is not drained: svc hosts drain ${host} first (no new sandbox goes there then)`);
  const placements = await deps.store.hosts.placements();
  const on = (await deps.store.sandboxes.listAll()).filter((s) => !s.archived_at && (placements.get(s.name) ?? LOCAL_HOST) === host).map((s) => s.name).sort();
  const moved: string[] = [];
  const failed: Array<{ sandbox: string; error: string }> = [];
  for (const sandbox of on) {
    try {
      const done = await moveSandbox(deps, sandbox, {
        from: host, ...(opts.onProgress ? { onProgress: opts.onProgress } : {}), ...(opts.deadlineMs !== undefined ? { deadlineMs: opts.deadlineMs } : {}),
      });
      moved.push(sandbox);
      await opts.onMoved?.(done);
    } catch (err) {
      failed.push({ sandbox, error: (err as Error).message });
    }
  }
  return { moved, failed };
}

/**
 * A reconcile pass's part: finishes the clean-up of moves that have one left, and takes over every
 * copy whose process stopped renewing it (killed, or cut off from the store): a copy whose commit was
 * written is finished, any other is started again from the source's volumes (never changed by a
 * move), or rolled back when that fails (a host away). Moves are taken over atomically: one process each.
 */
export async function recoverMoves(deps: MoveDeps): Promise<void> {
  for (const { move, raw } of await deps.store.hosts.moves()) {
    const log = deps.logger.child({ sandbox: move.sandbox, from: move.from, to: move.to });
    if (move.phase === 'cleaning') {
      await cleanUp(deps, move).catch((err) => log.warn({ err: (err as Error).message }, 'move: the leftover copy is not removed yet; next pass tries again'));
      continue;
    }
    if (Date.now() - Date.parse(move.heartbeat_at) < MOVE_STALE_MS) continue;
    const mine: MoveRecord = { ...move, owner: OWNER, heartbeat_at: new Date().toISOString() };
    if (!(await deps.store.hosts.updateMove(raw, mine))) continue; // another process took it first
    log.warn({ was: move.owner }, 'move: its process stopped (killed?); taking it over');
    // still copying (the commit is a phase written first): the source's volumes are whole, copy again
    await copyAndCommit(deps, mine).catch(() => undefined); // logged, and rolled back, by copyAndCommit
  }
}

/** The move's record as this process owns it: renewed until stopped; `lost` once another process has it. */
class Ownership {
  readonly abort = new AbortController();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly deps: MoveDeps, private move: MoveRecord) {
    this.timer = setInterval(() => void this.write({}).catch(() => undefined), HEARTBEAT_MS);
  }

  /** Writes the record (with a fresh heartbeat) if this process still owns it; aborts the copy if not. */
  async write(change: Partial<MoveRecord>): Promise<void> {
    const current = (await this.deps.store.hosts.moves()).find((m) => m.move.sandbox === this.move.sandbox);
    const next: MoveRecord = { ...this.move, ...change, heartbeat_at: new Date().toISOString() };
    if (!current || current.move.owner !== OWNER || !(await this.deps.store.hosts.updateMove(current.raw, next))) {
      this.abort.abort(new Error('another process took the move over'));
      throw this.abort.signal.reason;
    }
    this.move = next;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

async function copyAndCommit(deps: MoveDeps, move: MoveRecord, onProgress?: (p: MoveProgress) => void): Promise<MoveProgress> {
  const name = move.sandbox;
  const log = deps.logger.child({ sandbox: name, from: move.from, to: move.to });
  const owned = new Ownership(deps, move);
  const began = Date.now();
  // The copy (helpers, tar, digests) stops when the deadline passes and the move rolls back: one sandbox
  // with millions of files or a stuck engine does not hold an evacuation. Each attempt has the whole of it.
  const deadlineMs = move.deadline_ms ?? deps.deadlineMs;
  const expired = new AbortController();
  const timer = setTimeout(() => expired.abort(new Error(`the move did not finish within its deadline of ${showDeadline(deadlineMs)} ` +
    '(svc hosts move --deadline, SVC_MOVE_DEADLINE)')), deadlineMs);
  const signal = AbortSignal.any([owned.abort.signal, expired.signal]);
  let total = 0;
  let bytes = 0;
  let shown = 0;
  const report = (phase: MoveProgress['phase'], error?: string) => {
    const p: MoveProgress = { sandbox: name, from: move.from, to: move.to, phase, bytes, total, ms: Date.now() - began, ...(error ? { error } : {}) };
    onProgress?.(p);
    return p;
  };
  try {
    if (((await deps.store.hosts.placementOf(name)) ?? LOCAL_HOST) !== move.from) throw new Error(`sandbox "${name}" is no longer placed on "${move.from}"`);
    const source = await deps.runtime.engine(move.from);
    const target = await deps.runtime.engine(move.to);
    // again for a move taken over (recoverMoves): in step at once after moveSandbox's copy
    await deps.runtime.ensureImage(move.to, target);
    // Under the sandbox's lease: a wake under way finishes first, and every later one finds the record
    // (HostSetRuntime refuses to start or make a sandbox being copied). No container is left on the
    // source: nothing (its restart policy, an engine restart) can run it there during the copy.
    // Its routes go first, as at a sleep: once its network is gone, its address may be handed to
    // another sandbox while the edge or HAProxy's maps would still send its app names there.
    await deps.exclusive(name, async () => {
      await deps.goingDown(name);
      await source.stop(name);
      await source.takeDown(name);
    });
    log.info('move: sandbox down on its host; copying its volumes');
    const copied = await copyVolumes(source, target, name, signal, (b, t) => {
      bytes = b;
      total = t;
      if (Date.now() - shown < PROGRESS_EVERY_MS) return;
      shown = Date.now();
      log.info({ bytes, total }, 'move: copying');
      report('copying');
    }, () => report('verifying'));
    bytes = copied.bytes;
    total = copied.total;
    const record = await deps.store.sandboxes.get(name);
    if (!record || record.archived_at) throw new Error('the sandbox was deleted during its move');
    // The commit, fenced: the record goes from copying to cleaning only while this process still owns
    // the move (a compare-and-set), then the placement follows; from here on the sandbox is the
    // target's. A process that stalled past MOVE_STALE_MS loses the write and commits nothing.
    await owned.write({ phase: 'cleaning', leftover: move.from });
    owned.stop();
    clearTimeout(timer);
    await deps.store.hosts.replace(name, move.to);
    await deps.placed(name).catch((err) => log.warn({ err: (err as Error).message }, 'move: the other processes were not told of the new placement; they find it at their next miss'));
    log.info({ bytes, ms: Date.now() - began }, 'move: copy verified; the sandbox is on its new host');
    await cleanUp(deps, { ...move, phase: 'cleaning', leftover: move.from }).catch((err) =>
      log.warn({ err: (err as Error).message }, 'move: the source\'s volumes are not removed yet; a reconcile pass removes them'));
    return report('moved');
  } catch (err) {
    owned.stop();
    clearTimeout(timer);
    // another process took the move over (this one stalled past MOVE_STALE_MS): its copy, its target
    if (owned.abort.signal.aborted) throw owned.abort.signal.reason;
    const reason = (err as Error).message;
    if (((await deps.store.hosts.placementOf(name)) ?? LOCAL_HOST) === move.to) throw err; // committed: only the clean-up failed
    // only an owner rolls back: one that lost the move (its failure may be the new owner removing its
    // helpers) must not remove the copy another process makes; it says why it stopped
    await owned.write({ phase: 'cleaning', leftover: move.to, note: `rolled back: ${reason}` }).catch((lost) => {
      log.warn({ err: reason }, 'move: failed, and another process has the move now; leaving it to it');
      throw lost;
    });
    log.error({ err: reason }, 'move: failed; rolled back (the sandbox stays on its host)');
    await cleanUp(deps, { ...move, phase: 'cleaning', leftover: move.to }).catch((e) =>
      log.warn({ err: (e as Error).message }, 'move: the partial copy is not removed yet; a reconcile pass removes it'));
    report('rolled back', reason);
    throw err;
  }
}

/**
 * Removes the copy a move left on `leftover` (the source after a commit, the target after a roll-back),
 * then the record. Never on the host the sandbox is placed on: that copy is the sandbox.
 */
async function cleanUp(deps: MoveDeps, move: MoveRecord): Promise<void> {
  const host = move.leftover!;
  let placed = (await deps.store.hosts.placementOf(move.sandbox)) ?? LOCAL_HOST;
  if (placed === host && host === move.from) {
    // committed (the phase is written first) but its process died before the placement followed
    await deps.store.hosts.replace(move.sandbox, move.to);
    await deps.placed(move.sandbox);
    placed = move.to;
  }
  if (placed !== host) {
    // its transfer folder is the sandbox's own where both hosts share this machine's files: kept
    await (await deps.runtime.engine(host)).removeVolumes(move.sandbox, { transfer: false });
  } else {
    deps.logger.error({ sandbox: move.sandbox, host }, 'move: the leftover named is the sandbox\'s own copy; kept');
  }
  // this move's record only: a later move of the same sandbox may have begun since
  const current = (await deps.store.hosts.moves()).find((m) => m.move.sandbox === move.sandbox);
  if (current?.move.started_at === move.started_at) await deps.store.hosts.endMove(move.sandbox);
}

/**
 * Copies the sandbox's volumes from `source` to `target` through this process: a tar in a helper on
 * each engine (DockerVolumes.volumeHelper), the bytes piped with backpressure (a slow target slows
 * the source's tar; at most a few hundred KiB are in this process at once), then both sides' digests
 * compared. A partial copy on the target from an earlier attempt goes first. A sandbox that has no
 * volumes (never started) has nothing to copy.
 */
async function copyVolumes(
  source: DockerRuntime, target: DockerRuntime, name: string, signal: AbortSignal,
  progress: (bytes: number, total: number) => void, verifying: () => void,
): Promise<{ bytes: number; total: number }> {
  await source.volumes.removeHelpers(name);
  await target.removeVolumes(name, { transfer: false });
  if (!(await source.volumes.hasVolumes(name))) return { bytes: 0, total: 0 };
  await target.volumes.createVolumes(name);
  signal.throwIfAborted();
  const helpers = await Promise.all([source.volumes.volumeHelper(name), target.volumes.volumeHelper(name)]);
  const [from, to] = helpers;
  // what does not take the signal itself (the engine's calls, du, the digests) is left when it fires;
  // removing the helpers ends it
  const stopped = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
  stopped.catch(() => undefined);
  const until = <T>(work: Promise<T>): Promise<T> => {
    work.catch(() => undefined);
    return Promise.race([work, stopped]);
  };
  try {
    const du = await until(source.exec.run(from.container, ['du', '-sb', '/v']));
    const total = Number(/^(\d+)/.exec(du.stdout.toString())?.[1] ?? 0);
    const reader = await until(source.exec.start(from.container, TAR_CREATE));
    const writer = await until(target.exec.start(to.container, TAR_EXTRACT, { stdin: true }));
    // An engine killed mid-copy errors these streams, also after the pipeline has let go of them (the
    // target's stdout is never read: its tar writes nothing): the error comes through `done`, never as
    // an 'error' event without a listener, which would end this process.
    for (const stream of [reader.stdout, writer.stdout]) stream.on('error', () => undefined);
    writer.stdout.resume();
    let bytes = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        bytes += chunk.length;
        progress(bytes, total);
        done(null, chunk);
      },
    });
    await until(pipeline(reader.stdout, counter, writer.stdin!, { signal }));
    const [read, written] = await until(Promise.all([reader.done, writer.done]));
    if (read.exitCode !== 0) throw new Error(`tar on the source failed (exit ${read.exitCode}): ${read.stderr.trim().slice(-400)}`);
    if (written.exitCode !== 0) throw new Error(`tar on the target failed (exit ${written.exitCode}): ${written.stderr.trim().slice(-400)}`);
    verifying();
    const [a, b] = await until(Promise.all([source.exec.run(from.container, DIGEST), target.exec.run(to.container, DIGEST)]));
    if (a.exitCode !== 0 || b.exitCode !== 0) throw new Error(`the copy could not be checked: ${(a.stderr || b.stderr).trim().slice(-400)}`);
    const [want, got] = [a, b].map((r) => r.stdout.toString().trim().split('\n'));
    const differs = DIGEST_PARTS.filter((_, i) => want![i] !== got![i]);
    if (differs.length > 0) throw new Error(`the copy differs from the source in its ${differs.join(' and in its ')}`);
    return { bytes, total };
  } catch (err) {
    // the pipeline's AbortError says only that it was aborted: the signal's reason says why
    throw signal.aborted ? signal.reason : err;
  } finally {
    await Promise.all(helpers.map((h) => h.remove().catch(() => undefined)));
  }
}
