export interface ZipEntry {
  /** Inside the archive; a trailing `/` makes a folder. */
  path: string;
  content?: string | Buffer;
  /** Permission bits (0o644, 0o600, 0o755). */
  mode: number;
}

/** A zip of small in-memory entries (an export folder is a few KB), with the given modes kept. */
export async function zipEntries(entries: ZipEntry[], mtime = new Date()): Promise<Buffer> {
  // Loaded on the first export, not when the service starts: a checkout whose node_modules
  // predates this dependency still starts and serves everything else.
  const { default: yazl } = await import('yazl');
  const zip = new yazl.ZipFile();
  for (const e of entries) {
    if (e.path.endsWith('/')) zip.addEmptyDirectory(e.path, { mtime, mode: 0o40000 | e.mode });
    else zip.addBuffer(Buffer.from(e.content ?? ''), e.path, { mtime, mode: 0o100000 | e.mode });
  }
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
