import { randomBytes } from 'node:crypto';
import { PassThrough, Readable, type Writable } from 'node:stream';
import tar from 'tar-stream';
import { errors } from '../core/errors.ts';
import { notRunning } from '../core/sandbox-status.ts';
import type { Lifecycle } from '../lifecycle/index.ts';
import type { RuntimeState, SandboxExecutor } from '../lifecycle/index.ts';
import { leafName, parseSandboxPath, type SandboxPath } from './paths.ts';
import { pump } from './pump.ts';
import { ScriptRunner, ShellGone, type ScriptResult } from './script-runner.ts';
import { UPLOAD_WRITE_STDIN, type Operation } from './scripts.ts';
import type { TransferPipe, TransferPipes } from './transfer-pipes.ts';

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
    private readonly exec: SandboxExecutor,
    private readonly lifecycle: Lifecycle,
    private readonly pipes: TransferPipes,
    readonly maxUpload: number,
  ) {
    this.scripts = new ScriptRunner(exec);
  }

  /** Ends the shells kept in sandboxes and the pipe made ahead (the service is closing). */
  async close(): Promise<void> {
    this.scripts.close();
    await this.pipes.close();
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
   * A file's bytes, or a folder as a tar stream. A file comes through a transfer pipe (SEND); a
   * folder, and any path in a sandbox made before transfer pipes, through the engine's archive
   * API (what `docker cp` uses) at the real path the script resolved.
   */
  async download(sandbox: string, path: string | undefined): Promise<Download> {
    const p = parseSandboxPath(path);
    const name = p.parts.at(-1) ?? p.root.split('/').filter(Boolean).at(-1)!;
    const state = await this.ensureRunning(sandbox);
    const transfer = transferOf(state);
    if (!transfer) return this.downloadArchive(sandbox, p, name);
    const pipe = await this.pipes.create('download', transfer);
    let announce!: (size: number) => void;
    const announced = new Promise<number>((resolve) => { announce = resolve; });
    const sent = settle(this.run(sandbox, p, 'SEND', [p.path, pipe.path], {
      checked: true,
      transfer: true,
      onNotice: (notice) => { if (notice.startsWith('file ')) announce(Number(notice.slice(5))); },
    }));
    let size: number;
    try {
      const first = await Promise.race([announced, sent]);
      if (typeof first !== 'number') {
        // a folder: SEND printed its real path and never opened the pipe
        await pipe.close();
        return { kind: 'folder', name, stream: await this.archive(sandbox, p, first.stdout.toString('utf8').slice(2)) };
      }
      size = first;
    } catch (err) {
      await pipe.close();
      throw err;
    }
    return { kind: 'file', name, size, stream: exactly(pipe, size, sent) };
  }

  /** LOCATE, then the archive API: for sandboxes made before transfer pipes. */
  private async downloadArchive(sandbox: string, p: SandboxPath, name: string): Promise<Download> {
    const { stdout } = await this.run(sandbox, p, 'LOCATE', [p.path], { checked: true });
    const text = stdout.toString('utf8');
    const nl = text.indexOf('\n');
    const [head, real] = [text.slice(0, nl), text.slice(nl + 1)];
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
   * Streams `body` to a new file beside the target, then puts it in the target's place: a stopped
   * or refused upload leaves nothing under the final name. Owner root, mode 0644 (spec 4.2).
   */
  async upload(sandbox: string, path: string | undefined, body: Readable, declaredLength?: number): Promise<{ path: string; size: number }> {
    const p = parseSandboxPath(path);
    const name = leafName(p, 'an upload');
    if (declaredLength !== undefined && declaredLength > this.maxUpload) throw new errors.UploadTooLarge(this.maxUpload);
    const state = await this.ensureRunning(sandbox);
    const dir = parentOf(p);
    const tmp = `.svc-upload-${randomBytes(8).toString('hex')}`;
    const args = [dir, name, tmp, ...(declaredLength === undefined ? [] : [String(declaredLength)])];
    const transfer = transferOf(state);
    const writer = transfer ? await this.writeThroughPipe(sandbox, transfer, p, args) : await this.writeThroughStdin(sandbox, p, args);
    let received: number;
    let written: number;
    try {
      // The script reads to the end of the body: if it ends first, it refused the upload.
      const refused = writer.written.then(() => { throw new errors.FileOperationFailed('the upload was cut off in the sandbox; try again'); });
      received = await Promise.race([
        pump(body, writer.into, { limit: this.maxUpload, declared: declaredLength, closable: writer.closable }),
        refused,
      ]);
      written = await writer.written;
    } catch (err) {
      await writer.written.catch(() => undefined);
      await this.abortUpload(sandbox, p, dir, tmp);
      throw err;
    } finally {
      await writer.close();
    }
    if (written !== received) {
      await this.abortUpload(sandbox, p, dir, tmp);
      throw new errors.UploadIncomplete(written, received);
    }
    // with a known length, UPLOAD_WRITE has checked it and published the file itself
    if (declaredLength === undefined) await this.run(sandbox, p, 'UPLOAD_COMMIT', [...args, String(received)], { checked: true });
    return { path: p.path, size: received };
  }

  /** UPLOAD_WRITE fed by a transfer pipe: `cat` in the sandbox reads what the service writes. */
  private async writeThroughPipe(sandbox: string, transfer: { folder: string; mount: string }, p: SandboxPath, [dir, name, tmp, ...size]: string[]): Promise<UploadWriter> {
    const pipe = await this.pipes.create('upload', transfer);
    let reading!: () => void;
    const opened = new Promise<void>((resolve) => { reading = resolve; });
    const written = settle(this.run(sandbox, p, 'UPLOAD_WRITE', [dir!, name!, tmp!, pipe.path, ...size], { checked: true, transfer: true, onNotice: reading })
      .then((r) => Number(r.stdout.toString('utf8'))));
    // Closed before `cat` opened it, the pipe would lose what it holds and leave `cat` waiting.
    const closable = Promise.race([opened, written.catch(() => undefined)]);
    return { into: pipe.stream, written, closable, close: pipe.close };
  }

  /** UPLOAD_WRITE as a command of its own, fed through its stdin: for sandboxes made before transfer pipes. */
  private async writeThroughStdin(sandbox: string, p: SandboxPath, [dir, name, tmp, ...size]: string[]): Promise<UploadWriter> {
    const proc = await this.start(sandbox, [UPLOAD_WRITE_STDIN, p.root, dir!, name!, tmp!, '-', ...size]);
    const out: Buffer[] = [];
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    const written = proc.done.then(
      (result) => {
        if (result.exitCode !== 0) throw this.failure(result, p);
        return Number(Buffer.concat(out).toString('utf8'));
      },
      async (err: unknown) => { throw await this.execFailure(sandbox, err); },
    );
    return { into: proc.stdin!, written: settle(written), close: async () => { proc.stdin!.destroy(); } };
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
  async ensureRunning(sandbox: string): Promise<RuntimeState> {
    const state = await this.lifecycle.status(sandbox);
    if (state.status !== 'running') throw notRunning(sandbox, state.status);
    return state;
  }

  /** Runs one operation of scripts.ts on `p.root` (after checking the sandbox runs, unless `checked`). */
  private async run(sandbox: string, p: SandboxPath, op: Operation, args: string[], opts: { checked?: boolean; transfer?: boolean; onNotice?: (notice: string) => void } = {}) {
    if (!opts.checked) await this.ensureRunning(sandbox);
    let result: ScriptResult;
    try {
      result = await this.scripts.run(sandbox, op, [p.root, ...args], opts);
    } catch (err) {
      throw await this.execFailure(sandbox, err);
    }
    if (result.exitCode !== 0) throw this.failure(result, p);
    this.lifecycle.clock.recordActivity(sandbox);
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

  /**
   * Why a command could not run: mostly because the sandbox stopped under it. An engine's refusal or
   * failure of the exec itself while the sandbox runs (the engine's status on the error: Docker's
   * `statusCode`, Incus's `status`; Incus's `Instance is frozen` while a fork snapshots it, or its exec
   * operation failing before the command ran, `Failed to retrieve PID of executing child process`) is
   * the operation's failure, to try again: never a 500. An error of the catalogue (RuntimeUnreachable:
   * the engine cannot be asked, 503) stays what it is.
   */
  private async execFailure(sandbox: string, err: unknown): Promise<unknown> {
    if (isCatalogued(err)) return err; // RuntimeUnreachable (503) and the like say it already
    const code = (err as { statusCode?: number }).statusCode;
    if (code === 404 || code === 409) return notRunning(sandbox, code === 404 ? 'deep_sleep' : 'exited');
    const engineStatus = code ?? (err as { status?: unknown }).status;
    if (err instanceof ShellGone || (err instanceof Error && typeof engineStatus === 'number')) {
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
      case 18: return new errors.UploadIncomplete(Number(detail), 'the sent number of');
      case 19: return new errors.FileOperationFailed(`${detail}; try again`);
      default: return new errors.FileOperationFailed(detail || `exit code ${result.exitCode}`);
    }
  }
}

/** Where an upload's bytes go, and what the script in the sandbox makes of them. */
interface UploadWriter {
  into: Writable;
  /** The size of the file the script wrote. */
  written: Promise<number>;
  /** Settles once `into` may be ended or destroyed. */
  closable?: Promise<unknown>;
  close(): Promise<void>;
}

/** The sandbox's transfer folder and where it sees it, or undefined when the runtime shares none with this service. */
function transferOf(state: RuntimeState): { folder: string; mount: string } | undefined {
  return state.transferFolder && state.transferMount ? { folder: state.transferFolder, mount: state.transferMount } : undefined;
}

/** A promise that may be awaited late without counting as unhandled meanwhile. */
function settle<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

function parentOf(p: SandboxPath): string {
  return [p.root, ...p.parts.slice(0, -1)].join('/');
}


/**
 * The `size` bytes that SEND writes into a transfer pipe, as a stream that ends after the last
 * of them (the pipe itself never ends: the service holds both sides). Fails if SEND does; closes
 * the pipe when done, or when the reader goes away (`cat` in the sandbox then stops).
 */
function exactly(pipe: TransferPipe, size: number, sent: Promise<unknown>): Readable {
  const out = new PassThrough({ highWaterMark: 256 * 1024 });
  let remaining = size;
  const finish = () => {
    pipe.stream.off('data', onData);
    void pipe.close();
  };
  const onData = (chunk: Buffer) => {
    const take = Math.min(remaining, chunk.length);
    remaining -= take;
    const ok = out.write(take === chunk.length ? chunk : chunk.subarray(0, take));
    if (remaining === 0) {
      finish();
      out.end();
    } else if (!ok) {
      pipe.stream.pause();
      out.once('drain', () => pipe.stream.resume());
    }
  };
  if (size === 0) {
    finish();
    out.end();
    return out;
  }
  pipe.stream.on('data', onData);
  pipe.stream.on('error', (err) => out.destroy(err));
  sent.catch((err: Error) => { if (remaining > 0) out.destroy(err); });
  out.on('close', () => { if (remaining > 0) finish(); });
  return out;
}

/**
 * The content of the single regular file in an archive-API tar, as a plain Node stream (tar-stream
 * reads the headers, PAX and GNU long names included). Anything else there (a link that replaced
 * the file meanwhile, another size) is refused. The rest of the archive is not read: once the
 * file's bytes are out, or its reader has gone, the engine's stream is closed.
 */
function fileFromTar(archive: Readable, size: number, path: string): Promise<Readable> {
  return new Promise((resolve, reject) => {
    const extract = tar.extract();
    const stop = () => {
      archive.destroy();
      extract.destroy();
    };
    let found = false;
    extract.once('entry', (header, entry) => {
      if (header.type !== 'file' || header.size !== size) {
        stop();
        return reject(new errors.FileOperationFailed(`${path} changed while it was being read; try again`));
      }
      found = true;
      const out = Readable.from(entry, { objectMode: false, highWaterMark: 256 * 1024 });
      out.once('close', stop);
      resolve(out);
    });
    extract.on('finish', () => { if (!found) reject(new errors.FileNotFound(path)); });
    extract.on('error', (err: Error) => { if (!found) reject(err); });
    archive.on('error', (err: Error) => extract.destroy(err));
    archive.pipe(extract as unknown as NodeJS.WritableStream);
  });
}

/** An error of the service's catalogue (core/errors.ts): its code and status are the client's answer already. */
function isCatalogued(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return err instanceof Error && typeof code === 'string' && code.startsWith('SVC_');
}
