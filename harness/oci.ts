import { createHash } from 'node:crypto';
import https from 'node:https';
import { type Duplex, Readable } from 'node:stream';
import zlib from 'node:zlib';
import { execFileSync } from 'node:child_process';
import tar from 'tar-stream';

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);
/** What a request on a kept-alive connection meets when the server had just closed it. */
const STALE = new Set(['ECONNRESET', 'EPIPE']);
/** How long a kept-alive connection may idle in the pool (below the edge's keepAliveMs). */
const IDLE_MS = 2_000;

/**
 * An agent that also drops, as a request is queued, pooled connections idle longer than IDLE_MS:
 * the idle timer cannot fire while the event loop is blocked (a test gzipping 400 MB on a loaded
 * machine blocked it past the edge's 5-s keep-alive), and the request would go out on a
 * connection the server closed meanwhile before its close is seen: "socket hang up" for a POST,
 * which is not sent twice.
 */
class FreshAgent extends https.Agent {
  private readonly idleSince = new WeakMap<object, number>();

  // typed void in @types/node; Node's returns whether to keep the socket, passed on as it is
  override keepSocketAlive(socket: Duplex): void {
    this.idleSince.set(socket, Date.now());
    return super.keepSocketAlive(socket);
  }

  dropStale(): void {
    const now = Date.now();
    for (const sockets of Object.values(this.freeSockets)) {
      for (const socket of [...(sockets ?? [])]) {
        if (now - (this.idleSince.get(socket) ?? now) <= IDLE_MS) continue;
        sockets!.splice(sockets!.indexOf(socket), 1);
        socket.destroy();
      }
    }
  }
}

/**
 * A small OCI distribution client for tests and the bench: talks to the edge on 127.0.0.1 with
 * SNI `registry.<domain>` (the machine's resolver is never touched) and trusts the service CA.
 */
export class OciClient {
  private readonly agent: FreshAgent;

  constructor(private readonly opts: { port: number; host: string; ca: string; auth?: string }) {
    // An idle connection is dropped after 2 s, before the edge's 5-s keep-alive closes it: a POST
    // (not sent twice) then never meets that close, only a client stalled for seconds could
    this.agent = new FreshAgent({ keepAlive: true, timeout: IDLE_MS, ca: opts.ca, servername: opts.host, maxSockets: 8 });
  }

  withAuth(auth: string | undefined): OciClient {
    return new OciClient({ ...this.opts, auth });
  }

  /** Basic credentials as docker sends them: any user name, the access token as password. */
  static basic(token: string): string {
    return `Basic ${Buffer.from(`user:${token}`).toString('base64')}`;
  }

