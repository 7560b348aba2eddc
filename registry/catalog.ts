import { KeyedLock, type CrossProcessLock } from '../core/keyed-lock.ts';
import type { Logger } from '../core/logger.ts';
import { type RepoRecord, type Store, type VersionRecord, splitRepo } from '../store/index.ts';
import type { ParsedManifest } from '../oci/manifests.ts';

/**
 * What the service knows about pushed images, and the visibility rule (issue 4, spec 4.4 item 3):
 * a repository is public only when it has versions and every one was scanned and is clean; a
 * pending, flagged or unscannable version keeps it private until that version is deleted.
 * The repository record caches the decision; it is recomputed from the versions on every change
 * (push, scan result, delete), under a per-repository lock across every registry front.
 */
export class Catalog {
  private readonly locks: KeyedLock;

  /** @param across the lease that orders the service processes (a Redis lease per repository) */
  constructor(private readonly store: Store, private readonly logger: Logger, across?: CrossProcessLock) {
    this.locks = new KeyedLock(across);
  }

  /** Serialises changes to one repository, in this process and across processes. */
  withRepo<T>(repo: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(repo, fn);
  }

  /**
   * Before a manifest reaches the upstream: the version is recorded as pending and the repository
   * made private, so there is no moment where a new, unscanned version is public.
   */
  async beginPush(repo: string, manifest: ParsedManifest & { digest: string }, size: number, tag: string | undefined): Promise<{ previous?: VersionRecord }> {
    return this.withRepo(repo, async () => {
      const previous = await this.store.registry.getVersion(repo, manifest.digest);
      const now = new Date().toISOString();
      const version: VersionRecord = {
        repo,
        digest: manifest.digest,
        media_type: manifest.mediaType,
        kind: manifest.kind,
        size,
        tags: [...new Set([...(previous?.tags ?? []), ...(tag ? [tag] : [])])].sort(),
        pushed_at: now,
        state: 'pending',
        findings: [],
        blobs: manifest.kind === 'image' ? [manifest.config.digest, ...manifest.layers.map((l) => l.digest)] : [],
        ...(manifest.kind === 'index' ? { children: manifest.manifests.map((m) => m.digest) } : {}),
        ...(previous?.platform ? { platform: previous.platform } : {}),
      };
      await this.store.registry.putVersion(version);
      await this.recompute(repo);
      return previous ? { previous } : {};
    });
  }

  /** The upstream accepted the manifest: a tag now names only this version. */
  async commitPush(repo: string, digest: string, tag: string | undefined): Promise<void> {
    await this.withRepo(repo, async () => {
      if (tag) {
        for (const v of await this.store.registry.listVersions(repo)) {
          if (v.digest !== digest && v.tags.includes(tag)) await this.store.registry.putVersion({ ...v, tags: v.tags.filter((t) => t !== tag) });
        }
      }
    });
  }

  /** The upstream refused the manifest: put back what was there before. */
  async abortPush(repo: string, digest: string, previous: VersionRecord | undefined): Promise<void> {
    await this.withRepo(repo, async () => {
      if (previous) await this.store.registry.putVersion(previous);
      else await this.store.registry.deleteVersion(repo, digest);
      await this.recompute(repo);
    });
  }

  /** The upstream deleted the manifest (and its tags). */
  async deleted(repo: string, digest: string): Promise<void> {
    await this.withRepo(repo, async () => {
      await this.store.registry.deleteVersion(repo, digest);
      const repoRecord = await this.recompute(repo);
      this.logger.info({ repo, digest, public: repoRecord?.public ?? false }, 'registry: version deleted');
    });
  }

  /** A scan changed a version: store it and re-decide the repository. */
  async updateVersion(repo: string, digest: string, change: (v: VersionRecord) => VersionRecord): Promise<VersionRecord | undefined> {
    return this.withRepo(repo, async () => {
      const current = await this.store.registry.getVersion(repo, digest);
      if (!current) return undefined; // deleted meanwhile
      const next = change(current);
      await this.store.registry.putVersion(next);
      if (next.state !== current.state) await this.recompute(repo);
      return next;
    });
  }

  /** Re-decides a repository's visibility from its versions. No versions left: the record goes. */
  async recompute(repo: string): Promise<RepoRecord | undefined> {
    const versions = await this.store.registry.listVersions(repo);
    if (versions.length === 0) {
      await this.store.registry.deleteRepo(repo);
      return undefined;
    }
    const [project, image] = splitRepo(repo);
    const { public: isPublic, reason } = decide(versions);
    const record: RepoRecord = {
      repo,
      project,
      image,
      public: isPublic,
      reason,
      blobs: [...new Set(versions.flatMap((v) => v.blobs))],
      updated_at: new Date().toISOString(),
    };
    const before = await this.store.registry.getRepo(repo);
    await this.store.registry.putRepo(record);
    if (before?.public !== record.public) this.logger.info({ repo, public: record.public, reason }, 'registry: visibility changed');
    return record;
  }
}

function label(v: VersionRecord): string {
  return v.tags.length ? `${v.digest.slice(0, 19)}… (${v.tags.join(', ')})` : `${v.digest.slice(0, 19)}…`;
}

/** The visibility rule, with the reason a person reads in the report. */
export function decide(versions: VersionRecord[]): { public: boolean; reason: string } {
  const flagged = versions.filter((v) => v.state === 'flagged');
  if (flagged.length) {
    return { public: false, reason: `private: version ${flagged.map(label).join(', ')} carries secrets (${flagged.reduce((n, v) => n + v.findings.length, 0)} findings); delete ${flagged.length > 1 ? 'those versions' : 'that version'} to make the image public` };
  }
  const unscannable = versions.filter((v) => v.state === 'unscannable');
  if (unscannable.length) {
    return { public: false, reason: `private: version ${unscannable.map(label).join(', ')} could not be scanned (${unscannable[0]!.reason ?? 'unknown reason'}); delete it to make the image public` };
  }
  const pending = versions.filter((v) => v.state === 'pending' || v.state === 'scanning');
  if (pending.length) return { public: false, reason: `private until the scan of ${pending.map(label).join(', ')} finishes` };
  return { public: true, reason: `public: all ${versions.length} version${versions.length > 1 ? 's were' : ' was'} scanned and clean` };
}
