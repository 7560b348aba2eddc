import type { Logger } from '../core/logger.ts';
import type { SandboxRecord, Store, UserRecord } from '../store/index.ts';
import { writeAuthorizedKeys } from './host-commands.ts';
import type { RuntimeState, SandboxRuntime } from './runtime/sandbox-runtime.ts';
import type { SshKeyMarks } from './ssh-key-marks.ts';

/** Each sandbox's authorized_keys kept to its owner's SSH keys: on wake, on a change, and by the reconcile pass. */
export class SshKeySync {
  constructor(
    private readonly parts: {
      store: Store;
      runtime: SandboxRuntime;
      sshKeyMarks: SshKeyMarks;
      log: Logger;
      exclusive: <T>(name: string, work: () => Promise<T>) => Promise<T>;
      status: (name: string) => Promise<RuntimeState>;
    },
  ) {}

  /** Writes the owner's keys into the running sandbox (`known`: the owner the caller read already). */
  async push(record: SandboxRecord, known?: UserRecord): Promise<void> {
    const owner = known ?? (await this.parts.store.users.get(record.owner_id));
    await writeAuthorizedKeys(this.parts.runtime.exec, record.name, (owner?.ssh_keys ?? []).map((k) => k.key).join('\n'));
  }

  /**
   * The owner's SSH keys changed (the store already says so): running sandboxes accept exactly the
   * new set at once; others on wake. Each sandbox on its own: one whose engine does not answer is
   * marked (SshKeyMarks) and the next reconcile pass writes its keys; the others are written now.
   */
  async syncOwner(ownerId: string): Promise<void> {
    for (const record of await this.parts.store.sandboxes.listByOwner(ownerId)) {
      if (record.archived_at) continue;
      try {
        await this.pushIfRunning(record);
      } catch (err) {
        this.parts.log.warn({ sandbox: record.name, err }, 'SSH keys not written; the next reconcile pass writes them');
        await this.parts.sshKeyMarks.mark(record.name);
      }
    }
  }

  /** A reconcile pass: a marked sandbox gets its owner's keys now if it runs (a sleeping one gets them on wake). */
  async pushMarked(record: SandboxRecord, running: boolean): Promise<void> {
    if (!(await this.parts.sshKeyMarks.take(record.name))) return;
    try {
      if (running) await this.pushIfRunning(record);
    } catch (err) {
      await this.parts.sshKeyMarks.mark(record.name);
      throw err;
    }
  }

  private pushIfRunning(record: SandboxRecord): Promise<void> {
    return this.parts.exclusive(record.name, async () => {
      if ((await this.parts.status(record.name)).status === 'running') await this.push(record);
    });
  }
}