  request(method: string, path: string, opts: { headers?: Record<string, string>; body?: Buffer | Readable; auth?: string | null } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
    return new Promise((resolve, reject) => {
      const auth = opts.auth === null ? undefined : opts.auth ?? this.opts.auth;
      const send = (again: boolean): void => {
        this.agent.dropStale();
        const req = https.request({
          host: '127.0.0.1', port: this.opts.port, method, path, agent: this.agent, servername: this.opts.host,
          headers: { host: `${this.opts.host}:${this.opts.port}`, ...(auth ? { authorization: auth } : {}), ...opts.headers },
        }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
          res.on('error', reject);
        });
        req.on('error', (err: NodeJS.ErrnoException) => {
          // A kept-alive connection the server closed (for idleness) as we picked it: send again
          // once on a new one, as docker's Go transport does, when sending twice is harmless.
          const resendable = IDEMPOTENT.has(method) && !(opts.body instanceof Readable);
          if (!again && resendable && req.reusedSocket && STALE.has(err.code ?? '')) return send(true);
          reject(err);
        });
        if (opts.body instanceof Readable) opts.body.pipe(req);
        else req.end(opts.body);
      };
      send(false);
    });
  }

  /** Monolithic upload: POST then PUT ?digest=. Returns the upload's final status. */
  async pushBlob(repo: string, bytes: Buffer, digest = sha256(bytes)): Promise<{ status: number; body: string }> {
    const start = await this.request('POST', `/v2/${repo}/blobs/uploads/`, { headers: { 'content-length': '0' } });
    if (start.status !== 202) return { status: start.status, body: start.body.toString() };
    const location = String(start.headers.location);
    const sep = location.includes('?') ? '&' : '?';
    const put = await this.request('PUT', `${location}${sep}digest=${encodeURIComponent(digest)}`, {
      headers: { 'content-type': 'application/octet-stream', 'content-length': String(bytes.length) },
      body: bytes,
    });
    return { status: put.status, body: put.body.toString() };
  }

  async pushManifest(repo: string, reference: string, manifest: object | Buffer, mediaType: string): Promise<{ status: number; body: string; digest?: string }> {
    const body = Buffer.isBuffer(manifest) ? manifest : Buffer.from(JSON.stringify(manifest));
    const res = await this.request('PUT', `/v2/${repo}/manifests/${reference}`, { headers: { 'content-type': mediaType, 'content-length': String(body.length) }, body });
    return { status: res.status, body: res.body.toString(), digest: res.headers['docker-content-digest'] as string | undefined };
  }

  /**
   * Pushes an image made of `layers` (tar blobs, already compressed as wanted) and an image config
   * with `env`. Returns the manifest digest.
   */
  async pushImage(repo: string, tag: string, layers: Array<{ blob: Buffer; mediaType: string }>, extra: { env?: string[]; history?: string[] } = {}): Promise<{ status: number; digest: string; body: string; manifest: object }> {
    const config = Buffer.from(JSON.stringify({
      architecture: 'amd64', os: 'linux',
      config: { Env: extra.env ?? ['PATH=/bin'] },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => sha256(l.blob)) },
      history: (extra.history ?? []).map((created_by) => ({ created_by })),
    }));
    for (const l of layers) {
      const r = await this.pushBlob(repo, l.blob);
      if (r.status !== 201) return { status: r.status, digest: '', body: r.body, manifest: {} };
    }
    const c = await this.pushBlob(repo, config);
    if (c.status !== 201) return { status: c.status, digest: '', body: c.body, manifest: {} };
    const manifest = {
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: sha256(l.blob), size: l.blob.length })),
    };
    const m = await this.pushManifest(repo, tag, manifest, manifest.mediaType);
    return { status: m.status, digest: m.digest ?? '', body: m.body, manifest };
  }

  close(): void {
    this.agent.destroy();
  }
}

export function sha256(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

export const LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';
export const LAYER_ZSTD = 'application/vnd.oci.image.layer.v1.tar+zstd';
export const LAYER_TAR = 'application/vnd.oci.image.layer.v1.tar';

/** A layer tar of these files (regular files; `null` content makes a whiteout of that path). */
export async function makeTar(files: Array<{ path: string; content: string | Buffer | null; type?: 'file' | 'directory' | 'symlink'; linkname?: string }>): Promise<Buffer> {
  const pack = tar.pack();
  for (const f of files) {
    if (f.content === null) {
      const slash = f.path.lastIndexOf('/');
      const wh = `${f.path.slice(0, slash + 1)}.wh.${f.path.slice(slash + 1)}`;
      pack.entry({ name: wh, size: 0 }, '');
    } else if (f.type === 'symlink') {
      pack.entry({ name: f.path, type: 'symlink', linkname: f.linkname });
    } else {
      pack.entry({ name: f.path, mode: 0o644 }, f.content);
    }
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

export function gzip(buf: Buffer): Buffer {
  return zlib.gzipSync(buf);
}

export function zstd(buf: Buffer): Buffer {
  return execFileSync('zstd', ['-c', '-q'], { input: buf, maxBuffer: 1024 * 1024 * 1024 });
}

/** A PEM private key made by openssl (RSA 2048, PKCS#8), for flagged fixtures. */
export function privateKeyPem(type: 'rsa' | 'ed25519' = 'rsa'): string {
  return execFileSync('openssl', type === 'rsa' ? ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048'] : ['genpkey', '-algorithm', 'ed25519'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
}
