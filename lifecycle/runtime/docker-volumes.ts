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
    private readonly opts: { image: string; instance: string; logger: Logger; transferRoot: string },
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

  /** Removes what a sandbox keeps on the host beyond its container: volumes, helpers holding them, transfer folder. */
  removeVolumes(name: string): Promise<void> {
    return guarded(async () => {
      await this.removeHelpers(name);
      await fs.promises.rm(transferFolder(this.opts.transferRoot, name), { recursive: true, force: true });
      for (const volume of Object.values(resourceNames(name).volumes)) {
        try {
          await this.docker.getVolume(volume).remove();
        } catch (err) {
          if (statusCode(err) !== 404) throw err;
        }
      }
    });
  }

  /** Removes helper containers a killed archive or fork left behind (they hold the sandbox's volumes). */
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
    // A removal already under way ends when the engine lets go of the container (a fork's copy helper
    // whose process stalled holds it until that process reads or goes). Waited for a while, so that
    // the volumes can go next; past that, removing them fails and the caller tries again later.
    const until = Date.now() + HELPER_REMOVAL_WAIT_MS;
    for (const id of underWay) {
      while (Date.now() < until && await this.docker.getContainer(id).inspect().then(() => true, (err) => statusCode(err) !== 404)) {
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /** Sandboxes of this instance that still have volumes on the host engine (with or without a container). */
  withVolumes(): Promise<string[]> {
    return guarded(async () => {
      const { Volumes } = await this.docker.listVolumes({ filters: { label: [`${LABEL_INSTANCE}=${this.opts.instance}`] } });
      return [...new Set((Volumes ?? []).map((v) => v.Labels?.[LABEL_SANDBOX]).filter((n): n is string => !!n))];
    });
  }
}
