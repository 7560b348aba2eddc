// Moves a sandbox made on the main engine (before isolation, or in `unisolated` mode) to the sandbox
// engine at its next creation: its container there is removed, its volumes are copied, and every file's
// owner is shifted into the sandbox's uid range (root 0 → 100000, a user 1000 → 101000), so the same
// users own the same files inside. The old volumes stay on the main engine for the operator to remove.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import { resourceNames } from '../names.ts';
import { statusCode } from './engine-client.ts';

const run = promisify(execFile);

/** Where on the host a volume's files are, or undefined when the engine has no such volume. */
async function mountpoint(docker: Docker, volume: string): Promise<string | undefined> {
  try {
    return (await docker.getVolume(volume).inspect()).Mountpoint;
  } catch (err) {
    if (statusCode(err) === 404) return undefined;
    throw err;
  }
}

/**
 * Shifts the owner of every entry below `dir` by `base` (ids the namespace cannot map become
 * nobody's), keeping set-ID bits (chown clears them), and removes device nodes other than overlayfs
 * whiteouts (char 0:0): a device node that reached a volume must not come along into the sandbox.
 */
export async function shiftOwners(dir: string, base: number, size = 65536): Promise<void> {
  const shift = (id: number) => (id < size ? base + id : base + 65534);
  const visit = async (p: string): Promise<void> => {
    const st = await fs.lstat(p);
    if (st.isBlockDevice() || (st.isCharacterDevice() && st.rdev !== 0)) {
      await fs.rm(p, { force: true });
      return;
    }
    await fs.lchown(p, shift(st.uid), shift(st.gid));
    if (!st.isSymbolicLink() && (st.mode & 0o6000)) await fs.chmod(p, st.mode & 0o7777);
    if (st.isDirectory()) {
      const entries = await fs.readdir(p);
      // a bounded number at once: a docker volume holds tens of thousands of entries
      for (let i = 0; i < entries.length; i += 64) {
        await Promise.all(entries.slice(i, i + 64).map((e) => visit(path.join(p, e))));
      }
    }
  };
  await visit(dir);
}

export interface EngineMoveOptions {
  /** the main engine, where sandboxes lived before */
  from: Docker;
  /** the sandbox engine */
  to: Docker;
  /** host uid (and gid) that root inside a sandbox maps to on the sandbox engine */
  rootId: number;
  /** a folder of the service's own: one marker file per sandbox moved */
  stateDir: string;
  labels: (sandbox: string) => Record<string, string>;
  logger: Logger;
}

/**
 * Moves sandbox `name` if the main engine has its volumes and the move has not finished before.
 * A move cut off half-way (a crash) is started again from the old volumes, which it never changes.
 */
export async function moveFromMainEngine(name: string, opts: EngineMoveOptions): Promise<boolean> {
  const names = resourceNames(name);
  const marker = path.join(opts.stateDir, name);
  if (await fs.access(marker).then(() => true, () => false)) return false;
  const old = new Map<string, string>();
  for (const volume of Object.values(names.volumes)) {
    const dir = await mountpoint(opts.from, volume);
    if (dir) old.set(volume, dir);
  }
  if (old.size === 0) return false;

  const log = opts.logger.child({ sandbox: name });
  log.warn({ volumes: [...old.keys()] }, 'moving a sandbox from the main engine to the isolated sandbox engine');
  const t0 = Date.now();
  // the old container must not write into the volumes while they are copied, nor run beside the new one
  await opts.from.getContainer(names.container).remove({ force: true }).catch((err) => {
    if (statusCode(err) !== 404) throw err;
  });
  await opts.from.getNetwork(names.network).remove().catch((err) => {
    if (statusCode(err) !== 404) throw err;
  });
  for (const [volume, from] of old) {
    // a half-made copy of an earlier, interrupted move goes first
    await opts.to.getVolume(volume).remove({ force: true }).catch((err) => {
      if (statusCode(err) !== 404) throw err;
    });
    await opts.to.createVolume({ Name: volume, Labels: opts.labels(name) });
    const to = (await mountpoint(opts.to, volume))!;
    await run('cp', ['-a', '--one-file-system', `${from}/.`, `${to}/`], { maxBuffer: 1 << 20 });
    await shiftOwners(to, opts.rootId);
  }
  await fs.mkdir(opts.stateDir, { recursive: true, mode: 0o700 });
  await fs.writeFile(marker, `${new Date().toISOString()}\n`);
  log.warn({ ms: Date.now() - t0 }, 'sandbox moved; its old volumes stay on the main engine (remove them with docker volume rm once satisfied)');
  return true;
}
