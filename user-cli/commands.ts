import { spawn } from 'node:child_process';
import dns from 'node:dns/promises';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { StringDecoder } from 'node:string_decoder';
import tls from 'node:tls';
import { isLocalDomain } from '../core/addresses.ts';
import { Api, ApiError, readAll } from './api.ts';
import { UsageError, type Settings } from './settings.ts';

export interface Command {
  usage: string;
  help: string;
  /** Options it takes (`--name` → has a value). */
  options?: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>;
  run(ctx: Context): Promise<number | void>;
}

export interface Context {
  api: Api;
  settings: Settings;
  args: string[];
  options: Record<string, string | string[] | boolean | undefined>;
  /** This CLI's own file (ssh's ProxyCommand runs it again). */
  self: string;
}

const out = (line: string) => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stderr.write(`svc: ${line}\n`);

function sandboxOf(ctx: Context): string {
  const name = ctx.settings.sandbox;
  if (!name) throw new UsageError('no sandbox: set SVC_SANDBOX, or run in an export folder (svc.env)');
  return name;
}

/** Runs `work`; a sandbox that is asleep is woken once (as `start` does) and `work` runs again. */
async function awake<T>(ctx: Context, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== 'SVC_SANDBOX_NOT_RUNNING') throw err;
    note(`${sandboxOf(ctx)} is asleep; waking it …`);
    await start(ctx, sandboxOf(ctx));
    return work();
  }
}

/**
 * Before a command that talks to the sandbox directly (ssh, docker compose): wakes it if it sleeps.
 * One whose host does not answer (`unavailable`) cannot be woken: said at once, exit 1.
 */
async function wakeFirst(ctx: Context, sb: string): Promise<void> {
  const { status } = await sandbox(ctx, sb);
  if (status === 'running') return;
  if (status === 'unavailable') throw new ApiError(503, 'SVC_BUSY', `${sb} is unavailable: the engine that holds it does not answer (nothing is lost); try again shortly`);
  note(`${sb} is ${status === 'exited' ? 'asleep' : 'in deep sleep'}; waking it …`);
  await start(ctx, sb);
}

/** The sandbox as GET /api/sandboxes/:name answers it. */
const sandbox = (ctx: Context, name: string) => ctx.api.call(ctx.api.client.GET('/api/sandboxes/{name}', { params: { path: { name } } }));
const start = (ctx: Context, name: string) => ctx.api.call(ctx.api.client.POST('/api/sandboxes/{name}/start', { params: { path: { name } } }));

function exactArgs(ctx: Context, n: number, what: string): string[] {
  if (ctx.args.length !== n) throw new UsageError(`expected ${what}`);
  return ctx.args;
}

function dockerEnv(ctx: Context): NodeJS.ProcessEnv {
  const { folder, dockerHost } = ctx.settings;
  if (!dockerHost || !folder || !fs.existsSync(path.join(folder, 'docker', 'key.pem'))) {
    throw new UsageError('no engine access here: run in an export folder (SVC_DOCKER_HOST in svc.env, docker/ certificates)');
  }
  return { ...process.env, DOCKER_HOST: dockerHost, DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: path.join(folder, 'docker') };
}

function run(cmd: string, args: string[], env?: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: 'inherit', env });
    child.on('error', (err) => reject(new UsageError(`cannot run ${cmd}: ${(err as Error).message}; is it installed?`)));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function engineHost(ctx: Context): { host: string; port: number } {
  const url = ctx.settings.url;
  return { host: url.hostname, port: Number(url.port || 443) };
}

/** How a machine gets the service's names, for the domain SVC_URL names; `hosts` says where the /etc/hosts line is. */
function howToResolve(domain: string, hosts = 'the /etc/hosts line `svc names` prints'): string {
  return isLocalDomain(domain)
    ? `names under ${domain} are the service's own machine: there, npm run setup makes every *.localhost resolve (libnss-myhostname; on another Linux: apt-get install libnss-myhostname); browsers and curl resolve them themselves; elsewhere add ${hosts}`
    : `a wildcard DNS record *.${domain} pointing at the service makes them resolve; until the operator adds one, add ${hosts}`;
}

