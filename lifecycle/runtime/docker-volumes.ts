import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import { resourceNames } from '../names.ts';
import { isHelper, LABEL_INSTANCE, LABEL_ROLE, LABEL_SANDBOX, ROLE_ARCHIVER, ROLE_MOVER } from './docker-labels.ts';
import { guarded, statusCode } from './engine-client.ts';
import { transferFolder } from './host-config.ts';
import type { SandboxExec } from './sandbox-exec.ts';
import { copySandboxVolumes } from './volume-copy.ts';

/** How long removeHelpers waits for a helper whose removal another call began. */
const HELPER_REMOVAL_WAIT_MS = 30_000;

/** Folders of a sandbox that persist, in the order they are archived. */
const ARCHIVED_PATHS = ['/root', '/home', '/srv', '/opt', '/var/lib/docker/volumes'] as const;

/**
 * A sandbox's volumes on one engine (DockerRuntime's part): made, copied, measured, archived, removed,
 * and the helper containers that reach them without the sandbox.
 */
export class DockerVolumes {
  constructor(
    private readonly docker: Docker,
    private readonly opts: { image: string; instance: string; logger: Logger; transferRoot?: string; move?: { from: Docker } },
    private readonly exec: SandboxExec,
  ) {}

  /** The sandbox's volumes, made if missing (kept when they exist). */
  createVolumes(name: string): Promise<void> {
    return guarded(async () => {
      const labels = { [LABEL_SANDBOX]: name, [LABEL_INSTANCE]: this.opts.instance };
      await Promise.all(Object.values(resourceNames(name).volumes).map((volume) => this.docker.createVolume({ Name: volume, Labels: labels })));
    });
  }

  /** A fork's volumes: made for `to` and filled with a copy of `from`'s, `from` paused meanwhile if it runs (volume-copy.ts). */
  copyVolumes(from: string, to: string): Promise<void> {
    return guarded(async () => {
      await this.createVolumes(to);
      const helperLabels = { [LABEL_SANDBOX]: to, [LABEL_INSTANCE]: this.opts.instance, [LABEL_ROLE]: ROLE_MOVER };
      await copySandboxVolumes({ docker: this.docker, image: this.opts.image, helperLabels, logger: this.opts.logger }, from, to);
    });
  }

  /** Whether the engine has any of the sandbox's volumes (a sandbox that never ran may have none). */
  hasVolumes(name: string): Promise<boolean> {
    return guarded(async () => {
      for (const volume of Object.values(resourceNames(name).volumes)) {
        try {
          await this.docker.getVolume(volume).inspect();
          return true;
        } catch (err) {
          if (statusCode(err) !== 404) throw err;
        }
      }
      return false;
    });
  }

  /**
   * A running helper container (the sandbox image, no network, nothing but `sleep`) with the sandbox's
   * volumes at /v/root, /v/home, /v/srv, /v/opt and /v/docker, for a move's tar and checksums through
   * `exec` (its name stands for the sandbox's: container names are sandbox names). It runs in the engine's
   * user namespace: the files' owners it sees are those the sandbox sees, whatever the host's uid range.
   */
  volumeHelper(name: string): Promise<{ container: string; remove(): Promise<void> }> {
    return this.helper(name, Object.entries(resourceNames(name).volumes).map(([key, volume]) => `${volume}:/v/${key}`));
  }

  /**
   * Bytes free on the file system of this engine's data root, where a sandbox's volumes would be made:
   * `df` of the root of a helper that mounts nothing (its layer lives there), so nothing of the sandbox
   * is made here. The helper bears the sandbox's name: removeHelpers clears one a killed process left.
   */
  async freeBytes(name: string): Promise<number> {
    const helper = await this.helper(name, []);
    try {
      const df = await this.exec.run(helper.container, ['df', '-kP', '/']);
      const avail = df.stdout.toString().trim().split('\n').at(-1)?.trim().split(/\s+/)[3];
      if (df.exitCode !== 0 || !avail || !/^\d+$/.test(avail)) throw new Error(`could not read the free space of the engine's data root: ${df.stderr.trim().slice(-200)}`);
      return Number(avail) * 1024;
    } finally {
      await helper.remove().catch(() => undefined);
    }
  }

  /** Bytes the sandbox's volumes take on this engine's disk (`du`, sparse files as stored); 0 when it has none. */
  async volumeBytes(name: string): Promise<number> {
    if (!(await this.hasVolumes(name))) return 0;
    const helper = await this.volumeHelper(name);
    try {
      const du = await this.exec.run(helper.container, ['du', '-sk', '/v']); // not -x: each volume is a mount of its own
      const kib = /^(\d+)/.exec(du.stdout.toString())?.[1];
      if (du.exitCode !== 0 || kib === undefined) throw new Error(`could not read the size of sandbox "${name}"'s volumes: ${du.stderr.trim().slice(-200)}`);
      return Number(kib) * 1024;
    } finally {
      await helper.remove().catch(() => undefined);
    }
  }

