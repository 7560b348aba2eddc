// A fork's volumes (lifecycle/fork.ts): a copy of another sandbox's, made on the engine that holds
// them by one helper container (the sandbox image, no network) that mounts both sandboxes' volumes and
// copies each with `cp -a`. It runs in the engine's user namespace, as the sandbox does: owners, modes,
// hard links, sparse files and extended attributes (the inner engine's overlay metadata, file
// capabilities) arrive as the source has them, and overlay whiteouts (character devices 0:0) are the
// only device nodes its unprivileged root may make, as in a move.
//
// A running source is paused (the cgroup freezer: its processes and its inner containers stop where they
// are) for the copy and resumed after, so the fork is one instant of it, as if the power went at that
// instant: what the inner engine had written is there, and its restartable containers start again at
// the fork's first start. The engine's storage here is overlay2 on ext4, which has no snapshots or
// reflinks, so the pause lasts the whole copy (docs/lifecycle.md, "Forks").
import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import { resourceNames } from '../names.ts';
import { statusCode } from './engine-client.ts';

/** On the copy's helper: the sandbox it copies from, so that a pause it left is known (resumeLeftPause). */
export const LABEL_FORK_SOURCE = 'svc.fork-source';

/**
 * What makes a sandbox itself, kept on its /var/lib/docker volume, left out of a fork's copy so that its
 * first start makes its own: the SSH host keys (sandbox-image/entrypoint.sh) and the inner engine's ID.
 */
const OWN_IDENTITY = ['.svc-ssh-host-keys', 'engine-id'];

/** Longest a copy may run (its helper is removed then and the fork fails): 20 GB at the machine's slowest disk. */
const COPY_DEADLINE_MS = 15 * 60_000;

/** What of the stderr of a failed copy goes into its error. */
const STDERR_KEPT = 2000;

export interface VolumeCopyDeps {
  docker: Docker;
  /** The sandbox image: GNU cp, and present on every engine that runs sandboxes. */
  image: string;
  /** Labels of a helper of the fork (its sandbox, instance and role), so that a clean-up finds one left behind. */
  helperLabels: Record<string, string>;
  logger: Logger;
}

/**
 * Copies every volume of `from` into the volumes of `to` (made already, empty). Pauses `from` while
 * the copy runs if it runs, and resumes it after, whatever happened. Rejects with the copy's error;
 * the caller removes the half-made volumes.
 */
