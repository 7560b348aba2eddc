import type { Backend, Collection } from './kv.ts';

/** Scan state of one manifest (a "version" of an image) or of one layer. */
export type ScanState = 'pending' | 'scanning' | 'clean' | 'flagged' | 'unscannable';

/** One thing a scan found. Never carries the secret's value: only where it is and which rule. */
export interface Finding {
  /** Path inside the layer (no leading `/`), or `config:Env[i]` / `config:history[i]` for the image config. */
  path: string;
  /** Digest of the layer (or of the config blob) the finding is in. */
  layer: string;
  rule: string;
  /** 1-based line in the file of a content finding. */
  line?: number;
  /** Short hash of the secret (of the file for a file-name rule): the same secret has it in every version. */
  fingerprint?: string;
  /** The file is in a package folder (node_modules, site-packages, vendor…). */
  vendored?: true;
  /** `low`: the generic rule was not sure (a bare hash, a UUID, a name that only says key); the image stays private all the same. */
  confidence?: 'low';
  /** For an index: the digest of the child manifest the finding came from. */
  manifest?: string;
  /** Rule `owner-secret`: the name of the owner's secret whose value stands there (issue 35). */
  secret?: string;
  /** Rule `owner-secret` in a layer: the layer's place in the image, 1-based. */
  layer_index?: number;
}

/** The result of scanning one layer blob, kept by digest and reused by every image that has it. */
export interface LayerScanRecord {
  digest: string;
  state: 'clean' | 'flagged' | 'unscannable';
  findings: Array<Omit<Finding, 'layer' | 'manifest'>>;
  reason?: string;
  /** Version of the rules the layer was read with; a layer read under other rules is read again. */
  rules?: string;
  compressed_bytes: number;
  bytes: number;
  entries: number;
  ms: number;
  scanned_at: string;
}

export interface ScanProgress {
  layers_total: number;
  layers_done: number;
  bytes_read: number;
}

/** One manifest pushed to a repository: an image manifest, or an index (multi-platform). */
export interface VersionRecord {
  repo: string;
  digest: string;
  media_type: string;
  kind: 'image' | 'index';
  size: number;
  tags: string[];
  pushed_at: string;
  state: ScanState;
  findings: Finding[];
  /** Why a version is unscannable (or a note on a flagged one). */
  reason?: string;
  progress?: ScanProgress;
  /** Config and layer digests (an image), so pulls of a public image reach only its own blobs. */
  blobs: string[];
  /** Child manifest digests (an index). */
  children?: string[];
  /** Set on a child of an index: the index digests that reference it. */
  platform?: string;
  scan_started_at?: string;
  scanned_at?: string;
}

/** A repository `<project>/<image>`: its visibility, recomputed from its versions on every change. */
export interface RepoRecord {
  repo: string;
  project: string;
  image: string;
  public: boolean;
  reason: string;
  /** Blob digests of every version; a public image serves only these. */
  blobs: string[];
  updated_at: string;
}

export interface RegistryStore {
  getRepo(repo: string): Promise<RepoRecord | undefined>;
  putRepo(r: RepoRecord): Promise<void>;
  deleteRepo(repo: string): Promise<void>;
  /** Repositories of a project (a sandbox name), by name. */
  listRepos(project: string): Promise<RepoRecord[]>;
  getVersion(repo: string, digest: string): Promise<VersionRecord | undefined>;
  putVersion(v: VersionRecord): Promise<void>;
  deleteVersion(repo: string, digest: string): Promise<void>;
  listVersions(repo: string): Promise<VersionRecord[]>;
  getLayer(digest: string): Promise<LayerScanRecord | undefined>;
  putLayer(l: LayerScanRecord): Promise<void>;
}

/** `<project>/<image>` → [project, image]; the image part may itself contain `/`. */
export function splitRepo(repo: string): [string, string] {
  const i = repo.indexOf('/');
  return i < 0 ? [repo, ''] : [repo.slice(0, i), repo.slice(i + 1)];
}

/**
 * Keys: `registry-repos:<project>:<image>` → repo; `registry-versions:<repo>:<digest>` → version;
 * `registry-layers:<digest>` → layer scan. Every key is its own row, so writers in several
 * processes (fronts, scan workers) never rewrite each other's lists.
 */
export async function registryStore(backend: Backend): Promise<RegistryStore> {
  const repos: Collection<RepoRecord> = await backend.collection<RepoRecord>('registry-repos');
  const versions: Collection<VersionRecord> = await backend.collection<VersionRecord>('registry-versions');
  const layers: Collection<LayerScanRecord> = await backend.collection<LayerScanRecord>('registry-layers');

  return {
    getRepo: (repo) => repos.get(splitRepo(repo)),
    putRepo: (r) => repos.set(splitRepo(r.repo), r),
    deleteRepo: (repo) => repos.delete(splitRepo(repo)),
    async listRepos(project) {
      return (await repos.scan([project])).map((e) => e.value).sort((a, b) => (a.repo < b.repo ? -1 : a.repo > b.repo ? 1 : 0));
    },
    getVersion: (repo, digest) => versions.get([repo, digest]),
    putVersion: (v) => versions.set([v.repo, v.digest], v),
    deleteVersion: (repo, digest) => versions.delete([repo, digest]),
    async listVersions(repo) {
      return (await versions.scan([repo])).map((e) => e.value).sort((a, b) => (a.pushed_at < b.pushed_at ? -1 : a.pushed_at > b.pushed_at ? 1 : 0));
    },
    getLayer: (digest) => layers.get([digest]),
    putLayer: (l) => layers.set([l.digest], l),
  };
}
