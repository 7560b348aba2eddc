/**
 * Shell scripts that run inside the sandbox container, one per file operation, served by a
 * long-lived shell (SHELL_SERVER, see script-runner.ts). Each checks its path and does the work
 * in the same command, so nothing can change between check and use:
 *
 * - every path is resolved with `realpath -e` and must stay inside the allowed top folder ($ROOT);
 *   a symbolic link that leads out of it is refused, never followed;
 * - writes and deletes first `cd -P` into the resolved parent folder (pinning it) and then act on
 *   `./<name>`: `rm` and `mv` act on a link itself, not on what it points to;
 * - uploads are written by `cat` from a transfer pipe (transfer-pipes.ts) into a new file beside
 *   the target, then put in its place (publish);
 * - a file's download is written by `cat` into a transfer pipe; a folder's goes through the
 *   engine's archive API (what `docker cp` uses) at the real path printed by SEND or LOCATE: the
 *   engine resolves it inside the container, and stores links in a tar as links.
 *
 * Arguments are passed as separate arguments, never spliced into the script. Exit codes:
 * 10 not found, 11 leads outside $ROOT, 12 not a folder, 13 is a folder, 14 not a regular file,
 * 15 too large for a text read, 16 write failed, 17 exists and is not a folder, 18 an upload
 * arrived incomplete (its size on stderr), 19 a file changed while it was read.
 */

const PRELUDE = String.raw`
set -u
ROOT=$1; shift
fail() { c=$1; shift; printf '%s' "$*" >&2; exit "$c"; }
inside() { case "$1" in "$ROOT"|"$ROOT"/*) return 0;; esac; return 1; }
[ -d "$ROOT" ] && [ "$(realpath -e -- "$ROOT" 2>/dev/null)" = "$ROOT" ] || fail 10 "$ROOT"
enter() {
  t=$(realpath -e -- "$1" 2>/dev/null) || fail 10 "$1"
  inside "$t" || fail 11 "$t"
  [ -d "$t" ] || fail 12 "$1"
  cd -P -- "$t" 2>/dev/null || fail 10 "$1"
  inside "$(pwd -P)" || fail 11 "$(pwd -P)"
}
resolve() {
  t=$(realpath -e -- "$1" 2>/dev/null) || fail 10 "$1"
  inside "$t" || fail 11 "$t"
}
`;


/** Args: ROOT DIR. Entries as `type \t size \t mtime \t name \0`. */
const LIST = String.raw`
enter "$1"
exec find . -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%T@\t%P\0'
`;

/** Args: ROOT PATH MAX. Prints at most MAX+1 bytes of the file. */
const READ_TEXT = String.raw`
resolve "$1"
[ -d "$t" ] && fail 13 "$1"
[ -f "$t" ] || fail 14 "$1"
s=$(stat -c %s -- "$t") || fail 10 "$1"
[ "$s" -le "$2" ] || fail 15 "$s"
exec head -c "$(($2 + 1))" -- "$t"
`;

/** Args: ROOT PATH. Prints `F <size>\n<real path>` or `D\n<real path>` for the archive API. */
const LOCATE = String.raw`
resolve "$1"
if [ -d "$t" ]; then printf 'D\n%s' "$t"; exit 0; fi
[ -f "$t" ] || fail 14 "$1"
s=$(stat -c %s -- "$t") || fail 10 "$1"
printf 'F %s\n%s' "$s" "$t"
`;

/**
 * Args: ROOT PATH PIPE. A file: sends notice `file <size>`, then its bytes into PIPE; exit 19 when
 * its size changed while it was read. A folder: prints `D\n<real path>` (for the archive API).
 */
const SEND = String.raw`
resolve "$1"
if [ -d "$t" ]; then printf 'D\n%s' "$t"; exit 0; fi
[ -f "$t" ] || fail 14 "$1"
command exec 3<"$t" || fail 10 "$1"
s=$(stat -L -c %s /dev/fd/3) || fail 10 "$1"
[ -p "$2" ] || fail 16 "the transfer pipe $2 is missing"
exec 4>"$2"
printf '+file %s\n' "$s" >&9
cat <&3 >&4 || fail 16 "reading $1 failed"
[ "$(stat -L -c %s /dev/fd/3)" = "$s" ] || fail 19 "$1 changed while it was read"
`;

/**
 * publish NAME TMP: puts TMP in place of NAME. TMP was made by root with mode 0644 (umask 022),
 * so only a set-group-ID folder calls for a chown to root's group. Then it sweeps the folder of
 * uploads that a crash left behind (untouched for an hour: a live upload's file changes with
 * every write, and a silent client is cut after a minute).
 *
 * A regular file in the way is first moved aside, then removed in the background. Renaming
 * straight over it would make ext4 write the new file out at once (auto_da_alloc) and free the
 * old one's blocks before answering: 100-200 ms for 100 MB here. So the name is missing for
 * the moment between two renames, but it never shows a partial file.
 */
const PUBLISH = String.raw`
publish() {
  if [ -g . ]; then chown 0:0 -- "./$2" || { rm -f -- "./$2"; fail 16 "giving the upload to root failed"; }; fi
  if [ -f "./$1" ] && [ ! -L "./$1" ] && mv -f -T -- "./$1" "./$2.old"; then
    mv -f -T -- "./$2" "./$1" || { mv -f -T -- "./$2.old" "./$1"; rm -f -- "./$2"; fail 16 "renaming the upload failed"; }
    rm -f -- "./$2.old" </dev/null >/dev/null 2>&1 9>&- &
  else
    mv -f -T -- "./$2" "./$1" || { rm -f -- "./$2"; fail 16 "renaming the upload failed"; }
  fi
  find . -maxdepth 1 -type f -name '.svc-upload-*' -mmin +60 -delete 2>/dev/null || true
}
`;