export async function copySandboxVolumes(deps: VolumeCopyDeps, from: string, to: string): Promise<{ ms: number; pausedMs: number }> {
  const began = Date.now();
  const source = deps.docker.getContainer(resourceNames(from).container);
  const keys = Object.keys(resourceNames(from).volumes);
  const binds = Object.entries(resourceNames(from).volumes).map(([key, volume]) => `${volume}:/from/${key}:ro`)
    .concat(Object.entries(resourceNames(to).volumes).map(([key, volume]) => `${volume}:/to/${key}`));
  // -a with xattr asked for by name: a lost extended attribute fails the copy (with -a alone cp goes on)
  const script = `rc=0; pids=''; for k in ${keys.join(' ')}; do cp -a --preserve=xattr /from/$k/. /to/$k/ & pids="$pids $!"; done; ` +
    `for p in $pids; do wait $p || rc=1; done; [ $rc = 0 ] && rm -rf ${OWN_IDENTITY.map((p) => `/to/docker/${p}`).join(' ')}; exit $rc`;
  // The helper is started before the pause and copies once told on its stdin, so the pause covers the
  // copy alone, not the container's start. Its stdin closing untold (this process died) ends it uncopied.
  const helper = await deps.docker.createContainer({
    name: `${to}-mover-${Date.now()}`,
    Image: deps.image,
    Entrypoint: ['sh', '-c', `read -r go || exit 3; ${script}`],
    OpenStdin: true,
    StdinOnce: true,
    Labels: { ...deps.helperLabels, [LABEL_FORK_SOURCE]: from },
    HostConfig: { NetworkMode: 'none', Binds: binds },
  });
  let pausedAt: number | undefined;
  let stdin: NodeJS.ReadWriteStream | undefined;
  try {
    stdin = await helper.attach({ stream: true, stdin: true, hijack: true });
    const exited = helper.wait({ condition: 'next-exit' }) as Promise<{ StatusCode: number }>;
    await helper.start();
    const info = await source.inspect().catch((err) => {
      if (statusCode(err) === 404) return null; // deep sleep: only its volumes
      throw err;
    });
    if (info?.State.Running && !info.State.Paused) {
      await source.pause();
      pausedAt = Date.now();
    }
    stdin.end('go\n');
    let late = false;
    const timer = setTimeout(() => { late = true; void helper.kill().catch(() => undefined); }, COPY_DEADLINE_MS);
    const { StatusCode } = await exited.finally(() => clearTimeout(timer));
    if (late) throw new Error(`copying the volumes of "${from}" did not end within ${COPY_DEADLINE_MS / 60_000} min`);
    if (StatusCode !== 0) {
      const logs = await helper.logs({ stderr: true, stdout: false, tail: 20 });
      throw new Error(`copying the volumes of "${from}" failed (cp exit ${StatusCode}): ${logText(logs).slice(-STDERR_KEPT)}`);
    }
  } finally {
    (stdin as { destroy?: () => void } | undefined)?.destroy?.();
    if (pausedAt !== undefined) {
      await source.unpause().catch((err) => {
        // 409: not paused any more (stopped meanwhile); anything else is left for the reconcile pass
        if (statusCode(err) !== 409 && statusCode(err) !== 404) deps.logger.error({ sandbox: from, err: (err as Error).message }, 'fork: the source did not resume; a reconcile pass resumes it');
      });
    }
    // not waited for: the fork starts meanwhile (a removal takes a few hundred ms); one that fails is
    // the fork's clean-up's (removeHelpers), as is one still under way when a failed fork is rolled back
    void helper.remove({ force: true }).catch((err) => {
      if (statusCode(err) !== 404) deps.logger.warn({ sandbox: to, err: (err as Error).message }, 'fork: the copy helper stays; the fork\'s clean-up removes it');
    });
  }
  const ms = Date.now() - began;
  const pausedMs = pausedAt === undefined ? 0 : Date.now() - pausedAt;
  deps.logger.info({ sandbox: to, from, ms, pausedMs }, 'fork: volumes copied');
  return { ms, pausedMs };
}

/**
 * A paused sandbox whose pause no copy holds any more (its process was killed mid-copy; the helper's
 * copy then ends by itself) is resumed: the reconcile pass asks this of every running sandbox. A copy
 * under way, in this process or another, keeps its pause: its helper still runs.
 */
export async function resumeLeftPause(docker: Docker, instanceLabel: string, name: string, logger: Logger): Promise<void> {
  const copying = await docker.listContainers({ filters: { label: [instanceLabel, `${LABEL_FORK_SOURCE}=${name}`], status: ['created', 'running'] } });
  if (copying.length > 0) return;
  logger.warn({ sandbox: name }, 'a sandbox left paused by a fork whose process stopped: resuming it');
  await docker.getContainer(resourceNames(name).container).unpause().catch((err) => {
    if (statusCode(err) !== 409 && statusCode(err) !== 404) throw err;
  });
}

/** The text of a non-TTY container's log (8-byte frame headers dropped). */
function logText(raw: Buffer | NodeJS.ReadableStream): string {
  const buf = Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw));
  const parts: Buffer[] = [];
  for (let i = 0; i + 8 <= buf.length;) {
    const size = buf.readUInt32BE(i + 4);
    parts.push(buf.subarray(i + 8, i + 8 + size));
    i += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8');
}