/** Fails with what to do when `host` does not resolve here: better than docker's or ssh's "no such host". */
async function mustResolve(ctx: Context, host: string): Promise<void> {
  try {
    await dns.lookup(host);
  } catch {
    throw new Error(`${host} does not resolve on this machine: ${howToResolve(ctx.settings.url.hostname)}`);
  }
}

/** Whether an address answers with the app (not the waiting page). */
async function answers(ctx: Context, address: string): Promise<boolean> {
  const https = await import('node:https');
  return new Promise((resolve) => {
    const req = https.request(address, { method: 'GET', ca: ctx.settings.ca, timeout: 10_000 }, (res) => {
      res.resume();
      resolve(res.headers['x-svc-waiting'] === undefined && (res.statusCode ?? 500) < 500);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export const commands: Record<string, Command> = {
  status: {
    usage: 'svc status',
    help: 'The sandbox: status (running, exited = asleep, deep_sleep, or unavailable: its host does not answer), when it sleeps, its app addresses.',
    async run(ctx) {
      const s = await sandbox(ctx, sandboxOf(ctx));
      out(`${s.name}  ${s.status}${s.stops_at ? `  sleeps at ${s.stops_at}` : ''}${s.deep_sleep_at ? `  deep sleep at ${s.deep_sleep_at}` : ''}`);
      if (s.status === 'unavailable' && s.hint) out(s.hint);
      out(`idle timeout ${s.idle_timeout}, deep sleep after ${s.deep_sleep_after}`);
      for (const u of s.tunnel_urls ?? []) out(u);
    },
  },
  ls: {
    usage: 'svc ls',
    help: 'Your sandboxes (with a token limited to one sandbox, that one).',
    async run(ctx) {
      for (const s of await ctx.api.call(ctx.api.client.GET('/api/sandboxes'))) {
        out(`${s.name.padEnd(32)} ${s.status.padEnd(11)} ${s.stops_at ?? ''}`.trimEnd());
      }
    },
  },
  create: {
    usage: 'svc create NAME',
    help: 'Create a sandbox (needs a full token: a token limited to one sandbox cannot).',
    async run(ctx) {
      const [name] = exactArgs(ctx, 1, 'one NAME: svc create NAME');
      const s = await ctx.api.call(ctx.api.client.POST('/api/sandboxes', { body: { name: name! } }));
      out(`${s.name}  ${s.status}`);
    },
  },
  fork: {
    usage: 'svc fork NEW',
    help: "Fork the sandbox into a new one named NEW: a copy of its files, images and containers, running, with its own addresses (needs a full token: the export folder's, limited to the sandbox, cannot).",
    async run(ctx) {
      const [name] = exactArgs(ctx, 1, 'one NEW name: svc fork NEW');
      const s = await ctx.api.call(ctx.api.client.POST('/api/sandboxes/{name}/fork', { params: { path: { name: sandboxOf(ctx) } }, body: { name: name! } }));
      out(`${s.name}  ${s.status}`);
    },
  },
  start: {
    usage: 'svc start',
    help: 'Wake the sandbox; returns once it runs (a second or two, a few more from deep sleep).',
    async run(ctx) {
      const s = await start(ctx, sandboxOf(ctx));
      out(`${s.name}  ${s.status}`);
    },
  },
  'keep-awake': {
    usage: 'svc keep-awake',
    help: 'Restart the idle countdown of the running sandbox (never wakes a sleeping one).',
    async run(ctx) {
      const s = await ctx.api.call(ctx.api.client.POST('/api/sandboxes/{name}/keep-awake', { params: { path: { name: sandboxOf(ctx) } } }));
      out(`${s.name}  ${s.status}${s.stops_at ? `  sleeps at ${s.stops_at}` : ''}`);
    },
  },
  urls: {
    usage: 'svc urls',
    help: "The addresses of the sandbox's apps (ports published on all interfaces).",
    async run(ctx) {
      for (const u of (await sandbox(ctx, sandboxOf(ctx))).tunnel_urls ?? []) out(u);
    },
  },
  names: {
    usage: 'svc names',
    help: "Whether this machine resolves the sandbox's names (its engine, its shell, each app) and to which address; for those it does not, how to make it and the /etc/hosts line. Exit 1 when one does not resolve.",
    async run(ctx) {
      const sb = sandboxOf(ctx);
      const domain = ctx.settings.url.hostname;
      const s = await sandbox(ctx, sb);
      const names = [`${sb}-engine.${domain}`, `${sb}-shell-tcp.${domain}`, ...((s.tunnel_urls ?? []) as string[]).map((u) => new URL(u).hostname)];
      const missing: string[] = [];
      for (const name of names) {
        const found = await dns.lookup(name, { all: true }).catch(() => []);
        if (!found.length) missing.push(name);
        out(`${name}  ${found.length ? found.map((a) => a.address).join(' ') : 'does not resolve'}`);
      }
      if (!missing.length) return 0;
      // the address the API answered on; a local domain's names are the loopback address
      const service = isLocalDomain(domain) ? '127.0.0.1' : await dns.lookup(domain, { family: 4 }).catch(() => dns.lookup(domain)).then((a) => a.address, () => undefined);
      note(howToResolve(domain, 'this line to /etc/hosts:'));
      // the API answered through a proxy or a name this machine no longer resolves: the address is the operator's to give
      if (!service) note(`${domain} itself does not resolve here either: write the service's IP address (ask its operator) in place of SERVICE-IP`);
      out(`${service ?? 'SERVICE-IP'} ${missing.join(' ')}`);
      return 1;
    },
  },
  logs: {
    usage: 'svc logs [-f] [--tail N]',
    help: "The apps' log lines (\"container | line\"); -f follows them until the sandbox sleeps.",
    options: { follow: { type: 'boolean', short: 'f' }, tail: { type: 'string' } },
    async run(ctx) {
      const sb = sandboxOf(ctx);
      const tail = String(ctx.options.tail ?? 100);
      if (!/^\d{1,4}$/.test(tail)) throw new UsageError('--tail takes a number of lines');
      const print = (l: { container: string; stream: string; line: string }) => (l.stream === 'stderr' ? process.stderr : process.stdout).write(`${l.container} | ${l.line}\n`);
      if (!ctx.options.follow) {
        for (const l of await awake(ctx, () => ctx.api.call(ctx.api.client.GET('/api/sandboxes/{name}/logs', { params: { path: { name: sb }, query: { tail } } })))) print(l);
        return;
      }
      const res = await awake(ctx, () => ctx.api.call(ctx.api.client.GET('/api/sandboxes/{name}/logs/stream', { params: { path: { name: sb }, query: { tail } }, headers: { accept: 'text/event-stream' }, parseAs: 'stream' })));
      const decoder = new StringDecoder('utf8');
      let buffer = '';
      for await (const chunk of res) {
        buffer += decoder.write(chunk as Buffer);
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (!data) continue;
          if (event === 'log') print(JSON.parse(data));
          if (event === 'end') { note(JSON.parse(data).message); return; }
        }
      }
    },
  },
  exec: {
    usage: 'svc exec [-i] [--timeout SECONDS] -- CMD [ARG…]',
    help: "Run a command as root in the sandbox (in /root); its stdout and stderr apart, its exit code passed through. -i sends this CLI's stdin. Wakes an asleep sandbox.",
    options: { interactive: { type: 'boolean', short: 'i' }, timeout: { type: 'string' } },
    async run(ctx) {
      if (!ctx.args.length) throw new UsageError('name a command: svc exec -- CMD [ARG…]');
      const timeout = ctx.options.timeout === undefined ? undefined : Number(ctx.options.timeout);
      if (timeout !== undefined && !(Number.isInteger(timeout) && timeout >= 1)) throw new UsageError('--timeout takes whole seconds (1-3600)');
      const stdin = ctx.options.interactive ? await readAll(process.stdin) : undefined;
      const res = await ctx.api.call(ctx.api.client.POST('/api/sandboxes/{name}/exec/stream', {
        params: { path: { name: sandboxOf(ctx) } }, body: { command: ctx.args, ...(stdin !== undefined ? { stdin } : {}), ...(timeout !== undefined ? { timeout } : {}) }, parseAs: 'stream',
      }));
      const decoder = new StringDecoder('utf8');
      let buffer = '';
      let exit = 1;
      for await (const chunk of res) {
        buffer += decoder.write(chunk as Buffer);
        let nl: number;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = JSON.parse(buffer.slice(0, nl));
          buffer = buffer.slice(nl + 1);
          if (line.stream === 'stdout') { if (!process.stdout.write(line.data)) await new Promise((r) => process.stdout.once('drain', r)); }
          else if (line.stream === 'stderr') process.stderr.write(line.data);
          else if (line.error) throw new ApiError(502, line.error.code, line.error.message);
          else if (typeof line.exit_code === 'number') {
            exit = line.exit_code;
            if (line.timed_out) note(`the command timed out and was killed (exit ${exit})`);
          }
        }
      }
      return exit;
    },
  },
  cp: {
    usage: 'svc cp SOURCE DEST      (one of them sandbox:/path)',
    help: 'Copy a file into the sandbox (svc cp ./a.tgz sandbox:/root/a.tgz) or out of it (svc cp sandbox:/root/out.log .); a folder comes out as a .tar.',
    async run(ctx) {
      const [from, to] = exactArgs(ctx, 2, 'SOURCE and DEST, one of them sandbox:/path');
      const remote = (p: string) => (p.startsWith('sandbox:') ? p.slice('sandbox:'.length) : undefined);
      const sb = sandboxOf(ctx);
      if (remote(from) !== undefined && remote(to) === undefined) {
        const file = { params: { path: { name: sb }, query: { path: remote(from)! } }, parseAs: 'stream' } as const;
        const res = await awake(ctx, async () => (await ctx.api.answer(ctx.api.client.GET('/api/sandboxes/{name}/files/content', file))).response);
        const name = /filename="?([^";]+)"?/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? path.basename(remote(from)!);
        const target = fs.existsSync(to) && fs.statSync(to).isDirectory() ? path.join(to, path.basename(name)) : to;
        await pipeline(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), fs.createWriteStream(target));
        note(`${remote(from)} → ${target}`);
      } else if (remote(to) !== undefined && remote(from) === undefined) {
        const size = fs.statSync(from).size;
        let dest = remote(to)!;
        if (dest.endsWith('/')) dest += path.basename(from);
        // the route reads the body as bytes (no JSON schema describes it): sent as a stream with its length
        const done = await awake(ctx, () => ctx.api.call(ctx.api.client.PUT('/api/sandboxes/{name}/files/content', {
          params: { path: { name: sb }, query: { path: dest } }, headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) },
          body: Readable.toWeb(fs.createReadStream(from)) as never, bodySerializer: (b: unknown) => b, duplex: 'half',
        })));
        note(`${from} → ${done.path} (${done.size} bytes)`);
      } else {
        throw new UsageError('one of SOURCE and DEST must be sandbox:/path, the other a local path');
      }
    },
  },
  'docker-context': {
    usage: 'svc docker-context',
    help: 'Create (or update) the docker context svc-<sandbox>, so that `docker --context svc-<sandbox> ps` works from anywhere.',
    async run(ctx) {
      const env = dockerEnv(ctx);
      const name = `svc-${sandboxOf(ctx).replace(/^svc-/, '')}`;
      const certs = env.DOCKER_CERT_PATH!;
      const spec = `host=${env.DOCKER_HOST},ca=${path.join(certs, 'ca.pem')},cert=${path.join(certs, 'cert.pem')},key=${path.join(certs, 'key.pem')}`;
      const plain = { ...process.env };
      const exists = (await new Promise<number>((r) => spawn('docker', ['context', 'inspect', name], { stdio: 'ignore', env: plain }).on('exit', (c) => r(c ?? 1)).on('error', () => r(1)))) === 0;
      const code = await run('docker', ['context', exists ? 'update' : 'create', name, '--docker', spec], plain);
      if (code === 0) out(`docker --context ${name} ps`);
      return code;
    },
  },
  up: {
    usage: 'svc up [-p PROJECT] [-- COMPOSE UP ARGS…]',
    help: 'docker compose up -d --build in the current folder against the sandbox (waking it), then the app addresses once they answer.',
    options: { project: { type: 'string', short: 'p' } },
    async run(ctx) {
      const env = dockerEnv(ctx);
      const sb = sandboxOf(ctx);
      await mustResolve(ctx, new URL(env.DOCKER_HOST!).hostname);
      await wakeFirst(ctx, sb);
      const project = typeof ctx.options.project === 'string' ? ['-p', ctx.options.project] : [];
      const code = await run('docker', ['compose', ...project, 'up', '-d', '--build', ...ctx.args], env);
      if (code !== 0) return code;
      const deadline = Date.now() + 120_000;
      for (;;) {
        const urls: string[] = (await sandbox(ctx, sb)).tunnel_urls ?? [];
        const ok = await Promise.all(urls.map((u) => answers(ctx, u)));
        if (urls.length && ok.every(Boolean)) { for (const u of urls) out(u); return 0; }
        if (Date.now() > deadline) {
          urls.forEach((u, i) => out(`${u}${ok[i] ? '' : '   (not answering yet: svc logs)'}`));
          return urls.length ? 0 : 1;
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    },
  },
  ssh: {
    usage: 'svc ssh [-- SSH ARGS…]',
    help: "A shell in the sandbox as root, over the service's TLS port (no ssh config needed; your key must be added in the web UI or POST /api/me/ssh-keys). Wakes an asleep sandbox.",
    async run(ctx) {
      const sb = sandboxOf(ctx);
      await wakeFirst(ctx, sb);
      const { host, port } = engineHost(ctx);
      const shell = `${sb}-shell-tcp.${host}`;
      await mustResolve(ctx, shell);
      const known = path.join(ctx.settings.folder ?? '.', '.svc_known_hosts');
      const envFlag = ctx.settings.folder ? ` --env ${JSON.stringify(path.join(ctx.settings.folder, 'svc.env'))}` : '';
      return run('ssh', [
        // node's own flags too: in a checkout the CLI is TypeScript run with --import tsx
        '-o', `ProxyCommand=${[process.execPath, ...process.execArgv, ctx.self].map((a) => JSON.stringify(a)).join(' ')}${envFlag} tls-pipe %h ${port}`,
        '-o', `UserKnownHostsFile=${known}`, '-o', 'StrictHostKeyChecking=accept-new',
        ...ctx.args, `root@${shell}`,
      ]);
    },
  },
  secret: {
    usage: 'svc secret set NAME [--sandbox S]… | list | rm NAME',
    help: "Your secrets: `set` reads the value from stdin (never from an argument: it would stand in your shell's history), for all your sandboxes or those named by --sandbox; `list` shows names and scopes, never values; `rm` removes one. Running sandboxes have the change when the command returns.",
    options: { sandbox: { type: 'string', multiple: true } },
    async run(ctx) {
      const [verb, name] = ctx.args;
      if (verb === 'list' && ctx.args.length === 1) {
        for (const s of await ctx.api.call(ctx.api.client.GET('/api/me/secrets'))) {
          out(`${s.name.padEnd(32)} ${(s.scope === 'all' ? 'all sandboxes' : s.scope.join(',')).padEnd(40)} ${s.updated_at}`);
        }
        return;
      }
      if (verb === 'set' && name && ctx.args.length === 2) {
        if (process.stdin.isTTY) note(`type the value of ${name}, then Ctrl-D (a final newline is dropped)`);
        const value = (await readAll(process.stdin)).replace(/\r?\n$/, '');
        const sandboxes = ctx.options.sandbox as string[] | undefined;
        const s = await ctx.api.call(ctx.api.client.PUT('/api/me/secrets/{name}', { params: { path: { name } }, body: { value, ...(sandboxes?.length ? { scope: sandboxes } : {}) } }));
        out(`${s.name} set for ${s.scope === 'all' ? 'all sandboxes' : s.scope.join(', ')}`);
        return;
      }
      if (verb === 'rm' && name && ctx.args.length === 2) {
        await ctx.api.call(ctx.api.client.DELETE('/api/me/secrets/{name}', { params: { path: { name } } }));
        out(`${name} removed`);
        return;
      }
      throw new UsageError('expected: svc secret set NAME [--sandbox S]… (value on stdin) | svc secret list | svc secret rm NAME');
    },
  },
  'tls-pipe': {
    usage: 'svc tls-pipe HOST PORT',
    help: "ssh's ProxyCommand: stdin and stdout over TLS to HOST (the service CA trusted).",
    async run(ctx) {
      const [host, port] = exactArgs(ctx, 2, 'HOST and PORT');
      const socket = tls.connect({ host, port: Number(port), servername: host, ca: ctx.settings.ca });
      await new Promise<void>((resolve, reject) => { socket.once('secureConnect', resolve); socket.once('error', reject); });
      process.stdin.pipe(socket);
      socket.pipe(process.stdout);
      await new Promise((r) => socket.once('close', r));
    },
  },
};
