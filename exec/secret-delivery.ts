import { pack } from 'tar-stream';
import { KeyedLock } from '../core/keyed-lock.ts';
import type { Logger } from '../core/logger.ts';
import { mapLimited } from '../core/map-limited.ts';
import type { Lifecycle, SandboxExecutor, SandboxRuntime } from '../lifecycle/index.ts';
import type { Store } from '../store/index.ts';

/** Where a sandbox holds its secrets: a tmpfs (memory only) the service mounts, one file per secret. */
export const SECRETS_DIR = '/run/svc/secrets';
/** Sourced by exec and terminal sessions: `export NAME='value'` lines. */
const ENV_SH = '.env.sh';
/** sshd's ~/.ssh/environment format (NAME=value, one a line), which root's ~/.ssh/environment links to. */
const SSH_ENV = '.ssh-environment';

/**
 * What the service runs in the sandbox to put its secrets in place, the tar of them on stdin:
 * - the tmpfs is mounted once per container start (it goes with the container: never on a volume,
 *   never in an image or a `docker inspect`); files 0444 in a 0711 folder, so an app of an inner
 *   container that runs as another user can read the file compose mounts for it;
 * - a file that exists is rewritten in place, never replaced: an inner container that bind-mounts it
 *   (compose `secrets:` with `file:`) keeps the same inode and sees the new value; secrets no
 *   longer given are removed;
 * - sshd reads root's ~/.ssh/environment at each login once PermitUserEnvironment is on (written
 *   into the container's sshd_config.d, sshd told with SIGHUP once): the link points into the tmpfs.
 */
const INSTALL = `set -eu
d=${SECRETS_DIR}
mkdir -p "$d"
grep -qs " $d tmpfs " /proc/mounts || mount -t tmpfs -o mode=0711,size=16m,nosuid,nodev,noexec svc-secrets "$d"
t=$(mktemp -d "$d/.new.XXXXXX")
tar -x -C "$t" -f -
for f in "$t"/* "$t"/.env.sh "$t"/.ssh-environment; do
  [ -f "$f" ] || continue
  n=\${f##*/}
  [ -f "$d/$n" ] || : > "$d/$n"
  chmod 0444 "$d/$n"
  cat "$f" > "$d/$n"
done
for f in "$d"/*; do
  [ -f "$f" ] || continue
  [ -e "$t/\${f##*/}" ] || rm -f "$f"
done
rm -rf "$t"
mkdir -p /root/.ssh
chmod 0700 /root/.ssh
[ "$(readlink /root/.ssh/environment 2>/dev/null || :)" = "$d/${SSH_ENV}" ] || ln -sfn "$d/${SSH_ENV}" /root/.ssh/environment
c=/etc/ssh/sshd_config.d/svc-secrets.conf
if [ ! -f "$c" ]; then
  echo 'PermitUserEnvironment yes' > "$c"
  [ -f /run/sshd.pid ] && kill -HUP "$(cat /run/sshd.pid)" || :
fi
`;

/** The shell that runs a session's command with the secrets in its environment (`exec "$@"` after). */
export const WITH_SECRETS = ['sh', '-c', `[ -r ${SECRETS_DIR}/${ENV_SH} ] && . ${SECRETS_DIR}/${ENV_SH}; exec "$@"`, 'svc-session'];

const shellQuote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

