import type { Config } from '../core/config.ts';
import type { Store, SandboxRecord } from '../store/index.ts';
import { probe, type AppDirectory } from './apps/app-directory.ts';
import type { AppEntry } from './apps/app-labels.ts';
import { managerExtras } from './manager-access.ts';
import type { SandboxRuntime, SandboxState } from './runtime/sandbox-runtime.ts';
import type { IdleSessions } from './sessions.ts';
import { fullView, summarise, type SandboxSummary, type SandboxView } from './view.ts';

/** The records of spec 2.1 as the API shows them: record, engine state, session and apps together. */
export class SandboxViews {
  constructor(
    private readonly parts: {
      config: Config;
      store: Store;
      sessions: IdleSessions;
      apps: AppDirectory;
      /** The engine's state of a sandbox, `unavailable` when it cannot be asked: one such sandbox fails no list. */
      state: (name: string) => Promise<SandboxState>;
      runtime: Pick<SandboxRuntime, 'hostOf'>;
    },
  ) {}

  private get ctx() {
    return { domain: this.parts.config.domain, httpsPort: this.parts.config.httpsPort };
  }

  appUrl(label: string): string {
    const { domain, httpsPort } = this.parts.config;
    return `https://${label}.${domain}${httpsPort === 443 ? '' : `:${httpsPort}`}`;
  }

  /** The sandbox's app addresses, each with the container and published port it goes to. */
  appAddresses(name: string): Array<AppEntry & { url: string }> {
    return this.parts.apps.appsOf(name).map((a) => ({ ...a, url: this.appUrl(a.label) }));
  }

  /** The host the sandbox runs on (the admins' list); null when its engine did not say in time. */
  hostOf(name: string): Promise<string | null> {
    return this.parts.runtime.hostOf(name);
  }

  async view(record: SandboxRecord): Promise<SandboxView> {
    const [state, session, owner] = await Promise.all([
      this.parts.state(record.name),
      this.parts.sessions.get(record.name),
      this.parts.store.users.get(record.owner_id),
    ]);
    const entries = this.parts.apps.appsOf(record.name);
    const apps = await Promise.all(
      entries.map(async (a) => ({
        url: this.appUrl(a.label),
        answers: state.status === 'running' && state.address ? await probe(state.address, a.hostPort) : false,
        ...(a.visibility ? { visibility: a.visibility } : {}),
      })),
    );
    const extras = managerExtras(record, entries, (label) => this.appUrl(label));
    return fullView(record, owner?.name ?? record.owner_id, state, session, apps, this.ctx, extras);
  }

  /** Summaries of `records` (their secrets need not be there); the idle session is read for running ones only. */
  async list(records: SandboxRecord[]): Promise<SandboxSummary[]> {
    return Promise.all(
      records
        .filter((r) => !r.archived_at)
        .map(async (r) => {
          const state = await this.parts.state(r.name);
          const session = state.status === 'running' ? await this.parts.sessions.get(r.name) : null;
          return summarise(r, state, session, this.parts.apps.appsOf(r.name).map((a) => this.appUrl(a.label)), this.ctx);
        }),
    );
  }
}