/**
 * Args: ROOT DIR NAME TMP SOURCE [SIZE]. Writes SOURCE (a transfer pipe, or - for stdin) to a new
 * file DIR/TMP and prints its size. Once it holds the pipe open it says so (notice `reading`): the
 * pipe's bytes last only while one of its ends is open, so the service keeps its end until then. With SIZE it also publishes it as NAME when exactly SIZE bytes
 * arrived, and removes it otherwise (exit 18): an upload of known length is one operation.
 */
const UPLOAD_WRITE = PUBLISH + String.raw`
enter "$1"
if [ -d "./$2" ] && [ ! -L "./$2" ]; then fail 13 "$2"; fi
if [ "$4" != - ]; then
  [ -p "$4" ] || fail 16 "the transfer pipe $4 is missing"
  exec <"$4"
  printf '+reading\n' >&9
fi
umask 022
set -C
cat > "./$3" || { rm -f -- "./$3"; fail 16 "writing $3 failed"; }
s=$(stat -c %s -- "./$3") || fail 16 "the uploaded data is gone"
if [ $# -ge 5 ]; then
  [ "$s" = "$5" ] || { rm -f -- "./$3"; fail 18 "$s"; }
  publish "$2" "$3"
fi
printf '%s' "$s"
`;

/** The upload that streams into the command's stdin, for sandboxes made before transfer pipes. */
export const UPLOAD_WRITE_STDIN = PRELUDE + UPLOAD_WRITE;

/** Args: ROOT DIR NAME TMP SIZE. Publishes an upload of unknown length once it is all there. */
const UPLOAD_COMMIT = PUBLISH + String.raw`
enter "$1"
{ [ -f "./$3" ] && [ ! -L "./$3" ]; } || fail 16 "the uploaded data is gone"
[ "$(stat -c %s -- "./$3")" = "$4" ] || { rm -f -- "./$3"; fail 16 "the upload arrived incomplete"; }
if [ -d "./$2" ] && [ ! -L "./$2" ]; then rm -f -- "./$3"; fail 13 "$2"; fi
publish "$2" "$3"
`;

/** Args: ROOT DIR TMP. Removes an unfinished upload. */
const UPLOAD_ABORT = String.raw`
enter "$1"
rm -f -- "./$2"
`;

/**
 * Args: ROOT COMPONENT… Creates each missing folder below ROOT (root:root, 0644). A name that
 * another operation made between the check and the mkdir counts as existing, and is checked
 * like one (it may be a link or a file by then).
 */
const MKDIR = String.raw`
cd -P -- "$ROOT" || fail 10 "$ROOT"
umask 0133
for c in "$@"; do
  if [ ! -e "./$c" ] && [ ! -L "./$c" ]; then
    if e=$(mkdir -m 0644 -- "./$c" 2>&1); then
      chown 0:0 -- "./$c" || fail 16 "creating $c failed"
    elif [ ! -e "./$c" ] && [ ! -L "./$c" ]; then
      fail 16 "creating $c failed: $e"
    fi
  fi
  t=$(realpath -e -- "./$c" 2>/dev/null) || fail 10 "$c"
  inside "$t" || fail 11 "$t"
  [ -d "$t" ] || fail 17 "$c"
  cd -P -- "$t" || fail 10 "$c"
  inside "$(pwd -P)" || fail 11 "$(pwd -P)"
done
`;

/** Args: ROOT DIR NAME. Deletes DIR/NAME: a file, a link (not its target), or a folder with its content. */
const DELETE = String.raw`
enter "$1"
[ -e "./$2" ] || [ -L "./$2" ] || fail 10 "$2"
rm -rf -- "./$2" || fail 16 "deleting $2 failed"
`;

/** The operations SHELL_SERVER answers, by name. */
export const OPERATIONS = { LIST, READ_TEXT, LOCATE, SEND, UPLOAD_WRITE, UPLOAD_COMMIT, UPLOAD_ABORT, MKDIR, DELETE } as const;
export type Operation = keyof typeof OPERATIONS;

/**
 * A shell that answers operations one at a time, each in its own subshell, so an operation costs
 * a few forks instead of a `docker exec` (50–80 ms of runc set-up each). Request: a line
 * `<operation> <argc>`, then one line per argument (arguments never hold a newline:
 * parseSandboxPath refuses control characters). Reply: a line `<exit code> <stdout bytes>
 * <stderr bytes>`, then those bytes; before it, an operation may send notices, lines starting
 * with `+`, on fd 9. It ends when its stdin does.
 */
export const SHELL_SERVER = [
  ...Object.entries(OPERATIONS).map(([name, body]) => `op_${name}() (${PRELUDE}${body})`),
  String.raw`
d=$(mktemp -d /tmp/.svc-files-XXXXXX) || exit 1
trap 'rm -rf -- "$d"' EXIT
while IFS=' ' read -r op n; do
  set --
  while [ "$n" -gt 0 ]; do IFS= read -r a || exit 0; set -- "$@" "$a"; n=$((n - 1)); done
  case $op in
    ${Object.keys(OPERATIONS).join('|')}) "op_$op" "$@" 9>&1 </dev/null >"$d/o" 2>"$d/e"; c=$?;;
    *) printf 'unknown operation %s' "$op" >"$d/e"; : >"$d/o"; c=2;;
  esac
  printf '%s %s %s\n' "$c" "$(stat -c %s "$d/o")" "$(stat -c %s "$d/e")"
  cat "$d/o" "$d/e"
done`,
].join('\n');
