import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { processAlive } from '../core/process-alive.ts';

const run = promisify(execFile);

/** A named pipe between the service and a sandbox, open on the service's side. */
export interface TransferPipe {
  /** Where the sandbox finds the pipe. */
  path: string;
  /**
   * The service's end. An upload writes to it and ends it (the sandbox's reader then sees the
   * end); a download reads from it, as many bytes as the sandbox announced (it never ends).
   */
  stream: net.Socket;
  /** Closes the service's end and removes the pipe; never rejects (whatever the sandbox put in its place stays). */
  close(): Promise<void>;
}

/**
 * Named pipes that carry file contents between the service and a `cat` inside a sandbox, so that
 * neither the engine nor the process it starts to unpack an archive relays them (bench/files:
 * uploads at about the speed of `docker cp`, where the archive API ran at half of it).
 *
 * The sandbox sees its host folder read-only, but its root could remount it and swap entries,
 * so the service never opens a path the sandbox can reach: a pipe is made and opened in a
 * private folder, and only then renamed into the sandbox's folder under a random name. The
 * service's end is opened read-write, which never blocks (there is always a writer, so the
 * sandbox's open never blocks either), and it stays the service's own pipe whatever happens to
 * the name.
 */
export class TransferPipes {
  private spare: Promise<{ name: string; made: string; fd: number }> | undefined;

  private constructor(
    private readonly root: string,
    private readonly pending: string,
  ) {}

  /**
   * Prepares the root. Several service processes may share a sandbox's folder (issue 19), so each
   * keeps its pipes in a folder of its own in it, `p<pid>`, and at start removes only what no
   * running process on this host owns: its own earlier run's pipes, and those of processes that are gone.
   */
  static async open(root: string): Promise<TransferPipes> {
    const pending = pendingFolder(root);
    await fs.promises.mkdir(root, { recursive: true, mode: 0o711 });
    for (const entry of await fs.promises.readdir(root, { withFileTypes: true })) {
      const owner = /^\.pending(?:-p(\d+))?$/.exec(entry.name);
      if (owner) {
        if (!owner[1] || Number(owner[1]) === process.pid || !processAlive(Number(owner[1]))) await fs.promises.rm(path.join(root, entry.name), { recursive: true, force: true });
        continue;
      }
      if (!entry.isDirectory()) continue;
      // the sandboxes' folders themselves stay: running sandboxes have them mounted
      const folder = path.join(root, entry.name);
      for (const name of await fs.promises.readdir(folder)) {
        const pid = /^p(\d+)$/.exec(name)?.[1];
        // a pipe at the top: from a version before per-process folders
        if (pid === undefined || Number(pid) === process.pid || !processAlive(Number(pid))) await fs.promises.rm(path.join(folder, name), { force: true, recursive: true });
      }
    }
    await fs.promises.mkdir(pending, { recursive: true, mode: 0o700 });
    const pipes = new TransferPipes(root, pending);
    pipes.makeSpare();
    return pipes;
  }

  /**
   * A pipe for one transfer, in this process's folder inside the sandbox's transfer folder:
   * `folder` is the host folder the sandbox has mounted and `mount` where the sandbox sees it, as
   * the runtime reports them (RuntimeState: another process on another data folder may have made the container).
   */
  async create(direction: 'upload' | 'download', { folder, mount }: { folder: string; mount: string }): Promise<TransferPipe> {
    const own = path.join(folder, OWN);
    await fs.promises.mkdir(own, { recursive: true, mode: 0o711 });
    // a pipe is renamed into place, so it is made on the same filesystem: below the folder's own root
    const theirs = path.dirname(folder) !== this.root;
    let next: Promise<{ name: string; made: string; fd: number }>;
    if (theirs) {
      const pending = pendingFolder(path.dirname(folder));
      await fs.promises.mkdir(pending, { recursive: true, mode: 0o700 });
      next = this.make(pending);
    } else {
      // one pipe is kept made ahead: making it costs a process (Node has no mkfifo(3))
      next = this.spare ?? this.make();
      this.makeSpare();
    }
    const { name, made, fd } = await next;
    const shared = path.join(own, name);
    try {
      await fs.promises.rename(made, shared);
    } catch (err) {
      fs.closeSync(fd);
      await fs.promises.rm(made, { force: true });
      throw err;
    }
    const stream = new net.Socket({ fd, readable: direction === 'download', writable: direction === 'upload' });
    return {
      path: `${mount}/${OWN}/${name}`,
      stream,
      close: async () => {
        stream.destroy();
        // The sandbox's root may have put a folder there: it stays until the sandbox is archived
        // or the service restarts (TransferPipes.open), and the close still succeeds.
        await fs.promises.rm(shared, { force: true }).catch(() => undefined);
      },
    };
  }

  private makeSpare(): void {
    const spare = this.make();
    this.spare = spare;
    spare.catch(() => { if (this.spare === spare) this.spare = undefined; });
  }

  /** Ends the pipe made ahead (the service is closing). */
  async close(): Promise<void> {
    const spare = await this.spare?.catch(() => undefined);
    this.spare = undefined;
    if (spare) fs.closeSync(spare.fd);
  }

  /** A new pipe in a private folder (this root's by default), open on the service's side. */
  private async make(pending = this.pending): Promise<{ name: string; made: string; fd: number }> {
    const name = `${randomBytes(16).toString('hex')}.pipe`;
    const made = path.join(pending, name);
    // 0666: a user-namespaced sandbox's root is not the host's root
    await run('mkfifo', ['-m', '0666', '--', made]);
    let fd: number | undefined;
    try {
      fd = await openFd(made, fs.constants.O_RDWR | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
      if (!(await fstat(fd)).isFIFO()) throw new Error(`${made} is not a pipe`);
      return { name, made, fd };
    } catch (err) {
      if (fd !== undefined) fs.closeSync(fd);
      await fs.promises.rm(made, { force: true });
      throw err;
    }
  }
}

/** This process's folder inside each sandbox's transfer folder. */
const OWN = `p${process.pid}`;

/** Where this process makes pipes below a transfer root before they go into a sandbox's folder: never where a sandbox reaches. */
function pendingFolder(root: string): string {
  return path.join(root, `.pending-${OWN}`);
}

// A bare descriptor, not a FileHandle: the socket takes it over.
const openFd = promisify(fs.open) as (file: string, flags: number) => Promise<number>;
const fstat = promisify(fs.fstat) as (fd: number) => Promise<fs.Stats>;
