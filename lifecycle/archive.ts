import fs from 'node:fs';
import path from 'node:path';
import type { SandboxRecord } from '../store/index.ts';
import type { AppDirectory } from './apps/app-directory.ts';
import type { SandboxRuntime } from './runtime/sandbox-runtime.ts';

/** `archive_path` of every record starts with this: it stands for the archive folder (SVC_ARCHIVE_DIR). */
const ARCHIVE_PREFIX = 'archive';

/**
 * A new archive's `archive_path`: `archive/<sandbox>-<time>`. The same form as before the archive
 * folder could be moved, so records written then, the backups that list them and `<data>/archive`
 * (the default folder) keep their meaning.
 */
export function newArchivePath(sandbox: string, at: Date): string {
  return path.join(ARCHIVE_PREFIX, `${sandbox}-${at.toISOString().replace(/[:.]/g, '-')}`);
}

/**
 * Where the archive a record names lies: `archive/<x>` is `<archiveDir>/<x>`. A path that is absolute
 * or leaves the archive folder (a restored backup's record may carry one) is refused: an archive is
 * written there and listed by backups, never anywhere else on the host.
 */
export function archiveFolder(archiveDir: string, archivePath: string): string {
  const inside = path.relative(ARCHIVE_PREFIX, archivePath);
  if (path.isAbsolute(archivePath) || !inside || inside === '..' || inside.startsWith(`..${path.sep}`) || path.isAbsolute(inside)) {
    throw new Error(`the archive path "${archivePath}" is not inside the archive folder (SVC_ARCHIVE_DIR): it must be archive/<folder>`);
  }
  return path.join(archiveDir, inside);
}

/**
 * The steps of a DELETE after the record says "archived", each safe to run again (a reconcile pass
 * finishes an archive its process did not): persistent folders to the archive folder, then
 * everything the sandbox has on its engine is removed.
 */
export async function finishArchive(parts: { runtime: SandboxRuntime; apps: AppDirectory; archiveDir: string }, record: SandboxRecord): Promise<void> {
  const { runtime } = parts;
  const name = record.name;
  parts.apps.unwatch(name);
  await runtime.stop(name);
  if (record.archive_path) {
    const dir = archiveFolder(parts.archiveDir, record.archive_path);
    const configFile = path.join(dir, 'sandbox.json');
    if (!fs.existsSync(configFile)) { // written last: the folders before it are complete
      await runtime.archiveVolumes(name, dir);
      const { certs: _secrets, manager_password: _password, ...configuration } = record;
      await fs.promises.writeFile(`${configFile}.tmp`, JSON.stringify(configuration, null, 2) + '\n', { mode: 0o600 });
      await fs.promises.rename(`${configFile}.tmp`, configFile);
    }
  }
  await runtime.takeDown(name);
  await runtime.removeVolumes(name);
  await parts.apps.forget(name);
}