/** The files of a sandbox's secrets: one per secret, the shell's and sshd's environment files. */
export async function secretFiles(secrets: ReadonlyArray<{ name: string; value: string }>): Promise<Buffer> {
  const tar = pack();
  for (const { name, value } of secrets) tar.entry({ name, mode: 0o444 }, value);
  tar.entry({ name: ENV_SH, mode: 0o444 }, secrets.map(({ name, value }) => `export ${name}=${shellQuote(value)}\n`).join(''));
  // sshd takes the rest of a line as the value: a value of several lines is only in its file
  tar.entry({ name: SSH_ENV, mode: 0o444 }, secrets.filter(({ value }) => !/[\r\n]/.test(value)).map(({ name, value }) => `${name}=${value}\n`).join(''));
  tar.finalize();
  const chunks: Buffer[] = [];
  for await (const c of tar) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * Puts each sandbox's secrets in place through the runtime's exec: when a secret changes (every
 * running sandbox of the owner, at once), after a start (the tmpfs went with the old container), and
 * before a session (exec, terminal) when this process has not written the current ones since the
 * sandbox started. Which secrets a sandbox has is remembered as their version (`versionFor`), so a
 * session that finds them current costs one store read.
 */
export class SecretDelivery {
  /** The version written to each running sandbox by this process since it started. */
  private readonly written = new Map<string, string>();
  /** Each sandbox's owner, as its record says. */
  private readonly owners = new Map<string, string>();
  /** One write at a time per sandbox, each of the version current when it begins. */
  private readonly writes = new KeyedLock();

  constructor(
    private readonly deps: { store: Store; exec: SandboxExecutor; lifecycle: Pick<Lifecycle, 'status'>; logger: Logger },
  ) {}

  /** Before a session: writes the sandbox's secrets if they are not the current ones. */
  async ensure(sandbox: string): Promise<void> {
    const ownerId = await this.ownerOf(sandbox);
    if (!ownerId) return;
    const version = await this.deps.store.secrets.versionFor(ownerId, sandbox);
    // nothing written and nothing to write: a sandbox of an owner without secrets costs no exec
    if ((this.written.get(sandbox) ?? '') === version) return;
    await this.write(sandbox, ownerId);
  }

  /** A sandbox's owner never changes: its record is read once per process, not at every start (a wake reads it once: issue 33). */
  private async ownerOf(sandbox: string): Promise<string | undefined> {
    const known = this.owners.get(sandbox);
    if (known) return known;
    const record = await this.deps.store.sandboxes.get(sandbox);
    if (record) this.owners.set(sandbox, record.owner_id);
    return record?.owner_id;
  }

  /** After a start: the container's tmpfs is new. Only an owner with secrets costs an exec. */
  async started(sandbox: string): Promise<void> {
    this.written.delete(sandbox);
    await this.ensure(sandbox);
  }

  /** After a change of the owner's secrets: every running sandbox of theirs, a few at a time. */
  async changed(ownerId: string): Promise<void> {
    const sandboxes = (await this.deps.store.sandboxes.listByOwner(ownerId, { secrets: false })).filter((s) => !s.archived_at);
    await mapLimited(sandboxes, 4, async ({ name }) => {
      const { status } = await this.deps.lifecycle.status(name).catch(() => ({ status: 'unavailable' }));
      if (status !== 'running') { this.written.delete(name); return; }
      await this.write(name, ownerId).catch((err) => this.deps.logger.warn({ sandbox: name, err: (err as Error).message }, 'secrets not written; the next session or start writes them'));
    });
  }

  private write(sandbox: string, ownerId: string): Promise<void> {
    return this.writes.run(sandbox, async () => {
      const version = await this.deps.store.secrets.versionFor(ownerId, sandbox);
      const files = await secretFiles(await this.deps.store.secrets.valuesFor(ownerId, sandbox));
      const result = await this.deps.exec.run(sandbox, ['sh', '-c', INSTALL], files);
      if (result.exitCode !== 0) throw new Error(`writing the secrets failed (exit ${result.exitCode}): ${result.stderr.slice(0, 500)}`);
      this.written.set(sandbox, version);
      this.deps.logger.debug({ sandbox }, 'secrets written');
    });
  }
}

/**
 * The runtime the lifecycle drives, with the secrets written after each start it makes (a wake, a
 * create, a start through the API): the start answers at once, the write follows (a session waits
 * for it through `ensure`).
 */
export function deliveringSecrets(runtime: SandboxRuntime, delivery: SecretDelivery, logger: Logger): SandboxRuntime {
  return new Proxy(runtime, {
    get(target, prop) {
      if (prop === 'start') {
        return async (name: string) => {
          const state = await target.start(name);
          void delivery.started(name).catch((err) => logger.warn({ sandbox: name, err: (err as Error).message }, 'secrets not written after start; the next session writes them'));
          return state;
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
