import { authorizeSandbox, type Principal } from '../accounts/index.ts';
import { NAME } from '../oci/manifests.ts';
import { splitRepo, type Store } from '../store/index.ts';
import type { RegistryAuth } from './auth.ts';

/**
 * Who may do what in the registry (the one copy of the front's rules): a request's verdict from its
 * method, path, query and credentials alone, before any byte of its body is read. The front carries
 * the verdicts out, and answers HAProxy's question (mayBypass) with the same rules.
 */

/** A registry API path, split: `/v2/<repo>/<what>/<ref>`. */
export type V2Route =
  | { kind: 'ping' }
  | { kind: 'catalog' }
  | { kind: 'manifest'; repo: string; reference: string }
  | { kind: 'blob'; repo: string; digest: string }
  | { kind: 'upload'; repo: string; session: string }
  | { kind: 'tags'; repo: string }
  | { kind: 'referrers'; repo: string; digest: string };

const ROUTE = /^\/v2\/(.+)\/(?:(manifests)\/([^/]+)|(blobs)\/uploads\/?([^/]*)|(blobs)\/([^/]+)|(tags)\/list|(referrers)\/([^/]+))$/;

export function parseV2Path(path: string): V2Route | null {
  if (path === '/v2/' || path === '/v2') return { kind: 'ping' };
  if (path === '/v2/_catalog') return { kind: 'catalog' };
  const m = ROUTE.exec(path);
  if (!m) return null;
  const repo = m[1]!;
  if (m[2]) return { kind: 'manifest', repo, reference: m[3]! };
  if (m[4]) return { kind: 'upload', repo, session: m[5]! };
  if (m[6]) return { kind: 'blob', repo, digest: m[7]! };
  if (m[8]) return { kind: 'tags', repo };
  return { kind: 'referrers', repo, digest: m[10]! };
}

/** What the front does with a request: `authorize`'s answer. */
export type Verdict =
  /** forwarded to the upstream (under `url` if set); `pull` counts a manifest pull; `blobBytes`: a blob's bytes, see mayBypass */
  | { kind: 'proxy'; url?: string; pull?: boolean; blobBytes?: boolean }
  | { kind: 'ping' }
  | { kind: 'challenge'; message: string; scope?: string }
  | { kind: 'refuse'; status: number; code: OciCode; message: string }
  | { kind: 'put-manifest' | 'delete-manifest'; repo: string; reference: string };

export type OciCode = 'UNAUTHORIZED' | 'DENIED' | 'NAME_INVALID' | 'NAME_UNKNOWN' | 'MANIFEST_INVALID' | 'DIGEST_INVALID' | 'SIZE_INVALID' | 'UNSUPPORTED' | 'MANIFEST_UNKNOWN' | 'TAG_INVALID';

export interface RegistryRules {
  authorize(method: string, path: string, query: string, authorization: string | undefined): Promise<Verdict>;
}

export function registryRules({ store, auth }: { store: Store; auth: RegistryAuth }): RegistryRules {
  const owns = async (principal: Principal | null, project: string): Promise<boolean> => {
    if (!principal) return false;
    try {
      await authorizeSandbox(store, principal, project, 'use');
      return true;
    } catch {
      return false;
    }
  };

  /** May the caller read this blob (or manifest) of this repository? */
  const mayPull = async (principal: Principal | null, repo: string, blob?: string): Promise<boolean> => {
    const [project] = splitRepo(repo);
    if (await owns(principal, project)) return true;
    const record = await store.registry.getRepo(repo);
    if (!record?.public) return false;
    return blob === undefined || record.blobs.includes(blob);
  };

  /**
   * Who may do what (the one copy of the front's rules): the verdict on a request from its method,
   * path, query and credentials alone, before any byte of its body is read. Nothing is changed
   * here; the caller carries the verdict out.
   */
  async function authorize(method: string, path: string, query: string, authorization: string | undefined): Promise<Verdict> {
    const route = parseV2Path(path);
    let principal: Principal | null;
    try {
      principal = await auth.principal(authorization);
    } catch (err) {
      return { kind: 'challenge', message: (err as Error).message };
    }
    if (!route) return { kind: 'refuse', status: 404, code: 'UNSUPPORTED', message: `not a registry API path: ${path.slice(0, 200)}` };
    if (route.kind === 'ping') {
      if (!authorization) return { kind: 'challenge', message: 'log in with any user name and an access token (svc_…) as password' };
      return { kind: 'ping' };
    }
    if (route.kind === 'catalog') return { kind: 'refuse', status: 403, code: 'DENIED', message: 'the catalog is not listed; see GET /api/sandboxes/<name>/registry' };
    const { repo } = route;
    if (!NAME.test(repo) || repo.length > 255) {
      return { kind: 'refuse', status: 400, code: 'NAME_INVALID', message: `invalid repository name "${repo.slice(0, 100)}": push to <sandbox>/<image>, lowercase` };
    }
    const [project] = splitRepo(repo);
    const reading = method === 'GET' || method === 'HEAD';
    const scope = `repository:${repo}:${reading ? 'pull' : 'pull,push'}`;

    if (reading) {
      const blob = route.kind === 'blob' ? route.digest : undefined;
      if (await mayPull(principal, repo, blob)) {
        return { kind: 'proxy', pull: route.kind === 'manifest' && method === 'GET', blobBytes: route.kind === 'blob' };
      }
      if (!principal) return { kind: 'challenge', message: `authentication required: ${repo} is private or does not exist`, scope };
      return { kind: 'refuse', status: 404, code: 'NAME_UNKNOWN', message: `repository ${repo} not found` };
    }

    if (!principal) return { kind: 'challenge', message: 'authentication required to push: log in with an access token', scope };
    if (!(await owns(principal, project))) {
      const hint = principal.sandbox ? `this token may only push to ${principal.sandbox}/<image>` : 'push to <one of your sandboxes>/<image>';
      return { kind: 'refuse', status: 403, code: 'DENIED', message: `"${project}" is not one of your sandboxes: ${hint}` };
    }

    if (route.kind === 'manifest' && method === 'PUT') return { kind: 'put-manifest', repo, reference: route.reference };
    if (route.kind === 'manifest' && method === 'DELETE') return { kind: 'delete-manifest', repo, reference: route.reference };
    if (route.kind === 'upload' && method === 'POST') {
      // A cross-repository mount reads a blob of another repository: only one the caller may pull.
      const params = new URLSearchParams(query);
      const from = params.get('from');
      const mount = params.get('mount');
      if (from !== null || mount !== null) {
        if (!from || !mount || !NAME.test(from) || !(await mayPull(principal, from, mount))) {
          params.delete('from');
          params.delete('mount');
          const rest = params.toString();
          return { kind: 'proxy', url: rest ? `${path}?${rest}` : path };
        }
      }
    }
    if (route.kind === 'tags' || route.kind === 'referrers') return { kind: 'refuse', status: 405, code: 'UNSUPPORTED', message: `${method} is not allowed here` };
    // blob uploads, blob deletes: proxied as they are; the bytes of an open upload session
    return { kind: 'proxy', blobBytes: route.kind === 'upload' && route.session !== '' && (method === 'PATCH' || method === 'PUT') };
  }

  return { authorize };
}
