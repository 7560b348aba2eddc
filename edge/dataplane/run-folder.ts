import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from '../../core/logger.ts';

/** mkdtemp's name for a run folder: the prefix and its six random characters. */
const PREFIX = 'svc-dp-';
const RUN_FOLDER = /^svc-dp-[A-Za-z0-9]{6}$/;
/** Inside each run folder: the pid of the service process that made it. */
const OWNER_FILE = 'owner.pid';

export interface RunFolder {
  readonly path: string;
  /** Removes the folder now and lets its reaper go. */
  remove(): void;
}

/**
 * HAProxy's private run folder (sockets, maps, certificates, its configuration): short, under the
 * temporary folder (unix socket paths must stay under 108 bytes), mode 700 (the admin socket is
 * the service's alone).
 *
 * It does not outlive the service process, however that ends: a reaper (`sh`, reading a pipe from
 * this process) removes it when the pipe closes, which the kernel does when this process exits,
 * even by SIGKILL (the faults suite kills services that way; each would leave a folder behind).
 * Should the reaper die with the service (systemd's kill of the whole control group after its stop
 * timeout), the next start removes the folders whose recorded owner is gone.
 */
export function makeRunFolder(logger: Logger): RunFolder {
  const parent = os.tmpdir();
  removeStaleRunFolders(parent, logger);
  const dir = fs.mkdtempSync(path.join(parent, PREFIX));
  fs.chmodSync(dir, 0o700);
  fs.writeFileSync(path.join(dir, OWNER_FILE), `${process.pid}\n`);
  // terminal signals (Ctrl-C reaches the whole process group) are ignored: the reaper outlives
  // the service by design, and this process removes the folder itself when it closes
  const reaper = spawn('sh', ['-c', 'trap "" INT HUP QUIT TERM; read -r _; rm -rf -- "$1"', 'svc-dp-reaper', dir], { stdio: ['pipe', 'ignore', 'ignore'] });
  reaper.on('error', (err) => logger.error({ err, dir }, 'data plane: the run folder\'s reaper did not start; a kill of the service would leave the folder'));
  reaper.stdin!.on('error', () => undefined); // the reaper gone first: nothing left to tell
  // neither keeps the service's event loop alive
  reaper.unref();
  (reaper.stdin as unknown as { unref(): void }).unref();
  return {
    path: dir,
    remove() {
      fs.rmSync(dir, { recursive: true, force: true });
      reaper.stdin!.end();
    },
  };
}

/**
 * Removes run folders whose owner process is gone: only folders named as this module names them,
 * owned by this user, not symbolic links, with an owner pid recorded inside that no process has.
 * A folder without the record, or whose pid is alive (or belongs to another user's process), stays.
 */
export function removeStaleRunFolders(parent: string, logger: Logger): void {
  const uid = process.getuid?.();
  for (const name of fs.readdirSync(parent)) {
    if (!RUN_FOLDER.test(name)) continue;
    const dir = path.join(parent, name);
    try {
      const st = fs.lstatSync(dir);
      if (!st.isDirectory() || st.uid !== uid) continue;
      const pid = Number(fs.readFileSync(path.join(dir, OWNER_FILE), 'utf8').trim());
      if (!Number.isInteger(pid) || pid <= 0 || alive(pid)) continue;
      fs.rmSync(dir, { recursive: true, force: true });
      logger.info({ dir, owner: pid }, 'data plane: removed the run folder of a service process that is gone');
    } catch {
      // no owner record, or another process removed it meanwhile: not ours to judge
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH'; // EPERM: alive, another user's
  }
}
