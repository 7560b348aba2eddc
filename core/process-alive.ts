/**
 * Whether a process of this pid runs on this host: for what one service process leaves on the host
 * for itself (its transfer pipes, its firewall rule), which another may clear once it is gone.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
