import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import tar from 'tar-stream';
import { IncusError, readBounded, type IncusClient } from './incus-client.ts';

/** The folders a sandbox keeps, as the Docker runtime archives them (one `<folder>.tar.gz` each). */
export const ARCHIVED_PATHS = ['/root', '/home', '/srv', '/opt', '/var/lib/docker/volumes'] as const;

/**
 * Writes the persistent folders of an instance, running or not, as gzipped tars into `dir`, through
 * Incus's file API (it mounts a stopped instance's volume for the read): one request per entry, so
 * fine for a sandbox's own files, slow for an inner engine with many thousands. A folder the
 * sandbox lacks gets no tar, as with the Docker runtime.
 */
export async function archiveInstance(client: IncusClient, instance: string, dir: string): Promise<void> {
  await fs.promises.mkdir(dir, { recursive: true, mode: 0o700 }); // the sandbox's files: the service's alone
  for (const folder of ARCHIVED_PATHS) {
    try {
      await client.file(instance, folder).then((top) => drain(top.body));
    } catch (err) {
      if (err instanceof IncusError && err.status === 404) continue;
      throw err;
    }
    const pack = tar.pack();
    const file = path.join(dir, `${folder.slice(1).replaceAll('/', '-')}.tar.gz`);
    const written = pipeline(pack, createGzip(), fs.createWriteStream(file, { mode: 0o600 }));
    try {
      await walk(client, instance, folder, path.posix.basename(folder), pack);
      pack.finalize();
    } catch (err) {
      pack.destroy(err as Error);
    }
    await written;
  }
}

/** `source` into the tar as `name`, folders depth first. */
async function walk(client: IncusClient, instance: string, source: string, name: string, pack: tar.Pack): Promise<void> {
  const f = await client.file(instance, source);
  const header = { name, uid: f.uid, gid: f.gid, mode: f.mode };
  if (f.type === 'directory') {
    const entries = (JSON.parse(await readBounded(f.body)) as { metadata: string[] }).metadata ?? [];
    pack.entry({ ...header, type: 'directory' });
    for (const e of entries.sort()) {
      if (e.includes('/') || e === '.' || e === '..') throw new Error(`a folder entry that is no name: ${JSON.stringify(e).slice(0, 100)}`);
      await walk(client, instance, path.posix.join(source, e), `${name}/${e}`, pack);
    }
  } else if (f.type === 'symlink') {
    pack.entry({ ...header, type: 'symlink', linkname: (await readBounded(f.body)).slice(0, 4096) });
  } else {
    const chunks: Buffer[] = [];
    for await (const c of f.body) chunks.push(c);
    pack.entry({ ...header, type: 'file' }, Buffer.concat(chunks));
  }
}

async function drain(body: AsyncIterable<Buffer>): Promise<void> {
  for await (const _ of body);
}
