import fs from 'node:fs/promises';
import path from 'node:path';
import type { ZipEntry } from './zip.ts';

/**
 * Writes export entries under `parent` with their modes (`svc export --out`). Refuses to write
 * into a folder that exists already: an old svc.env would be replaced without a word otherwise.
 */
export async function writeFolder(parent: string, folder: string, entries: ZipEntry[]): Promise<string> {
  const target = path.resolve(parent, folder);
  try {
    await fs.mkdir(target, { mode: 0o755 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new Error(`${target} exists already; remove it or choose another --out`);
    throw err;
  }
  for (const e of entries) {
    const file = path.resolve(parent, e.path);
    if (e.path.endsWith('/')) await fs.mkdir(file, { recursive: true, mode: e.mode });
    else await fs.writeFile(file, e.content ?? '', { mode: e.mode, flag: 'wx' });
    await fs.chmod(file, e.mode); // the umask may have taken bits away
  }
  return target;
}
