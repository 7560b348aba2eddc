import http from 'node:http';

const PROJECT_LABEL = 'com.docker.compose.project';
const MAX_LIST_BYTES = 16 * 1024 * 1024;

/** The engine the tool manages, over its unix socket (mounted into the tool's container). */
export class Engine {
  constructor(readonly socketPath: string) {}

  /** A raw request to the engine API; the caller streams the body and reads the answer. */
  request(method: string, path: string, headers: http.OutgoingHttpHeaders): http.ClientRequest {
    return http.request({ socketPath: this.socketPath, method, path, headers });
  }

  async json<T>(path: string): Promise<T> {
    return new Promise((resolve, reject) => {
      const req = this.request('GET', path, {});
      req.setTimeout(30_000, () => req.destroy(new Error(`the engine did not answer GET ${path} within 30 s`)));
      req.once('error', reject);
      req.once('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > MAX_LIST_BYTES) return req.destroy(new Error(`engine answer to GET ${path} is larger than ${MAX_LIST_BYTES} bytes`));
          chunks.push(c);
        });
        res.once('error', reject);
        res.once('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if ((res.statusCode ?? 500) >= 400) return reject(new Error(`engine answered ${res.statusCode} to GET ${path}: ${text.slice(0, 300)}`));
          try {
            resolve(JSON.parse(text) as T);
          } catch (err) {
            reject(err);
          }
        });
      });
      req.end();
    });
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