  private helper(name: string, binds: string[]): Promise<{ container: string; remove(): Promise<void> }> {
    return guarded(async () => {
      const container = `${name}-mover-${Date.now()}`;
      const helper = await this.docker.createContainer({
        name: container,
        Image: this.opts.image,
        Entrypoint: ['sleep', 'infinity'],
        Labels: { [LABEL_SANDBOX]: name, [LABEL_INSTANCE]: this.opts.instance, [LABEL_ROLE]: ROLE_MOVER },
        HostConfig: { NetworkMode: 'none', Binds: binds },
      });
      await helper.start();
      return {
        container,
        remove: () => guarded(async () => {
          await helper.remove({ force: true }).catch((err) => { if (statusCode(err) !== 404) throw err; });
        }),
      };
    });
  }

  /**
   * Writes the persistent folders of a sandbox as gzipped tars into `dir`, read through a
   * container that is created with the sandbox's volumes but never started.
   */
  archiveVolumes(name: string, dir: string): Promise<void> {
    return guarded(async () => {
      await this.removeHelpers(name);
      const names = resourceNames(name);
      const reader = await this.docker.createContainer({
        name: `${name}-archiver-${Date.now()}`,
        Image: this.opts.image,
        Entrypoint: ['/bin/true'],
        Labels: { [LABEL_SANDBOX]: name, [LABEL_INSTANCE]: this.opts.instance, [LABEL_ROLE]: ROLE_ARCHIVER },
        HostConfig: {
          NetworkMode: 'none',
          Binds: [
            `${names.volumes.root}:/root`,
            `${names.volumes.home}:/home`,
            `${names.volumes.srv}:/srv`,
            `${names.volumes.opt}:/opt`,
            `${names.volumes.docker}:/var/lib/docker`,
          ],
        },
      });
      try {
        await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 }); // the sandbox's files: the service's alone
        for (const folder of ARCHIVED_PATHS) {
          const file = path.join(dir, `${folder.slice(1).replaceAll('/', '-')}.tar.gz`);
          try {
            const tar = await reader.getArchive({ path: folder });
            await pipeline(tar, createGzip(), fs.createWriteStream(file, { mode: 0o600 }));
          } catch (err) {
            if (statusCode(err) !== 404) throw err;
          }
        }
      } finally {
        await reader.remove({ force: true });
      }
    });
  }

  /**
   * Removes what a sandbox keeps on the host beyond its container: volumes, helpers holding them, transfer
   * folder (`transfer: false` keeps it: a move's leftover on a host that shares the folder with the sandbox's new one).
   */
  removeVolumes(name: string, opts: { transfer?: boolean } = {}): Promise<void> {
    return guarded(async () => {
      await this.removeHelpers(name);
      if (this.opts.transferRoot !== undefined && opts.transfer !== false) await fs.promises.rm(transferFolder(this.opts.transferRoot, name), { recursive: true, force: true });
      for (const volume of Object.values(resourceNames(name).volumes)) {
        try {
          await this.docker.getVolume(volume).remove();
        } catch (err) {
          if (statusCode(err) !== 404) throw err;
        }
      }
    });
  }

  /** Removes helper containers a killed archive or move left behind (they hold the sandbox's volumes). */
  async removeHelpers(name: string): Promise<void> {
    const containers = await this.docker.listContainers({ all: true, filters: { label: [`${LABEL_INSTANCE}=${this.opts.instance}`, `${LABEL_SANDBOX}=${name}`] } });
    const underWay: string[] = [];
    for (const c of containers.filter(isHelper)) {
      try {
        await this.docker.getContainer(c.Id).remove({ force: true });
      } catch (err) {
        if (statusCode(err) === 409 && /already in progress/.test((err as Error).message)) underWay.push(c.Id);
        else if (statusCode(err) !== 404) throw err;
      }
    }
    // A removal already under way ends when the engine lets go of the container: an exec whose client
    // stalled (a paused mover) holds it until that client reads or goes. Waited for a while, so that
    // the volumes can go next; past that, removing them fails and the caller's move rolls back.
    const until = Date.now() + HELPER_REMOVAL_WAIT_MS;
    for (const id of underWay) {
      while (Date.now() < until && await this.docker.getContainer(id).inspect().then(() => true, (err) => statusCode(err) !== 404)) {
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /**
   * Whether this engine holds the sandbox's files: its volumes, or, where sandboxes move from the main
   * engine at their next creation (engine-move.ts), volumes of it there.
   */
  holds(name: string): Promise<boolean> {
    return guarded(async () => {
      // by name, not by listing all volumes (a create asks this: with 500 sandboxes, 2000 volumes)
      const own = await Promise.all(Object.values(resourceNames(name).volumes).map((volume) => this.docker.getVolume(volume).inspect().then(() => true, (err) => {
        if (statusCode(err) === 404) return false;
        throw err;
      })));
      if (own.includes(true)) return true;
      if (!this.opts.move) return false;
      try {
        await this.opts.move.from.getVolume(resourceNames(name).volumes.root).inspect();
        return true;
      } catch (err) {
        if (statusCode(err) === 404) return false;
        throw err;
      }
    });
  }

  /** Sandboxes of this instance that still have volumes on the host engine (with or without a container). */
  withVolumes(): Promise<string[]> {
    return guarded(async () => {
      const { Volumes } = await this.docker.listVolumes({ filters: { label: [`${LABEL_INSTANCE}=${this.opts.instance}`] } });
      return [...new Set((Volumes ?? []).map((v) => v.Labels?.[LABEL_SANDBOX]).filter((n): n is string => !!n))];
    });
  }
}
