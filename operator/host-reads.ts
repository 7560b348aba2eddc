import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';

/** What `svc doctor` reads of the host: files that may be absent, and who holds a port. */

const run = promisify(execFile);

/** A file's text, or undefined where it cannot be read (absent, not allowed). */
export function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** Whether a command line is this service's process (`tsx main.ts`, `node … main.ts`). */
export const isService = (command: string) => /\bmain\.ts\b/.test(command);

/** A process's parent and its command line, from /proc. */
export function parentOf(pid: number): { pid: number; command: string } | undefined {
  // the command name in stat is in parentheses and may hold spaces: the ppid is the second field after it
  const stat = readText(`/proc/${pid}/stat`);
  const ppid = stat ? Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) : NaN;
  if (!Number.isInteger(ppid) || ppid <= 1) return undefined;
  return { pid: ppid, command: (readText(`/proc/${ppid}/cmdline`) ?? '').replace(/\0/g, ' ') };
}

/** Who listens on a TCP port, from `ss` (iproute2). */
export async function portHolder(port: number): Promise<{ pid: number; name: string; command: string } | null> {
  try {
    const { stdout } = await run('ss', ['-ltnpH', `sport = :${port}`]);
    const m = /users:\(\("([^"]+)",pid=(\d+)/.exec(stdout);
    if (!m) return null;
    const command = (readText(`/proc/${m[2]}/cmdline`) ?? '').replace(/\0/g, ' ');
    return { pid: Number(m[2]), name: m[1]!, command };
  } catch {
    return null;
  }
}
