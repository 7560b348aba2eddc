import { errors } from '../core/errors.ts';

/** The four persistent folders of spec 4.2; `/root` is the default. */
export const FOLDERS = ['/root', '/home', '/srv', '/opt'] as const;
export const DEFAULT_FOLDER = '/root';
/** Where the inner engine keeps local volumes; only `<volume>/_data` below it is file area. */
export const VOLUMES_DIR = '/var/lib/docker/volumes';
const VOLUME_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const MAX_PATH = 4096;

/** A path the file routes may use, split into its allowed top folder and the rest. */
export interface SandboxPath {
  /** Normalised absolute path. */
  path: string;
  /** The allowed folder it lies in: one of FOLDERS or a volume's `_data`. */
  root: string;
  /** Components below `root`; empty for the top folder itself. */
  parts: string[];
}

/**
 * Checks a client's path against spec 4.2 before anything runs in the sandbox. Relative paths
 * are taken from /root; `.` and empty components are dropped; `..` is refused outright (never
 * resolved, so `/root/../etc` cannot become `/etc`), as are control characters (newline, NUL).
 * Symbolic links are checked later, inside the sandbox, in the same command as the operation.
 */
export function parseSandboxPath(input: string | undefined): SandboxPath {
  const raw = input === undefined || input === '' ? DEFAULT_FOLDER : input;
  if (raw.length > MAX_PATH) throw new errors.BadPath(`longer than ${MAX_PATH} characters`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(raw)) throw new errors.BadPath('control characters (newline, NUL, tab…) are not allowed in paths');
  const absolute = raw.startsWith('/') ? raw : `${DEFAULT_FOLDER}/${raw}`;
  const parts = absolute.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new errors.BadPath(`"${raw}" contains "..": give the path without it`);
  const path = '/' + parts.join('/');

  if (parts.length >= 1 && (FOLDERS as readonly string[]).includes('/' + parts[0])) {
    return { path, root: '/' + parts[0], parts: parts.slice(1) };
  }
  const volumeDirParts = VOLUMES_DIR.split('/').filter(Boolean);
  if (
    parts.length >= volumeDirParts.length + 2 &&
    volumeDirParts.every((p, i) => parts[i] === p) &&
    VOLUME_NAME.test(parts[volumeDirParts.length]!) &&
    parts[volumeDirParts.length + 1] === '_data'
  ) {
    const n = volumeDirParts.length + 2;
    return { path, root: '/' + parts.slice(0, n).join('/'), parts: parts.slice(n) };
  }
  throw new errors.PathNotAllowed(path);
}

/** A component name for a new file or folder: what parseSandboxPath allows, and not empty. */
export function leafName(p: SandboxPath, what: string): string {
  const leaf = p.parts.at(-1);
  if (leaf === undefined) throw new errors.BadPath(`${p.path} is a top folder; ${what} needs a path below it`);
  if (Buffer.byteLength(leaf) > 255) throw new errors.BadPath('a name is longer than 255 bytes');
  return leaf;
}
