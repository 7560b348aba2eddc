import { randomBytes } from 'node:crypto';
import { PassThrough, Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { errors } from '../core/errors.ts';
import type { Lifecycle } from '../lifecycle/index.ts';
import type { SandboxExec } from '../lifecycle/runtime/sandbox-exec.ts';
import { leafName, parseSandboxPath, type SandboxPath } from './paths.ts';
import { ScriptRunner, ShellGone, type ScriptResult } from './script-runner.ts';
import { UPLOAD_WRITE, type Operation } from './scripts.ts';
import { fileHeader, fileTrailer } from './tar-header.ts';

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
  private readonly scripts: ScriptRunner;

  constructor(
    private readonly exec: SandboxExec,
    private readonly lifecycle: Lifecycle,
    readonly maxUpload: number,
  ) {
    this.scripts = new ScriptRunner(exec);
  }

  /** Ends the shells kept in sandboxes (the service is closing). */
  close(): void {
    this.scripts.close();
  }

  async list(sandbox: string, path?: string): Promise<{ path: string; entries: FileEntry[] }> {
    const p = parseSandboxPath(path);
    const { stdout } = await this.run(sandbox, p, 'LIST', [p.path]);
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

  /**
   * A file's bytes, or a folder as a tar stream, through the engine's archive API (what
   * `docker cp` uses): the path is checked and resolved in the sandbox first, then read at its
   * real location; a file's tar entry must still be that regular file of that size.
   */
  async download(sandbox: string, path: string | undefined): Promise<Download> {
    const p = parseSandboxPath(path);
    const { stdout } = await this.run(sandbox, p, 'LOCATE', [p.path]);
    const text = stdout.toString('utf8');
    const nl = text.indexOf('\n');
    const [head, real] = [text.slice(0, nl), text.slice(nl + 1)];
    const name = p.parts.at(-1) ?? p.root.split('/').filter(Boolean).at(-1)!;
    const tar = await this.archive(sandbox, p, real);
    if (head === 'D') return { kind: 'folder', name, stream: tar };
    const size = Number(head.slice(2));
    return { kind: 'file', name, size, stream: await fileFromTar(tar, size, p.path) };
  }

  private async archive(sandbox: string, p: SandboxPath, real: string): Promise<Readable> {
    try {
      return await this.exec.getArchive(sandbox, real);
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404) throw new errors.FileNotFound(p.path);
      if (code === 409) throw notRunning(sandbox, 'exited');
      throw err;
    }
  }

  async readText(sandbox: string, path: string | undefined): Promise<{ path: string; text: string }> {
    const p = parseSandboxPath(path);
    const { stdout } = await this.run(sandbox, p, 'READ_TEXT', [p.path, String(MAX_TEXT_BYTES)]);
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
    const dir = parentOf(p);
    const tmp = `.svc-upload-${randomBytes(8).toString('hex')}`;
    // The archive path checks the state itself (in run), once.
    if (declaredLength !== undefined) return this.uploadArchive(sandbox, p, dir, name, tmp, body, declaredLength);
    await this.ensureRunning(sandbox);
    const proc = await this.start(sandbox, [UPLOAD_WRITE, p.root, dir, name, tmp]);
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
      await this.abortUpload(sandbox, p, dir, tmp);
      if (streamError instanceof errors.UploadTooLarge) throw streamError;
      if (result.exitCode !== 0) throw this.failure(result, p);
      throw new errors.UploadIncomplete(received, declaredLength ?? 'the announced number of');
    }
    await this.run(sandbox, p, 'UPLOAD_COMMIT', [dir, name, tmp], { checked: true });
    return { path: p.path, size: received };
  }

  /**
   * An upload of known length goes to the archive API (what `docker cp` uses) as a one-file tar
   * built on the fly, into the folder's real path checked just before; then the commit script
   * checks the size and renames it over the target.
   */
  private async uploadArchive(sandbox: string, p: SandboxPath, dir: string, name: string, tmp: string, body: Readable, length: number) {
    const { stdout } = await this.run(sandbox, p, 'UPLOAD_PREPARE', [dir, name]);
    const real = stdout.toString('utf8');
    let received = 0;
    async function* tar() {
      yield fileHeader(tmp, length);
      for await (const chunk of body) {
        received += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
      if (received !== length) throw new errors.UploadIncomplete(received, length);
      yield fileTrailer(length);
    }
    try {
      await this.exec.putArchive(sandbox, real, tar(), 512 + length + fileTrailer(length).length);
    } catch (err) {
      await this.abortUpload(sandbox, p, dir, tmp);
      // the engine may still be writing what it got: sweep once more when it has stopped
      setTimeout(() => void this.abortUpload(sandbox, p, dir, tmp), 2_000).unref();
      if (err instanceof errors.UploadIncomplete || (received < length && !(err as { statusCode?: number }).statusCode)) throw new errors.UploadIncomplete(received, length);
      const code = (err as { statusCode?: number }).statusCode;
      if (code === 404) throw new errors.FileNotFound(p.path);
      if (code === 409) throw notRunning(sandbox, 'exited');
      throw new errors.FileOperationFailed((err as Error).message);
    }
    await this.run(sandbox, p, 'UPLOAD_COMMIT', [dir, name, tmp, String(length)], { checked: true });
    return { path: p.path, size: length };
  }

  async mkdir(sandbox: string, path: string | undefined): Promise<{ path: string }> {
    const p = parseSandboxPath(path);
    leafName(p, 'a new folder');
    await this.run(sandbox, p, 'MKDIR', p.parts);
    return { path: p.path };
  }

  /** Deletes a file, a link, or a folder with everything in it; never a top folder. */
  async remove(sandbox: string, path: string | undefined): Promise<{ path: string; deleted: true }> {
    if (path === undefined || path === '') throw new errors.BadPath('give the path to delete');
    const p = parseSandboxPath(path);
    if (p.parts.length === 0) throw new errors.TopFolder(p.path);
    await this.run(sandbox, p, 'DELETE', [parentOf(p), p.parts.at(-1)!]);
    return { path: p.path, deleted: true };
  }

  /** 409 with "start it first" unless the sandbox runs now. */
  async ensureRunning(sandbox: string): Promise<void> {
    const state = await this.lifecycle.status(sandbox);
    if (state.status !== 'running') throw notRunning(sandbox, state.status);
  }

  /** Runs one operation of scripts.ts on `p.root` (after checking the sandbox runs, unless `checked`). */
  private async run(sandbox: string, p: SandboxPath, op: Operation, args: string[], opts: { checked?: boolean } = {}) {
    if (!opts.checked) await this.ensureRunning(sandbox);
    let result: ScriptResult;
    try {
      result = await this.scripts.run(sandbox, op, [p.root, ...args]);
    } catch (err) {
      throw await this.execFailure(sandbox, err);
    }
    if (result.exitCode !== 0) throw this.failure(result, p);
    this.lifecycle.recordActivity(sandbox);
    return { stdout: result.stdout };
  }

  /** A command of its own (the upload that streams into its stdin). */
  private async start(sandbox: string, [script, ...args]: string[]) {
    try {
      return await this.exec.start(sandbox, ['sh', '-c', script!, 'svc-files', ...args], { stdin: true });
    } catch (err) {
      throw await this.execFailure(sandbox, err);
    }
  }

  /** Why a command could not run: mostly because the sandbox stopped under it. */
  private async execFailure(sandbox: string, err: unknown): Promise<unknown> {
    const code = (err as { statusCode?: number }).statusCode;
    if (code === 404 || code === 409) return notRunning(sandbox, code === 404 ? 'deep_sleep' : 'exited');
    if (err instanceof ShellGone) {
      const state = await this.lifecycle.status(sandbox);
      if (state.status !== 'running') return notRunning(sandbox, state.status);
      return new errors.FileOperationFailed(`${err.message}; try again`);
    }
    return err;
  }

  /** Best effort: a leftover .svc-upload-* file never carries the final name. */
  private async abortUpload(sandbox: string, p: SandboxPath, dir: string, tmp: string): Promise<void> {
    await this.run(sandbox, p, 'UPLOAD_ABORT', [dir, tmp], { checked: true }).catch(() => undefined);
  }

  private failure(result: { exitCode: number; stderr: string }, p: SandboxPath): Error {
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

/**
 * The content of the single regular file in an archive-API tar, as a plain Node stream: a small
 * state machine over the tar's 512-byte headers (PAX and GNU long-name records are skipped), the
 * content passed on as slices of the engine's chunks. Anything else there (a link that replaced
 * the file meanwhile, another size) is refused.
 */
function fileFromTar(tar: Readable, size: number, path: string): Promise<Readable> {
  return new Promise((resolve, reject) => {
    const out = new PassThrough({ highWaterMark: 256 * 1024 });
    let header = Buffer.alloc(0);
    let skip = 0;
    let remaining = -1; // bytes of content still to pass on; -1 while reading headers
    let started = false;
    const fail = (err: Error) => {
      tar.destroy();
      if (started) out.destroy(err);
      else reject(err);
    };
    const onData = (chunk: Buffer) => {
      let at = 0;
      while (at < chunk.length) {
        if (remaining > 0) {
          const take = Math.min(remaining, chunk.length - at);
          remaining -= take;
          const ok = out.write(chunk.subarray(at, at + take));
          at += take;
          if (remaining === 0) { tar.off('data', onData); tar.destroy(); out.end(); return; }
          if (!ok) { tar.pause(); out.once('drain', () => tar.resume()); }
          continue;
        }
        if (skip > 0) {
          const take = Math.min(skip, chunk.length - at);
          skip -= take;
          at += take;
          continue;
        }
        const take = Math.min(512 - header.length, chunk.length - at);
        header = Buffer.concat([header, chunk.subarray(at, at + take)]);
        at += take;
        if (header.length < 512) continue;
        const type = String.fromCharCode(header[156]!);
        const entrySize = parseInt(header.toString('ascii', 124, 136).replace(/\0.*$/, '').trim() || '0', 8);
        header = Buffer.alloc(0);
        if (type === 'x' || type === 'g' || type === 'L' || type === 'K') {
          skip = Math.ceil(entrySize / 512) * 512;
          continue;
        }
        if ((type !== '0' && type !== '\0') || entrySize !== size) {
          return fail(new errors.FileOperationFailed(`${path} changed while it was being read; try again`));
        }
        started = true;
        resolve(out);
        if (size === 0) { tar.off('data', onData); tar.destroy(); out.end(); return; }
        remaining = size;
      }
    };
    tar.on('data', onData);
    tar.on('error', (err: Error) => fail(err));
    tar.on('end', () => { if (!started) reject(new errors.FileNotFound(path)); else if (remaining > 0) out.destroy(new Error('the archive ended early')); });
    out.on('close', () => { if (!out.writableFinished) tar.destroy(); });
  });
}
