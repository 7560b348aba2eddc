/**
 * The C reference points of the benches, from Debian's packages: nginx (nginx-light) as the TLS
 * reverse proxy (one worker, its own prefix folder, a child process the caller stops), and the
 * installer they share (socat, the TCP relay of bench/edge, comes the same way).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from '../../harness/ports.ts';

export interface NginxProxy {
  port: number;
  process: ChildProcess;
}

export interface NginxProxyOptions {
  /** Folder for its config, logs and temp files. */
  dir: string;
  serverName: string;
  /** PEM files: the certificate (with its chain) and the key. */
  certFile: string;
  keyFile: string;
  /** The upstream: a loopback port, or a unix socket path (the service's own registry listens on one). */
  upstream: number | string;
  /** Extra directives for `location /` (e.g. streaming bodies both ways). */
  location?: string;
  /**
   * The shape one public port forces on the service's data plane: a TCP listener reads the SNI and
   * relays the still-encrypted stream (PROXY v2) over a unix socket to the TLS listener. Needs the
   * stream module (`ensureNginxStream`). Without it nginx ends TLS on the port itself.
   */
  onePortSplit?: { streamModule: string };
}

/** The nginx binary, installed from Debian's packages when missing; null when that fails. */
export function ensureNginx(): string | null {
  return ensureTool('nginx', 'nginx-light', '/usr/sbin/nginx');
}

/** A reference tool of the benches, installed from Debian's packages when missing; null when that fails. */
export function ensureTool(command: string, debianPackage: string, installedPath: string): string | null {
  const which = spawnSync('sh', ['-c', `command -v ${command} || ls ${installedPath} 2>/dev/null`], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
  if (which) return which;
  console.log(`# ${command} missing: apt-get install -y ${debianPackage}`);
  const install = `apt-get install -y -qq ${debianPackage} >/dev/null 2>&1`;
  const r = spawnSync('sh', ['-c', `${install} || (apt-get update -qq >/dev/null 2>&1 && ${install})`], { stdio: 'inherit' });
  if (r.status !== 0) return null;
  return fs.existsSync(installedPath) ? installedPath : null;
}

/** nginx's stream module (SNI preread and TCP relay; not in nginx-light), installed when missing; its path, or null. */
export function ensureNginxStream(): string | null {
  return ensureTool('ngx_stream_module.so', 'libnginx-mod-stream', '/usr/lib/nginx/modules/ngx_stream_module.so');
}

/** A TLS reverse proxy on a free loopback port to `127.0.0.1:<upstreamPort>`, with kept-alive upstream connections. */
export async function startNginxProxy(bin: string, opts: NginxProxyOptions): Promise<NginxProxy> {
  const port = await freePort();
  const prefix = path.join(opts.dir, 'nginx');
  fs.mkdirSync(path.join(prefix, 'logs'), { recursive: true });
  const inner = path.join(prefix, 'tls.sock');
  fs.rmSync(inner, { force: true });
  const split = opts.onePortSplit;
  const conf = `${split ? `load_module ${split.streamModule};` : ''}
worker_processes 1;
daemon off;
${process.getuid?.() === 0 ? 'user root;' : ''}
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log warn;
events { worker_connections 4096; }
${split ? `stream {
  server { listen 127.0.0.1:${port}; ssl_preread on; proxy_pass unix:${inner}; proxy_protocol on; }
}` : ''}
http {
  access_log off;
  client_body_temp_path ${prefix}/body; proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fastcgi; uwsgi_temp_path ${prefix}/uwsgi; scgi_temp_path ${prefix}/scgi;
  upstream app { server ${typeof opts.upstream === 'string' ? `unix:${opts.upstream}` : `127.0.0.1:${opts.upstream}`}; keepalive 128; keepalive_requests 1000000; }
  server {
    listen ${split ? `unix:${inner} ssl proxy_protocol` : `127.0.0.1:${port} ssl`};
    server_name ${opts.serverName};
    ssl_certificate ${opts.certFile};
    ssl_certificate_key ${opts.keyFile};
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For ${split ? '$proxy_protocol_addr' : '$remote_addr'};
      proxy_set_header X-Forwarded-Proto https;
      ${opts.location ?? ''}
    }
  }
}
`;
  const file = path.join(prefix, 'nginx.conf');
  fs.writeFileSync(file, conf);
  const child = spawn(bin, ['-p', prefix, '-c', file], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitForPort(port);
  return { port, process: child };
}

export async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((r) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listens on ${port}`);
}
