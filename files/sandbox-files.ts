import { randomBytes } from 'node:crypto';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { errors } from '../core/errors.ts';
import type { Lifecycle } from '../lifecycle/index.ts';
import type { ExecResult, SandboxExec } from '../lifecycle/runtime/sandbox-exec.ts';
import { leafName, parseSandboxPath, type SandboxPath } from './paths.ts';
import * as scripts from './scripts.ts';

/** Spec 8: text reads are UTF-8 up to 1 MB. */
export const MAX_TEXT_BYTES = 1024 * 1024;

/** A row of GET files (spec 2.2). */
export interface FileEntry {
  name: string;
  type: 'dir' | 'file' | 'link' | 'other';
  size: number;
  /** ISO 8601. */
  mtime: string;
}

export type Download =
  | { kind: 'file'; name: string; size: number; stream: Readable }
  | { kind: 'folder'; name: string; stream: Readable };

const TYPES: Record<string, FileEntry['type']> = { d: 'dir', f: 'file', l: 'link' };

/**
 * The file operations of spec 4.2 on a running sandbox, shared by the HTTP routes and the MCP
 * tools. Callers authorise first; this checks the path rules, that the sandbox runs, and does
 * the work inside the sandbox container with one checked script per operation (scripts.ts).
 */
export class SandboxFiles {
  constructor(
    private readonly exec: SandboxExec,
    private readonly lifecycle: Lifecycle,
    readonly maxUpload: number,
  ) {}

  async list(sandbox: string, path?: string): Promise<{ path: string; entries: FileEntry[] }> {
    const p = parseSandboxPath(path);
    const { stdout } = await this.run(sandbox, p, scripts.LIST, [p.path]);
    const entries: FileEntry[] = [];
    for (const record of stdout.toString('utf8').split('\0')) {
      if (!record) continue;
      const [type, size, mtime, ...name] = record.split('\t');
      entries.push({
        name: name.join('\t'),
        type: TYPES[type!] ?? 'other',
        size: Number(size),
        mtime: new Date(Math.round(Number(mtime) * 1000)).toISOString(),
      });
    }
    entries.sort((a, b) => Number(b.type === 'dir') - Number(a.type === 'dir') || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { path: p.path, entries };
  }

  /** A file's bytes, or a folder as a tar stream; nothing is read before the caller consumes it. */
  async download(sandbox: string, path: string | undefined): Promise<Download> {
    const p = parseSandboxPath(path);
    await this.ensureRunning(sandbox);
    const proc = await this.start(sandbox, [scripts.DOWNLOAD, p.root, p.path]);
    const header = await readHeader(proc.stdout);
    if (header === null) {
      const result = await proc.done;
      throw this.failure(result, p);
    }
    const name = p.parts.at(-1) ?? p.root.split('/').filter(Boolean).at(-1)!;
    proc.done.then((r) => {
      if (r.exitCode !== 0 && r.exitCode !== 1) proc.stdout.destroy(new Error(`download ended with exit code ${r.exitCode}: ${r.stderr}`));
    }, () => undefined);
    this.lifecycle.recordActivity(sandbox);
    if (header.startsWith('F ')) return { kind: 'file', name, size: Number(header.slice(2)), stream: proc.stdout };
    return { kind: 'folder', name, stream: proc.stdout };
  }

  async readText(sandbox: string, path: string | undefined): Promise<{ path: string; text: string }> {
    const p = parseSandboxPath(path);
    const { stdout } = await this.run(sandbox, p, scripts.READ_TEXT, [p.path, String(MAX_TEXT_BYTES)]);
    if (stdout.length > MAX_TEXT_BYTES) throw new errors.TextTooLarge(p.path, `more than ${MAX_TEXT_BYTES}`);
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(stdout);
    } catch {
      throw new errors.NotText(p.path);
    }
    return { path: p.path, text };
  }

