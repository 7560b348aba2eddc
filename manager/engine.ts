import http from 'node:http';
import { boundedRequest } from '../core/bounded-request.ts';
import { COMPOSE_PROJECT as PROJECT_LABEL } from '../core/compose-labels.ts';

const MAX_LIST_BYTES = 16 * 1024 * 1024;

/** The engine the tool manages, over its unix socket (mounted into the tool's container). */
export class Engine {
  constructor(readonly socketPath: string) {}

  /** A raw request to the engine API; the caller streams the body and reads the answer. */
  request(method: string, path: string, headers: http.OutgoingHttpHeaders): http.ClientRequest {
    return http.request({ socketPath: this.socketPath, method, path, headers });
  }

  async json<T>(path: string): Promise<T> {
    const { status, text } = await boundedRequest(
      { socketPath: this.socketPath, method: 'GET', path },
      { what: 'the engine', maxBytes: MAX_LIST_BYTES, timeoutMs: 30_000 },
    );
    if (status >= 400) throw new Error(`engine answered ${status} to GET ${path}: ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  }

  /** Compose projects with at least one container, and whether any of it runs. */
  async composeProjects(): Promise<Map<string, boolean>> {
    const filters = encodeURIComponent(JSON.stringify({ label: [PROJECT_LABEL] }));
    const containers = await this.json<Array<{ Labels?: Record<string, string>; State?: string }>>(`/containers/json?all=1&filters=${filters}`);
    const projects = new Map<string, boolean>();
    for (const c of containers) {
      const project = c.Labels?.[PROJECT_LABEL];
      if (typeof project !== 'string' || !project) continue;
      projects.set(project, (projects.get(project) ?? false) || c.State === 'running');
    }
    return projects;
  }
}
