// Hands a user-namespaced sandbox container its own cgroups, so the dockerd inside can make cgroups for
// its containers (the classic unprivileged-container recipe; LXC delegates the same way).
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * The files of a cgroup folder its owner needs to move processes and make children: not the limits.
 * cgroup.clone_children (v1): new cpuset cgroups below copy their parent's CPUs and memory nodes, which
 * the sandbox's runtime, crun, does not fill in itself (sandbox-image/entrypoint.sh sets it).
 */
const DELEGATED_FILES = ['cgroup.procs', 'tasks', 'cgroup.subtree_control', 'cgroup.threads', 'cgroup.clone_children'];

export interface CgroupMount {
  dir: string;
  /** controllers of a v1 hierarchy ("cpu", "name=systemd"), sorted; empty for the v2 tree */
  controllers: string[];
}

/** The host's cgroup mounts, as /proc/mounts lists them. */
async function cgroupMounts(): Promise<CgroupMount[]> {
  const mounts = await fs.readFile('/proc/mounts', 'utf8');
  const found: CgroupMount[] = [];
  for (const line of mounts.split('\n')) {
    const [, dir, type, options] = line.split(' ');
    if (type === 'cgroup2') found.push({ dir: dir!, controllers: [] });
    else if (type === 'cgroup') {
      const known = new Set(['rw', 'ro', 'nosuid', 'nodev', 'noexec', 'relatime', 'noatime', 'none']);
      found.push({ dir: dir!, controllers: options!.split(',').filter((o) => !known.has(o) && !o.startsWith('release_agent=')).sort() });
    }
  }
  return found;
}

/**
 * The cgroup folders of process `pid` on the host, one per hierarchy, from /proc/<pid>/cgroup
 * ("4:memory:/svc-sandboxes/<id>", "0::/svc-sandboxes/<id>"), with that hierarchy's controllers.
 */
async function cgroupDirs(pid: number): Promise<CgroupMount[]> {
  const [lines, mounts] = await Promise.all([fs.readFile(`/proc/${pid}/cgroup`, 'utf8'), cgroupMounts()]);
  const dirs: CgroupMount[] = [];
  for (const line of lines.split('\n').filter(Boolean)) {
    const [, ctrls, rel] = line.match(/^\d+:([^:]*):(.*)$/) ?? [];
    if (rel === undefined || rel === '/' || rel.includes('..')) continue;
    const want = ctrls ? ctrls.split(',').sort().join(',') : '';
    const mount = mounts.find((m) => m.controllers.join(',') === want);
    if (mount) dirs.push({ dir: path.join(mount.dir, rel), controllers: mount.controllers });
  }
  return dirs;
}

/** The host uid that root of process `pid`'s user namespace maps to, or undefined without one. */
async function rootUid(pid: number, map: 'uid_map' | 'gid_map'): Promise<number | undefined> {
  const first = (await fs.readFile(`/proc/${pid}/${map}`, 'utf8')).trim().split('\n')[0]!.trim().split(/\s+/).map(Number);
  const [inside, outside, count] = first;
  // the initial namespace maps 0 → 0 for all 2^32 - 1 ids
  if (inside !== 0 || outside === 0 || count === 4294967295) return undefined;
  return outside;
}

/**
 * The paths to give the sandbox's root, in order. The sandbox's entrypoint waits until one folder is
 * its own (sandbox-image/entrypoint.sh: its pids cgroup with v1, its cgroup with v2) and then starts
 * its dockerd: that folder comes last, and each folder after its files, so a service killed in the
 * middle never lets the entrypoint on with part of its cgroups (the restarted service's settle hands
 * over the rest, and the entrypoint goes on then).
 */
export function handOverOrder(dirs: CgroupMount[]): string[] {
  const waitedOn = dirs.find((d) => d.controllers.includes('pids')) ?? dirs.find((d) => d.controllers.length === 0);
  const ordered = [...dirs.filter((d) => d !== waitedOn), ...(waitedOn ? [waitedOn] : [])];
  return ordered.flatMap((d) => [...DELEGATED_FILES.map((file) => path.join(d.dir, file)), d.dir]);
}

/**
 * Gives the sandbox's root (its user namespace's uid 0, e.g. host uid 100000) the sandbox container's
 * own cgroup folders — each folder and the files that move processes, never the limit files, so a
 * sandbox cannot raise its own memory, CPU or PID limits. Idempotent; a no-op for a process without a
 * user namespace. The entrypoint waits for this before its dockerd starts containers. `chown`: the
 * tests cut a hand-over in the middle, as a killed service would.
 */
export async function delegateCgroups(pid: number, opts: { chown?: (path: string, uid: number, gid: number) => Promise<void> } = {}): Promise<boolean> {
  const chown = opts.chown ?? fs.chown;
  const uid = await rootUid(pid, 'uid_map');
  const gid = await rootUid(pid, 'gid_map');
  if (uid === undefined || gid === undefined) return false;
  for (const target of handOverOrder(await cgroupDirs(pid))) {
    await chown(target, uid, gid).catch((err: NodeJS.ErrnoException) => {
      // a hierarchy without one of these files (cgroup.threads is v2's, tasks and clone_children v1's)
      if (err.code !== 'ENOENT' || !DELEGATED_FILES.includes(path.basename(target))) throw err;
    });
  }
  return true;
}