  /**
   * Streams `body` to a new file beside the target, then renames it over the target: a stopped
   * or refused upload leaves nothing under the final name. Owner root, mode 0644 (spec 4.2).
   */
  async upload(sandbox: string, path: string | undefined, body: Readable, declaredLength?: number): Promise<{ path: string; size: number }> {
    const p = parseSandboxPath(path);
    const name = leafName(p, 'an upload');
    if (declaredLength !== undefined && declaredLength > this.maxUpload) throw new errors.UploadTooLarge(this.maxUpload);
    await this.ensureRunning(sandbox);
    const dir = parentOf(p);
    const tmp = `.svc-upload-${randomBytes(8).toString('hex')}`;
    const proc = await this.start(sandbox, [scripts.UPLOAD_WRITE, p.root, dir, name, tmp], true);
    const out: Buffer[] = [];
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    let received = 0;
    const limit = this.maxUpload;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        received += chunk.length;
        if (received > limit) return cb(new errors.UploadTooLarge(limit));
        cb(null, chunk);
      },
    });
    // The body is piped by hand so that a refused upload leaves the client's connection alone
    // (the 413 still reaches it); a client that goes away mid-upload ends the pump with an error.
    const onBodyError = (err: Error) => counter.destroy(err);
    const onBodyClose = () => { if (!body.readableEnded) counter.destroy(new Error('the upload stopped before its end')); };
    body.on('error', onBodyError);
    body.on('close', onBodyClose);
    body.pipe(counter);
    let streamError: unknown;
    try {
      await pipeline(counter, proc.stdin!);
    } catch (err) {
      streamError = err;
      body.unpipe(counter);
      body.resume(); // discard the rest
    } finally {
      body.off('error', onBodyError);
      body.off('close', onBodyClose);
    }
    const result = await proc.done.catch((err: Error) => ({ exitCode: -1, stderr: err.message }));
    const written = Number(Buffer.concat(out).toString('utf8').trim());
    const aborted = (body as { readableAborted?: boolean }).readableAborted;
    const incomplete = streamError !== undefined || aborted || (declaredLength !== undefined && received !== declaredLength);
    if (result.exitCode !== 0 || incomplete || written !== received) {
      await this.execQuiet(sandbox, [scripts.UPLOAD_ABORT, p.root, dir, tmp]);
      if (streamError instanceof errors.UploadTooLarge) throw streamError;
      if (result.exitCode !== 0) throw this.failure(result, p);
      throw new errors.UploadIncomplete(received, declaredLength ?? 'the announced number of');
    }
    const commit = await this.start(sandbox, [scripts.UPLOAD_COMMIT, p.root, dir, name, tmp]);
    commit.stdout.resume();
    const committed = await commit.done;
    if (committed.exitCode !== 0) throw this.failure(committed, p);
    this.lifecycle.recordActivity(sandbox);
    return { path: p.path, size: received };
  }

  async mkdir(sandbox: string, path: string | undefined): Promise<{ path: string }> {
    const p = parseSandboxPath(path);
    leafName(p, 'a new folder');
    await this.run(sandbox, p, scripts.MKDIR, p.parts);
    return { path: p.path };
  }

  /** Deletes a file, a link, or a folder with everything in it; never a top folder. */
  async remove(sandbox: string, path: string | undefined): Promise<{ path: string; deleted: true }> {
    if (path === undefined || path === '') throw new errors.BadPath('give the path to delete');
    const p = parseSandboxPath(path);
    if (p.parts.length === 0) throw new errors.TopFolder(p.path);
    await this.run(sandbox, p, scripts.DELETE, [parentOf(p), p.parts.at(-1)!]);
    return { path: p.path, deleted: true };
  }

  /** 409 with "start it first" unless the sandbox runs now. */
  async ensureRunning(sandbox: string): Promise<void> {
    const state = await this.lifecycle.status(sandbox);
    if (state.status !== 'running') throw notRunning(sandbox, state.status);
  }

  private async run(sandbox: string, p: SandboxPath, script: string, args: string[]) {
    await this.ensureRunning(sandbox);
    const proc = await this.start(sandbox, [script, p.root, ...args]);
    const chunks: Buffer[] = [];
    proc.stdout.on('data', (c: Buffer) => chunks.push(c));
    const result = await proc.done;
    if (result.exitCode !== 0) throw this.failure(result, p);
    this.lifecycle.recordActivity(sandbox);
    return { stdout: Buffer.concat(chunks) };
  }

  private async start(sandbox: string, [script, ...args]: string[], stdin = false) {
    try {
      return await this.exec.start(sandbox, ['sh', '-c', script!, 'svc-files', ...args], { stdin });
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404 || code === 409) throw notRunning(sandbox, code === 404 ? 'deep_sleep' : 'exited');
      throw err;
    }
  }

  private async execQuiet(sandbox: string, cmd: string[]): Promise<void> {
    try {
      const proc = await this.start(sandbox, cmd);
      proc.stdout.resume();
      await proc.done;
    } catch {
      /* best effort: a leftover .svc-upload-* file never carries the final name */
    }
  }

  private failure(result: ExecResult, p: SandboxPath): Error {
    const detail = result.stderr.trim();
    switch (result.exitCode) {
      case 10: return new errors.FileNotFound(p.path);
      case 11: return new errors.PathEscapes(p.path, p.root);
      case 12: return new errors.NotAFolder(p.path);
      case 13: return new errors.IsAFolder(p.path);
      case 14: return new errors.NotAFile(p.path);
      case 15: return new errors.TextTooLarge(p.path, detail);
      case 17: return new errors.FileExists(detail ? `${p.root}/${detail}` : p.path);
      default: return new errors.FileOperationFailed(detail || `exit code ${result.exitCode}`);
    }
  }
}

function parentOf(p: SandboxPath): string {
  return [p.root, ...p.parts.slice(0, -1)].join('/');
}

export function notRunning(sandbox: string, status: string): Error {
  const state = status === 'exited' ? 'asleep' : status === 'deep_sleep' ? 'in deep sleep' : status;
  return new errors.SandboxNotRunning(sandbox, state, sandbox);
}

/** Reads the first line of a download (`F <size>` or `D`) and leaves the rest in the stream. */
function readHeader(stream: Readable): Promise<string | null> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onReadable = () => {
      let chunk: Buffer | null;
      while ((chunk = stream.read() as Buffer | null) !== null) {
        buf = Buffer.concat([buf, chunk]);
        const nl = buf.indexOf(10);
        if (nl >= 0) {
          cleanup();
          const rest = buf.subarray(nl + 1);
          if (rest.length) stream.unshift(rest);
          return resolve(buf.subarray(0, nl).toString('utf8'));
        }
        if (buf.length > 64) {
          cleanup();
          return reject(new errors.FileOperationFailed('unexpected output from the sandbox'));
        }
      }
    };
    const onEnd = () => { cleanup(); resolve(null); };
    const onError = (err: Error) => { cleanup(); reject(err); };
    const cleanup = () => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', onError);
    };
    stream.on('readable', onReadable);
    stream.on('end', onEnd);
    stream.on('error', onError);
  });
}
